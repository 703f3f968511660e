"""The ``cluster`` tier: a real Spark standalone cluster (a master, two workers) and a Spark
Connect server on it, started once for this folder's tests by the same code as
``scripts/spark-local`` (``tools/spark_cluster.py``), and stopped after them even when tests
fail (package scope: the rest of ``make test`` does not carry its JVMs). Every test in this
folder gets the ``cluster`` marker (``pytest -m cluster``).

How to use it:

* ``spark_cluster`` (package): the running :class:`tools.spark_cluster.Cluster` —
  ``master_url`` (``spark://127.0.0.1:N``), ``connect_url`` (``sc://127.0.0.1:N``),
  ``master_ui`` / ``connect_ui`` (REST), ``run_dir``, ``python`` (the interpreter of every
  Python worker), ``worker_pids`` (``{"worker-1": pid, "worker-2": pid}``, live),
  ``executor_pids(app_id)`` (executor JVMs per worker, from the workers' process trees),
  ``kill_worker(name)`` / ``start_worker(name)``, ``submit(app, *args)`` (``spark-submit``
  to the master) and ``env()``. The Connect server runs on the cluster (its executors live
  on the workers) and has Spark's Kafka source on its classpath (``engine="spark-kafka"``),
  and S3A (``s3a://`` paths, reached with the session's ``fs.s3a.*`` settings).
* ``spark_kafka_jars`` (session): the jars ``engine="spark-kafka"`` needs, for ``spark.jars``
  of a submitted application (the Connect server has them already).
* ``package_wheel`` (session): the newest ``dist/*.whl`` (``make dist`` builds it); fails,
  saying so, when there is none. ``packed_executor_env`` (session): that wheel in a packed
  executor environment made by docs/cluster.md's recipe, with the settings and the folder to
  submit a job with it from (``tests/support/packed_env.py``).
* ``connect_spark`` (function): a Spark Connect session on that server. Creating a Connect
  session sets ``SPARK_CONNECT_MODE_ENABLED`` in this process, which turns every later
  ``SparkSession.builder`` and ``pyspark.sql.functions`` call into Connect ones; the fixture
  takes it away again on teardown so the classic ``spark`` fixture keeps working in later
  tests. Do not use ``spark`` and ``connect_spark`` in one test.
* A classic application on the cluster: this process may already hold the local[2]
  SparkContext of the ``spark`` fixture and a JVM has only one, so run the driver in its own
  process, the way a user runs a job on a cluster: ``spark_cluster.submit(app, *args)``, or
  ``run_job`` / ``running_job`` of ``tests/support/cluster.py`` with the jobs of
  ``tests/support/cluster_jobs.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import CONNECT_MODE_ENV, restored_env
from tests.support.packed_env import PackedEnv, pack
from tools.spark_cluster import Cluster
from tools.spark_cluster import spark_cluster as start_cluster

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def spark_kafka_jars() -> list[Path]:
    """The jars of Spark's own Kafka source (``engine="spark-kafka"``) that pyspark lacks,
    fetched once with Maven into ``.cache/spark-kafka/jars``; pass them as ``spark.jars``."""
    from airflow_provider_kafka_spark.spark import fetch_spark_kafka_jars

    return fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                                  ROOT / ".cache" / "spark-kafka" / "jars")


@pytest.fixture(scope="session")
def package_wheel() -> Path:
    """The newest wheel of this package in ``dist/``."""
    wheels = sorted((ROOT / "dist").glob("airflow_provider_kafka_spark-*.whl"),
                    key=lambda w: w.stat().st_mtime)
    if not wheels:
        pytest.fail(f"no wheel of the package in {ROOT / 'dist'}: run `make dist` first")
    return wheels[-1]


@pytest.fixture(scope="session")
def packed_executor_env(package_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> PackedEnv:
    """``package_wheel`` in an executor environment packed by docs/cluster.md's recipe."""
    return pack(package_wheel, tmp_path_factory.mktemp("packed-env") / "recipe",
                driver_python=sys.executable)


@pytest.fixture(scope="package")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory,
                  spark_kafka_jars: list[Path]) -> Iterator[Cluster]:
    """The local standalone cluster + Connect server (see the module docstring); the server
    has the s3a jars too (``tools/s3_jars.py``: ``s3a://`` paths with the session's
    ``fs.s3a.*`` settings)."""
    from tools.s3_jars import fetch_s3_jars

    with start_cluster(tmp_path_factory.mktemp("spark-local"),
                       jars=[*spark_kafka_jars, *fetch_s3_jars()]) as cluster:
        yield cluster


@pytest.fixture
def connect_spark(spark_cluster: Cluster) -> Iterator[Any]:
    """A Spark Connect session on ``spark_cluster``; released, and this process back in
    classic mode, after the test."""
    from airflow_provider_kafka_spark.spark import spark_session

    with restored_env(*CONNECT_MODE_ENV):
        session = spark_session(remote=spark_cluster.connect_url)
        try:
            yield session
        finally:
            session.stop()
