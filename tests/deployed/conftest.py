"""A real Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor, SQLite)
started once per test session by the same code as ``scripts/airflow-local``
(``tools/airflow_stack.py``), on the session's Kafka broker, and stopped at the end even when
tests fail. Tests drive it through the REST API only, like a user or a CI job would.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.deployed import AirflowApi
from tools.airflow_stack import airflow_stack
from tools.local_broker import free_port

# The tests' Spark jobs are tiny and the ingest tasks start a JVM each (several at once in a
# backfill, on a 2-core CI machine): a driver JVM without the C2 compiler and with the serial
# GC needs about a third less CPU for them (measured: 28 -> 18 CPU seconds for 3,000 records).
SMALL_SPARK_JOBS = {"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@pytest.fixture(scope="session")
def airflow(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowApi]:
    """The deployed Airflow, on the session's broker; stopped when the session ends."""
    with airflow_stack(tmp_path_factory.mktemp("airflow-local"), port=free_port(),
                       bootstrap=kafka_bootstrap, extra_env=SMALL_SPARK_JOBS) as stack:
        yield AirflowApi(stack)
