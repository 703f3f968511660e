"""The `tables` tier: Iceberg and Delta tables on real Spark and a real PostgreSQL.

It runs under ``.venv-tables`` (``make tables-setup``; ``make test`` runs it beside the main
suite): PySpark of the Spark line Iceberg and Delta publish runtimes for (4.1, see
``tools/source_venv.py``) and the jars of ``tools/tables/pom.xml`` (Iceberg's Spark runtime,
Delta, the PostgreSQL JDBC driver), fetched once into ``.cache/tables/jars``. Under ``.venv``'s
newer PySpark the root conftest leaves this folder out and says so in pytest's header.

Session fixtures: ``postgres`` (one server from Debian's binaries, ``tools/postgres_server.py``),
``table_spark`` (one local[2] SparkSession with both runtimes; ``spark`` is the same session
here, so shared helpers that take ``spark`` use it), the catalogs ``lake`` (Iceberg, Hadoop
catalog in a folder) and ``pg`` (Iceberg's JdbcCatalog on that PostgreSQL) in it, and
``pg_catalog``, pyiceberg's SqlCatalog on the same ``pg`` catalog. ``spark_catalog`` is Delta's,
so ``delta.`<path>``` and Delta tables by name work. The root conftest's Kafka and S3 fixtures
(``kafka_config``, ``new_topic``, ``s3_endpoint``, ``s3_bucket``, ...) apply here too, and
``table_spark`` has the s3a jars of this PySpark's Hadoop (``tools/s3_jars.py``) with the
endpoint's settings: ``s3a://<bucket>/...`` works in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tools.postgres_server import Connection, local_postgres
from tools.s3_jars import fetch_s3_jars
from tools.s3_server import S3Endpoint
from tools.table_killpoint import table_conf
from tools.tables_jars import fetch_table_jars

LAKE = "lake"
PG = "pg"


@dataclass(frozen=True)
class Warehouses:
    """Where the catalogs keep their tables' files."""

    lake: Path
    pg: Path


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Connection]:
    """One PostgreSQL server for the run (host, port, user, database, jdbc_url,
    sqlalchemy_url), stopped by pid at the end."""
    with local_postgres(tmp_path_factory.mktemp("postgres")) as connection:
        yield connection


@pytest.fixture(scope="session")
def warehouses(tmp_path_factory: pytest.TempPathFactory) -> Warehouses:
    return Warehouses(lake=tmp_path_factory.mktemp("lake-warehouse"),
                      pg=tmp_path_factory.mktemp("pg-warehouse"))


@pytest.fixture(scope="session")
def table_spark(postgres: Connection, warehouses: Warehouses,
                s3_endpoint: S3Endpoint) -> Iterator[Any]:
    """One local[2] SparkSession for the tier, with Iceberg, Delta and S3A, stopped at the
    end."""
    from airflow_provider_kafka_spark.spark import spark_session

    iceberg = "org.apache.iceberg.spark.SparkCatalog"
    session = spark_session(
        "local[2]",
        app_name="airflow-provider-kafka-spark-tables",
        jars=[*fetch_table_jars(), *fetch_s3_jars()],
        conf={
            **s3_endpoint.spark_conf(),
            **table_conf(warehouses.lake),  # Delta and the Iceberg catalog `lake`
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
