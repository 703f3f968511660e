"""Shared fixtures: one real Kafka broker, one S3 server and (lazily) one local Spark session per
test run.

The broker is started by ``scripts/kafka-broker`` unless ``KAFKA_BOOTSTRAP_SERVERS`` points at
an external one (e.g. ``docker compose up kafka``); ``KAFKA_BROKERS=3`` starts a 3-broker
cluster instead (replication factor 3, ``min.insync.replicas=2``). Every test creates its own
random topics, with the cluster's default replication factor.

The S3 server (``s3_endpoint``: versitygw, ``tools/s3_server.py``) starts on first use; each
test that asks for ``s3_bucket`` gets a new bucket. The ``spark`` session has the s3a jars
(``tools/s3_jars.py``) and the endpoint's settings, so ``s3a://<bucket>/...`` works in it.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.local_broker import local_broker
from tools.local_registry import local_registry
from tools.s3_server import S3Endpoint, local_s3
from tools.source_venv import TABLES_PYSPARK

# The shared helpers (tests/support) fail with pytest's detailed assertion messages, like the
# conftests and test modules they came from. (Before any of them is imported.)
pytest.register_assert_rewrite("tests.support")

# Airflow reads its configuration once, when first imported: point it at a throwaway home
# before any test module can import it. (Nothing above imports Airflow.)
import tests.support.airflow_env  # noqa: E402, F401  # isort: skip
from tests.support.deployed import SMALL_JVM_OPTS, SMALL_SPARK_JVM_OPTS  # noqa: E402  # isort: skip

# The suite's Spark drivers (the session fixtures, the kill-point children, the deployed
# Airflow's tasks) run many small jobs: a driver JVM with the C1 compiler only and the serial GC
# needs about a third less CPU for them (measured: 28 -> 18 CPU seconds for a 3,000-record
# ingest), and CPU is what the suite waits for on a 2-core machine running its jobs in lanes
# (tools/test_lanes.py). With the class-data-sharing archive of this PySpark that `make test`
# makes (tools/jvm_archives.py), a driver's start needs another third less (measured: 16.5-19
# -> 10.5-12 CPU seconds for a start and a small job). Set before any JVM starts; a
# SPARK_SUBMIT_OPTS of your own is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", SMALL_SPARK_JVM_OPTS)
# The same for the suite's Kafka brokers (tools/kafka_broker.py reads KAFKA_BROKER_JVM_OPTS;
# the Airflow stacks' brokers inherit it): measured on a broker's start and a small workload
# (60 topics, 120,000 transactional records, read back): 7 -> 3.7 and 13-16 -> 8-10 CPU seconds,
# the same wall time. Benchmarks' brokers keep the defaults (C2, G1).
os.environ.setdefault("KAFKA_BROKER_JVM_OPTS", SMALL_JVM_OPTS)
# And for the standalone cluster's JVMs (tools/spark_cluster.py: master, workers, Connect
# server, submitted drivers, executors), on the same PySpark's jars.
os.environ.setdefault("SPARK_CLUSTER_JVM_OPTS", SMALL_SPARK_JVM_OPTS)

# run_dag and the metadata DB and kafka_default connection it needs, for every tier that runs
# DAGs (tests/dags, tests/secured).
pytest_plugins = ["tests.support.dag_runs"]

ROOT = Path(__file__).resolve().parent.parent

# The `tables` tier (tests/tables) needs the PySpark of tools/source_venv.py (Spark 4.1: Iceberg
# and Delta publish no runtime for newer Spark); it runs under .venv-tables. Elsewhere it is not
# collected, the header says so, and naming it on the command line is an error.
TABLES_TIER = ROOT / "tests" / "tables"


def _spark_line(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _installed_pyspark() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark")
    except PackageNotFoundError:
        return "none"


PYSPARK_VERSION = _installed_pyspark()
TABLES_HERE = _spark_line(PYSPARK_VERSION) == _spark_line(TABLES_PYSPARK)
collect_ignore = [] if TABLES_HERE else ["tables"]


def pytest_report_header(config: pytest.Config) -> str:
    if TABLES_HERE:
        return (f"tables tier: pyspark {PYSPARK_VERSION} (.venv-tables), Iceberg and Delta jars "
                "from tools/tables/pom.xml")
    return (f"tables tier (tests/tables): not collected under pyspark {PYSPARK_VERSION}; it runs "
            f"under .venv-tables (pyspark {TABLES_PYSPARK}): .venv-tables/bin/pytest tests/tables "
            "(make test runs both)")


def pytest_configure(config: pytest.Config) -> None:
    if TABLES_HERE:
        return
    base = config.invocation_params.dir
    for arg in config.args:
        path = (base / arg.split("::", 1)[0]).resolve()
        if path == TABLES_TIER or TABLES_TIER in path.parents:
            raise pytest.UsageError(
                f"tests/tables runs under .venv-tables (pyspark {TABLES_PYSPARK}, not "
                f"{PYSPARK_VERSION}): make tables-setup, then .venv-tables/bin/pytest {arg}")

# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after
# pytest closed its streams ("--- Logging error ---" noise).
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``bootstrap.servers`` of the broker the tests use."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with local_broker(external, run_dir=tmp_path_factory.mktemp("kafka-broker"),
                      brokers=int(os.environ.get("KAFKA_BROKERS", "1"))) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def kafka_config(kafka_bootstrap: str) -> dict[str, Any]:
    """The librdkafka config every test client uses."""
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The ``schema_registry`` config of one real registry (``scripts/schema-registry``,
    Confluent's REST API) for the whole run, started on first use."""
    with local_registry(tmp_path_factory.mktemp("schema-registry")) as url:
        yield {"url": url}


@pytest.fixture(scope="session")
def kafka_admin(kafka_config: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(kafka_config)


@pytest.fixture
def new_topic(kafka_admin: Any) -> Iterator[Callable[..., str]]:
    """Factory: ``new_topic(partitions=3, **topic_config)`` creates a random topic, deleted after."""
    from tests.support.topics import create_topic

    created: list[str] = []

    def create(partitions: int = 3, prefix: str = "t", **config: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        created.append(name)
        return create_topic(kafka_admin, name, partitions, **config)

    yield create
    if created:
        for future in kafka_admin.delete_topics(created).values():
            future.result(timeout=30)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """One S3 server (versitygw on loopback, ``scripts/s3``) for the whole run, stopped by pid
    at the end: ``url``, ``access_key``, ``secret_key``, ``region``, and ``spark_conf()``,
    ``pyarrow_fs()``, ``boto3_client()``."""
    with local_s3(tmp_path_factory.mktemp("s3")) as endpoint:
        yield endpoint


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> str:
    """A new, empty bucket with a random name on ``s3_endpoint`` (left there after the test:
    the server's folder goes with the run's temporary files)."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_endpoint.create_bucket(name)
    return name


@pytest.fixture(scope="session")
def spark(s3_endpoint: S3Endpoint) -> Iterator[Any]:
    """One local[2] SparkSession for the whole run (it takes seconds to start).

    Spark's own Kafka source (for ``engine="spark-kafka"``) is on the classpath: its jars are
    fetched once with Maven from ``tools/spark-kafka/pom.xml`` into ``.cache/spark-kafka/jars``.
    So is S3A (``tools/s3_jars.py``, fetched once into ``.cache/s3``), pointed at
    ``s3_endpoint``: ``s3a://<bucket>/...`` paths work. With spark-hadoop-cloud among those jars
    Spark writes through ``PathOutputCommitProtocol`` (the S3A magic committer on ``s3a://``,
    Hadoop's ``FileOutputCommitter`` on local paths, as without it).
    """
    from airflow_provider_kafka_spark.spark import fetch_spark_kafka_jars, spark_session
    from tools.s3_jars import fetch_s3_jars

    jars = fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                                  ROOT / ".cache" / "spark-kafka" / "jars")
    session = spark_session(
        "local[2]",
        app_name="airflow-provider-kafka-spark-tests",
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4",
              **s3_endpoint.spark_conf()},
        jars=[*jars, *fetch_s3_jars()],
    )
    try:
        yield session
    finally:
        session.stop()
