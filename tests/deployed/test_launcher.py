"""``scripts/airflow-local`` as a user drives it, on the session's stack (started with
``extra_dags``, which is what ``start --dags FOLDER`` passes): a DAG file of the user's own in
that folder is parsed beside the example DAGs and its run resolves exactly the offsets produced;
``start --dags FOLDER`` against the running stack answers with it, and ``airflow ARGS`` runs
Airflow's CLI on it; ``restart scheduler`` ends the scheduler, starts a new one (a new pid, the
old one gone) and returns with the stack healthy, and the user's DAG runs again under the new
scheduler and resolves the new offsets.
The default metadata DB is PostgreSQL where its binaries are (the session's stack is the
default one), SQLite where they are missing; what ``start`` prints of a stack on SQLite says
what fails on it (and why it is SQLite, when PostgreSQL is missing); of one on PostgreSQL,
nothing of the kind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.deployed import AirflowApi
from tools.airflow_stack import (
    EXAMPLE_DAGS,
    HEALTH_COMPONENTS,
    ROOT,
    Stack,
    default_db,
    login_hint,
    sqlite_url,
)
from tools.kafka_records import produce
from tools.processes import alive, read_pid

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

LAUNCHER = ROOT / "scripts" / "airflow-local"
ON_SQLITE = ("SQLite takes one writer at a time: `airflow backfill create` fails on it and "
             "parallel runs can fail; backfills want PostgreSQL (--db postgres)")
NO_POSTGRES = ("PostgreSQL's server binaries were not found (apt-get install postgresql, "
               "or set POSTGRES_BINDIR): the metadata DB is SQLite")
PARSE_TIMEOUT_S = 90.0  # the extra bundle is looked at every 2 s; a parse takes a few seconds

DAG_FILE = '''
import pendulum
from airflow.sdk import DAG
from airflow_provider_kafka_spark.operators import KafkaResolveOffsetsOperator

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         is_paused_upon_creation=False):
    KafkaResolveOffsetsOperator(task_id="resolve_offsets", topics={topic!r},
                                start="earliest", stop="latest")
'''


def launcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True,
                          text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)


def resolved(airflow: AirflowApi, dag_id: str) -> list[tuple[int, int, int]]:
    """Trigger ``dag_id`` once; the (partition, start, stop) its resolve task found."""
    run_id = airflow.trigger(dag_id, {})
    run = airflow.wait(dag_id, run_id)
    assert run["state"] == "success", airflow.failure_report(dag_id, run_id)
    ranges = airflow.xcom(dag_id, run_id, "resolve_offsets")
    return [(r["partition"], r["start"], r["stop"]) for r in ranges["ranges"]]


@pytest.mark.timeout(420)
def test_a_dag_folder_of_ones_own_and_a_restarted_scheduler(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any]) -> None:
    stack = airflow.stack
    assert stack.extra_dags is not None
    dags = Path(stack.extra_dags)
    topic = new_topic(partitions=2)
    dag_id = f"my_own_{topic.split('-')[-1]}"
    # Recent timestamps: the broker's retention (7 days) deletes records stamped long ago,
    # which moved "earliest" past them mid-test once (a segment rolled).
    now = int(time.time() * 1000)
    produce(kafka_config, topic, [(0, b"a", b"1", now), (0, b"b", b"2", now + 1),
                                  (0, b"c", b"3", now + 2), (1, b"d", b"4", now),
                                  (1, b"e", b"5", now + 1)])
    (dags / f"{dag_id}.py").write_text(DAG_FILE.format(dag_id=dag_id, topic=topic))
    try:
        # `start --dags FOLDER` on the running stack (the default DB): the same stack.
        again = launcher("start", "--dir", str(stack.run_dir), "--dags", str(dags))
        assert again.returncode == 0, again.stderr
        assert f"your DAGs: {dags} (the bundle 'extra'" in again.stdout, again.stdout
        assert "metadata DB: postgresql+psycopg2://" in again.stdout, again.stdout
        assert "SQLite" not in again.stdout, again.stdout
        other = launcher("start", "--dir", str(stack.run_dir), "--dags", str(dags.parent))
        assert other.returncode == 1
        assert f"runs with the DAGs of {dags}, not {dags.parent}" in other.stderr, other.stderr

        airflow.wait_parsed(dag_id, PARSE_TIMEOUT_S)
        listed = {d["dag_id"] for d in airflow.call("GET", "/api/v2/dags?limit=100")["dags"]}
        assert {dag_id, *EXAMPLE_DAGS} <= listed
        # `airflow-local airflow ARGS` (README's backfill steps): Airflow's CLI on the stack's DB.
        cli = launcher("airflow", "--dir", str(stack.run_dir), "dags", "list", "-o", "json")
        assert cli.returncode == 0, cli.stderr
        assert [name for name in (dag_id, *EXAMPLE_DAGS) if f'"{name}"' not in cli.stdout] == []
        assert resolved(airflow, dag_id) == [(0, 0, 3), (1, 0, 2)]

        before = read_pid(stack.run_dir, "scheduler")
        assert before is not None
        restarted = launcher("restart", "scheduler", "--dir", str(stack.run_dir))
        assert restarted.returncode == 0, restarted.stderr
        after = read_pid(stack.run_dir, "scheduler")
        assert after is not None and after != before and not alive(before)
        assert f"airflow scheduler runs again (pid {after})" in restarted.stdout
        health = airflow.call("GET", "/api/v2/monitor/health")
        assert {c: health[c]["status"] for c in HEALTH_COMPONENTS} == {
            c: "healthy" for c in HEALTH_COMPONENTS}

        # The new scheduler runs the user's DAG: a new run resolves the new offsets.
        produce(kafka_config, topic, [(0, b"f", b"6", now + 3)])
        assert resolved(airflow, dag_id) == [(0, 0, 4), (1, 0, 2)]
    finally:
        (dags / f"{dag_id}.py").unlink(missing_ok=True)


def test_restart_refuses_an_unknown_service_and_a_folder_without_a_stack(
        tmp_path: Path) -> None:
    unknown = launcher("restart", "webserver", "--dir", str(tmp_path))
    assert unknown.returncode == 2
    assert "invalid choice: 'webserver'" in unknown.stderr
    nothing = launcher("restart", "scheduler", "--dir", str(tmp_path))
    assert nothing.returncode == 1
    assert f"no Airflow was started in {tmp_path}" in nothing.stderr
    missing = launcher("start", "--dir", str(tmp_path), "--dags", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert "--dags" in missing.stderr and "no such folder" in missing.stderr
    assert not (tmp_path / "stack.json").exists()



def sqlite_stack(run_dir: Path) -> Stack:
    return Stack(run_dir=run_dir, url="http://127.0.0.1:8080", username="admin",
                 password="secret", bootstrap="127.0.0.1:9092", broker_started=False,
                 database=sqlite_url(run_dir))


def test_start_on_sqlite_says_what_fails_on_it(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # What `start --db sqlite` prints once the stack is ready (login_hint), where PostgreSQL's
    # binaries are: the line right after the metadata DB's.
    monkeypatch.delenv("POSTGRES_BINDIR", raising=False)
    lines = login_hint(sqlite_stack(tmp_path)).splitlines()
    at = lines.index(f"metadata DB: {sqlite_url(tmp_path)}")
    assert lines[at + 1] == ON_SQLITE
    assert [line for line in lines if "SQLite" in line] == [ON_SQLITE]


def test_the_default_db_is_postgres_where_its_binaries_are_else_sqlite_and_start_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POSTGRES_BINDIR", raising=False)
    assert default_db() == "postgres"  # Debian's postgresql, which make test needs too
    monkeypatch.setenv("POSTGRES_BINDIR", str(tmp_path))  # no initdb, no postgres there
    assert default_db() == "sqlite"
    lines = login_hint(sqlite_stack(tmp_path)).splitlines()
    at = lines.index(f"metadata DB: {sqlite_url(tmp_path)}")
    assert lines[at + 1:at + 3] == [NO_POSTGRES, ON_SQLITE]
