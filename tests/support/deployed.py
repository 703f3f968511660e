"""The suite's real Airflow (``tests/deployed``, ``tests/tables``): ``deployed_airflow`` starts
one on PostgreSQL, ``AirflowApi`` is the tests' client of its REST API."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tools.airflow_stack import EXAMPLE_DAGS, NO_POSTGRES_NOTE, Stack, airflow_stack, default_db
from tools.jvm_archives import spark_archive_options
from tools.processes import free_port

RUN_TIMEOUT_S = 180.0
# The tests' Spark jobs are tiny and the ingest tasks start a JVM each (several at once in a
# backfill, on a 2-core CI machine): a driver JVM without the C2 compiler and with the serial
# GC needs about a third less CPU for them (measured: 28 -> 18 CPU seconds for 3,000 records).
SMALL_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The JVM options of the suite's small, short-lived JVMs (Spark drivers, Kafka brokers)."""
SMALL_SPARK_JVM_OPTS = SMALL_JVM_OPTS + spark_archive_options()
"""Those of its Spark JVMs: also the class-data-sharing archive of this PySpark, when
``make test`` made it (``tools/jvm_archives.py``: a driver's start needs a third less CPU)."""
SMALL_SPARK_JOBS = {"SPARK_SUBMIT_OPTS": SMALL_SPARK_JVM_OPTS}
# The dag-processor parses a new or changed DAG file at once (a new one when its bundle is
# looked at; a changed one on its next loop: Airflow's default file_parsing_sort_mode,
# modified_time), and every file again each min_file_process_interval (30 s by default): in a
# test stack, the example DAG files over and over, most of an idle stack's CPU (measured at
# load 20: the dag-processor 0.14 -> 0.01 cores, the whole stack 0.18 -> 0.05). Once an hour
# here; what that re-parse also did, move a scheduled DAG's next run on, AirflowApi.unpause
# asks for when it is due (see there).
TEST_STACK_ENV = {**SMALL_SPARK_JOBS, "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600"}
"""What the test stacks' services get beside the launcher's settings (``extra_env``)."""
PARSE_TIMEOUT_S = 120.0


@contextmanager
def deployed_airflow(run_dir: Path, *, bootstrap: str, extra_env: Mapping[str, str] | None = None,
                     dags: Sequence[str] = EXAMPLE_DAGS,
                     extra_dags: Path | None = None) -> Iterator[AirflowApi]:
    """A real Airflow for tests (``tools/airflow_stack.airflow_stack``, the launcher's code) in
    ``run_dir``, on ``bootstrap``'s broker, its services with ``TEST_STACK_ENV`` and
    ``extra_env``, ready once ``dags`` are parsed; stopped at the end, also on failure.

    Its metadata DB is the launcher's default, as a user gets it from ``scripts/airflow-local
    start``: a PostgreSQL server of its own, deleted with it, as production Airflow runs. On
    SQLite, one writer at a time, a loaded machine made writes lose the lock (a task that had
    done its work and pushed its XCom marked failed; ``airflow backfill create`` refused), so
    no Airflow of the suite's services runs on SQLite: where the default would be SQLite
    (PostgreSQL's binaries missing) this fails before starting anything.
    """
    if default_db() != "postgres":
        raise RuntimeError(f"{NO_POSTGRES_NOTE}; the deployed tests need PostgreSQL")
    with airflow_stack(run_dir, port=free_port(), bootstrap=bootstrap,
                       extra_env={**TEST_STACK_ENV, **(extra_env or {})}, dags=dags,
                       extra_dags=extra_dags) as stack:
        yield AirflowApi(stack)


class AirflowApi:
    """A tiny REST client: a JWT from ``POST /auth/token``, then JSON in and out."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.token = stack.token()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One request; the JSON answer. An HTTP error fails the test with the answer's text."""
        request = urllib.request.Request(
            f"{self.stack.url}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path} -> {exc.code}: {exc.read().decode()}") from None
        return json.loads(text) if text else None

    def wait_parsed(self, dag_id: str, timeout: float = 60.0) -> None:
        """Until the DAG processor has parsed ``dag_id`` (an import error of its file fails
        the test with the error's stack trace)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.call("GET", f"/api/v2/dags/{dag_id}")
                return
            except AssertionError:
                errors = self.call("GET", "/api/v2/importErrors?limit=100")["import_errors"]
                mine = [e for e in errors if dag_id in e["filename"]]
                assert not mine, mine[0]["stack_trace"]
                assert time.monotonic() < deadline, f"{dag_id} was not parsed in {timeout:.0f} s"
                time.sleep(0.5)

    def unpause(self, dag_id: str) -> None:
        self.schedule_current(dag_id)
        assert self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})["is_paused"] is False

    def schedule_current(self, dag_id: str) -> None:
        """Until ``dag_id``'s next scheduled run is the one the scheduler would choose now.

        The dag-processor sets a DAG's next run when it parses the file (without catchup: the
        latest complete interval), and a test stack parses an unchanged file once an hour
        (``TEST_STACK_ENV``). A DAG unpaused with a next run from an hour before would get that
        run and then the current one, so a scheduled DAG last parsed before the current hour
        began is parsed again first (``PUT /parseDagFile``; the schedules here are hourly).
        """
        dag = self.call("GET", f"/api/v2/dags/{dag_id}")
        parsed = datetime.fromisoformat(dag["last_parsed_time"])
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        if dag["next_dagrun_run_after"] is None or parsed >= hour:
            return
        self.call("PUT", f"/api/v2/parseDagFile/{dag['file_token']}")
        deadline = time.monotonic() + PARSE_TIMEOUT_S
        while datetime.fromisoformat(
                self.call("GET", f"/api/v2/dags/{dag_id}")["last_parsed_time"]) <= parsed:
            assert time.monotonic() < deadline, \
                f"{dag_id} was not parsed again within {PARSE_TIMEOUT_S:.0f} s"
            time.sleep(0.5)

    def pause(self, dag_id: str) -> None:
        assert self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": True})["is_paused"] is True

    def trigger(self, dag_id: str, conf: dict[str, Any], logical_date: str | None = None) -> str:
        run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                        {"logical_date": logical_date, "conf": conf})
        return str(run["dag_run_id"])

    def wait(self, dag_id: str, run_id: str, timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        """The run once it is finished (success or failed)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
        deadline = time.monotonic() + timeout
        while True:
            run = self.call("GET", path)
            if run["state"] in ("success", "failed"):
                return dict(run)
            assert time.monotonic() < deadline, f"{dag_id} {run_id} still {run['state']}"
            time.sleep(1.0)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        tis = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/"
                               f"{urllib.parse.quote(run_id, safe='')}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in tis["task_instances"]}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/"
                                f"{urllib.parse.quote(run_id, safe='')}/taskInstances/{task_id}"
                                f"/xcomEntries/{key}")["value"]

    def failure_report(self, dag_id: str, run_id: str) -> str:
        """Task states and the last log lines of every failed task (for assertion messages)."""
        states = self.task_states(dag_id, run_id)
        report = [f"{dag_id} {run_id}: {states}"]
        for task_id, state in states.items():
            if state == "failed":
                report.append(f"--- {task_id} log (tail) ---")
                report.append("\n".join(self.log(dag_id, run_id, task_id).splitlines()[-40:]))
        return "\n".join(report)

    def log_entries(self, dag_id: str, run_id: str, task_id: str,
                    try_number: int = 1) -> list[Any]:
        """The task's log as the REST API serves it: structured entries (dicts with ``event``,
        ``level``...) and plain lines."""
        return list(self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/"
                                     f"{urllib.parse.quote(run_id, safe='')}/taskInstances/"
                                     f"{task_id}/logs/{try_number}?full_content=true")["content"])

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        content = self.log_entries(dag_id, run_id, task_id, try_number)
        # Structured lines: the exception (type, message, frames) is in fields beside "event".
        return "\n".join(json.dumps(line) if isinstance(line, dict) else str(line)
                         for line in content)
