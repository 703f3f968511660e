"""A real Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor) on a
PostgreSQL metadata DB, as production Airflow and docker-compose.yml run, started once per test
session by the same code as ``scripts/airflow-local start`` with its default metadata DB
(``tests/support/deployed.deployed_airflow``: ``tools/airflow_stack.py``; the server from
Debian's binaries, ``tools/postgres_server.py``), on the session's Kafka broker, and stopped at
the end even when tests fail (the server too, its data deleted). Tests drive it through the
REST API only, like a user or a CI job would.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.deployed import AirflowApi, deployed_airflow


@pytest.fixture(scope="session")
def airflow(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowApi]:
    """The deployed Airflow, on the session's broker and its own PostgreSQL; stopped when the
    session ends. Tests put DAG files of their own in ``stack.extra_dags`` (a second DAG
    bundle, looked at every 2 s)."""
    run_dir = tmp_path_factory.mktemp("airflow-local")
    with deployed_airflow(run_dir, bootstrap=kafka_bootstrap,
                          extra_dags=run_dir / "extra-dags") as airflow:
        yield airflow
