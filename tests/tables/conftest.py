"""The `tables` tier: Iceberg and Delta tables on real Spark and a real PostgreSQL.

It runs under ``.venv-tables`` (``make tables-setup``; ``make test`` runs it beside the main
suite): PySpark of the Spark line Iceberg and Delta publish runtimes for (4.1, see
``tools/source_venv.py``) and the jars of ``tools/tables/pom.xml`` (Iceberg's Spark runtime,
Delta, the PostgreSQL JDBC driver), fetched once into ``.cache/tables/jars``. Under ``.venv``'s
newer PySpark the root conftest leaves this folder out and says so in pytest's header.

Session fixtures: ``postgres`` (one server from Debian's binaries, ``tools/postgres_server.py``),
``table_spark`` (one local[2] SparkSession with both runtimes; ``spark`` is the same session
here, so shared helpers that take ``spark`` use it), the catalogs ``lake`` (Iceberg, Hadoop
catalog in a folder), ``pg`` (Iceberg's JdbcCatalog on that PostgreSQL) and ``s3`` (the same
JdbcCatalog, its warehouse on the suite's S3 server: ``s3_lake``) in it, and ``pg_catalog`` /
``s3_catalog``, pyiceberg's SqlCatalog on the same ``pg`` / ``s3`` catalog (``s3_catalog`` reads
the table's files from S3). ``spark_catalog`` is Delta's, so ``delta.`<path>``` and Delta tables
by name work; Delta tables on S3 are paths under ``warehouses.s3``. The root conftest's Kafka
and S3 fixtures (``kafka_config``, ``new_topic``, ``s3_endpoint``, ``s3_bucket``, ...) apply here
too, and ``table_spark`` has the s3a jars of this PySpark's Hadoop (``tools/s3_jars.py``) with
the endpoint's settings: ``s3a://<bucket>/...`` works in it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tools.postgres_server import Connection, local_postgres
from tools.s3_jars import fetch_s3_jars
from tools.s3_server import S3Endpoint
from tools.table_killpoint import S3_CATALOG, S3Lake, table_conf
from tools.tables_jars import fetch_table_jars

LAKE = "lake"
PG = "pg"


@dataclass(frozen=True)
class Warehouses:
    """Where the catalogs keep their tables' files: local folders, and a bucket of the S3
    server (``s3a://<bucket>``: the catalog ``s3``'s warehouse and Delta tables on S3)."""

    lake: Path
    pg: Path
    s3: str

    def of(self, kind: str) -> Path | str:
        """Where ``tests.tables.cases.create`` puts a table of ``kind`` (``*-s3``: on S3)."""
        return self.s3 if kind.endswith("-s3") else self.lake


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Connection]:
    """One PostgreSQL server for the run (host, port, user, database, jdbc_url,
    sqlalchemy_url), stopped by pid at the end."""
    with local_postgres(tmp_path_factory.mktemp("postgres")) as connection:
        yield connection


@pytest.fixture(scope="session")
def warehouses(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: S3Endpoint) -> Warehouses:
    bucket = f"tables-{uuid.uuid4().hex[:10]}"
    s3_endpoint.create_bucket(bucket)
    return Warehouses(lake=tmp_path_factory.mktemp("lake-warehouse"),
                      pg=tmp_path_factory.mktemp("pg-warehouse"), s3=f"s3a://{bucket}")


@pytest.fixture(scope="session")
def s3_lake(postgres: Connection, warehouses: Warehouses, s3_endpoint: S3Endpoint) -> S3Lake:
    """The catalog ``s3``: Iceberg's JdbcCatalog on ``postgres``, its warehouse
    ``<warehouses.s3>/iceberg`` on the S3 server, through S3A."""
    return S3Lake(s3_endpoint, f"{warehouses.s3}/iceberg", postgres.jdbc_url, postgres.user)


@pytest.fixture(scope="session")
def table_spark(postgres: Connection, warehouses: Warehouses, s3_lake: S3Lake) -> Iterator[Any]:
    """One local[2] SparkSession for the tier, with Iceberg, Delta and S3A, stopped at the
    end."""
    from airflow_provider_kafka_spark.spark import spark_session

    iceberg = "org.apache.iceberg.spark.SparkCatalog"
    session = spark_session(
        "local[2]",
        app_name="airflow-provider-kafka-spark-tables",
        jars=[*fetch_table_jars(), *fetch_s3_jars()],
        conf={
            # Delta, the Iceberg catalogs `lake` and `s3`, S3A on the S3 server
            **table_conf(warehouses.lake, s3_lake),
            # Managed (catalog) Delta tables go to a temporary folder, not the working dir.
            "spark.sql.warehouse.dir": warehouses.lake.joinpath("spark-warehouse").as_uri(),
            f"spark.sql.catalog.{PG}": iceberg,
            f"spark.sql.catalog.{PG}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            f"spark.sql.catalog.{PG}.uri": postgres.jdbc_url,
            f"spark.sql.catalog.{PG}.jdbc.user": postgres.user,
            f"spark.sql.catalog.{PG}.jdbc.schema-version": "V1",
            f"spark.sql.catalog.{PG}.warehouse": warehouses.pg.as_uri(),
        },
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark(table_spark: Any) -> Any:
    """In this tier ``spark`` is ``table_spark`` (one JVM; the root fixture's session would
    fetch Spark's Kafka jars for this PySpark and come back as this one anyway)."""
    return table_spark


@pytest.fixture(scope="session")
def pg_catalog(postgres: Connection, warehouses: Warehouses) -> Any:
    """pyiceberg's SqlCatalog on the ``pg`` catalog: the same catalog name, PostgreSQL
    database and warehouse as Spark's JdbcCatalog."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(PG, uri=postgres.sqlalchemy_url, warehouse=warehouses.pg.as_uri())


@pytest.fixture(scope="session")
def s3_catalog(postgres: Connection, s3_lake: S3Lake) -> Any:
    """pyiceberg's SqlCatalog on the ``s3`` catalog, reading the tables' files from S3 with
    its own S3 client (pyarrow's), configured by its ``s3.*`` properties."""
    from pyiceberg.catalog.sql import SqlCatalog

    from tests.tables.cases import pyiceberg_s3_properties

    return SqlCatalog(S3_CATALOG, uri=postgres.sqlalchemy_url, warehouse=s3_lake.warehouse,
                      **pyiceberg_s3_properties(s3_lake.endpoint))
