"""A pytest plugin (``pytest_plugins`` of the root conftest): run the example DAGs with
``dag.test()`` against the real broker and the shared Spark session.

Airflow is pointed at a throwaway home first (``airflow_env``, imported by the root conftest);
the SQLite metadata DB is migrated once per session; the ``kafka_default`` connection comes
from an ``AIRFLOW_CONN_KAFKA_DEFAULT`` environment variable naming the test broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import airflow_env


@dataclass
class DagRunOutcome:
    """What a ``dag.test()`` run left behind."""

    state: str
    data_interval: tuple[datetime | None, datetime | None]
    task_states: dict[str, str]
    xcom: dict[str, Any]
    errors: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB in the test Airflow home."""
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True,
                   env=os.environ.copy(), timeout=300)
    return airflow_env.AIRFLOW_HOME


@pytest.fixture(scope="session")
def kafka_connection(kafka_config: dict[str, Any]) -> Iterator[None]:
    """``kafka_default`` points at the test broker for the whole session."""
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
        {"conn_type": "kafka", "extra": kafka_config})
    yield
    os.environ.pop("AIRFLOW_CONN_KAFKA_DEFAULT", None)


@pytest.fixture
def run_dag(airflow_db: Path, kafka_connection: None, spark: Any
            ) -> Callable[..., DagRunOutcome]:
    """``run_dag(dag_id, logical_date=..., conf={...}, edit=callable(dag), run_after=...)`` runs a
    fresh copy of the DAG file once with ``dag.test()`` (no retries) and returns its outcome;
    ``errors`` maps each failed task to its exception text. The run id is
    ``manual__<run_after>`` (default: now): the same ``run_after`` again replaces that run and
    its XCom, as a clear of the whole run does."""

    def run(dag_id: str, *, logical_date: datetime | None, conf: dict[str, Any],
            edit: Callable[[Any], None] | None = None,
            run_after: datetime | None = None) -> DagRunOutcome:
        from airflow.dag_processing.dagbag import DagBag
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        bag = DagBag(dag_folder=str(airflow_env.DAGS_FOLDER / f"{dag_id}.py"))
        assert not bag.import_errors, bag.import_errors
        dag = bag.get_dag(dag_id)
        errors: dict[str, str] = {}

        def record(context: Any) -> None:
            errors[context["ti"].task_id] = str(context["exception"])

        for task in dag.tasks:
            task.retries = 0
            task.on_failure_callback = [record]
        if edit is not None:
            edit(dag)
        dag_run = dag.test(logical_date=logical_date, run_conf=conf, run_after=run_after)
        with create_session() as session:
            states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}
            rows = session.query(XComModel).filter(
                XComModel.dag_id == dag_id, XComModel.run_id == dag_run.run_id,
                XComModel.key == "return_value").all()
            xcom = {row.task_id: row.value for row in rows}
        return DagRunOutcome(str(dag_run.state),
                             (dag_run.data_interval_start, dag_run.data_interval_end),
                             states, xcom, errors)

    return run
