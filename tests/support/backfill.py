"""The 24-hour backfill both deployed Airflows run (``tests/deployed/test_backfill.py`` into
hourly folders, ``tests/tables/test_backfill_into_tables.py`` into Iceberg): the topic's
arrangement, which hour each record belongs to, and ``airflow backfill create`` driven like a
user would, then checked through the REST API.

Which hour a record belongs in: a run reads ``[timestamp:start, timestamp:end)``, and Kafka's
timestamp lookup answers the first offset stamped ``>= T``. So offsets are tiled, and a record
lands in the hour of the newest timestamp at or before it in its partition: its own hour, unless
it is late (stamped before a record produced earlier), then the hour it arrived in.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.deployed import AirflowApi
from tools.kafka_records import (
    MINUTE_MS,
    Record,
    consume_all,
    produce,
    transactional_producer,
    wait_for_markers,
)

HOURS = 24
HOUR_MS = 60 * MINUTE_MS
# Recent and hour-aligned (the broker's retention would delete old CreateTimes). The range ends
# two hours before the current one, so the DAG's own scheduled run (catchup=False: the last
# complete hour) never overlaps it, and every transaction marker (stamped when the test runs)
# is later than every interval bound.
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS + 2)
MS0 = int(T0.timestamp() * 1000)
BACKFILL_TIMEOUT_S = 1200.0
# How long `airflow backfill create` is tried again while SQLite reports "database is
# locked": 120 s ran out once with the machine at load 9-10 (the tables tier's backfill with
# --reprocess-behavior completed, which clears 24 runs in the same transaction).
LOCKED_RETRY_S = 300.0


def at(hour: int, minute: int = 0, ms: int = 0) -> int:
    """Epoch millis ``hour`` hours (and minutes, millis) after the first interval's start."""
    return MS0 + hour * HOUR_MS + minute * MINUTE_MS + ms


def record(partition: int, ts: int, note: str = "") -> Record:
    hour, rest = divmod(ts - MS0, HOUR_MS)
    return (partition, f"k{partition}".encode(),
            f"p{partition} h{hour:02d}+{rest}ms{note}".encode(), ts)


def produce_hours(kafka_config: dict[str, Any], kafka_admin: Any, topic: str) -> list[bytes]:
    """Arrange the topic (3 partitions); return the values of the aborted records.

    Four hours hold records (0, 11, 21, 23), twenty are empty: every ingest of a non-empty hour
    starts a Spark JVM (an empty one starts none), which is what a backfill's time goes to.
    Why each partition holds what it holds is said below.
    """
    # p0: a record 1 ms before the range, hour 0's first and last millisecond, hour 11, and
    #     hour 23's first and last millisecond: p0 ends inside the range, so hour 23's stop on
    #     p0 is "latest" when resolved.
    produce(kafka_config, topic, [record(0, ts) for ts in (
        at(0) - 1, at(0), at(1) - 1, at(11, 30), at(23), at(24) - 1)])
    # p1: two late records after hour 11's (stamped 03:30 and 05:15: they belong to hour 11,
    #     hours 3 and 5 stay empty), hour 23, an aborted transaction inside hour 23's range,
    #     then a record stamped exactly at the range's end.
    produce(kafka_config, topic, [record(1, at(0, 30)), record(1, at(11)), record(1, at(12) - 1),
                                  record(1, at(3, 30), " late"), record(1, at(5, 15), " late"),
                                  record(1, at(23, 10))])
    aborted = [record(1, at(23, 20), " aborted"), record(1, at(9), " aborted late")]
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()
    produce(kafka_config, topic, aborted, producer=producer)
    producer.flush(30)
    producer.abort_transaction(30)
    produce(kafka_config, topic, [record(1, at(HOURS), " after")])
    # p2: hour 11, then a committed transaction (its marker, stamped now, ends hour 23's range):
    #     21:10, a late 02:05 (it belongs to hour 21), 23:45.
    produce(kafka_config, topic, [record(2, at(11, 45))])
    producer.begin_transaction()
    produce(kafka_config, topic, [record(2, at(21, 10), " tx"), record(2, at(2, 5), " tx late"),
                                  record(2, at(23, 45), " tx")], producer=producer)
    producer.commit_transaction(30)
    wait_for_markers(kafka_admin, topic, 3)
    return [value for _, _, value, _ in aborted]


def records_by_hour(kafka_config: dict[str, Any], topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """Hour -> the committed records it holds, as (partition, offset, key, value, ts)."""
    folders: dict[int, list[tuple[Any, ...]]] = {}
    newest: dict[int, int] = {}
    for p, o, k, v, ts in consume_all(kafka_config, topic, 3, "read_committed"):
        newest[p] = max(newest.get(p, ts), ts)
        hour = (newest[p] - MS0) // HOUR_MS
        if 0 <= hour < HOURS:
            folders.setdefault(hour, []).append((p, o, k, v, ts))
    return folders


def backfill(airflow: AirflowApi, dag_id: str, conf: dict[str, Any],
             *options: str, start: datetime = T0, hours: int = HOURS) -> list[dict[str, Any]]:
    """``airflow backfill create`` of ``dag_id`` over the 24 hours (or ``hours`` from
    ``start``; the DAG paused meanwhile), then unpause: the runs (hour order) once all are
    finished."""
    last = start + timedelta(hours=hours - 1)
    command = ("backfill", "create", "--dag-id", dag_id, "--from-date", start.isoformat(),
               "--to-date", last.isoformat(),
               "--max-active-runs", "4", "--dag-run-conf", json.dumps(conf), *options)
    airflow.pause(dag_id)
    deadline = time.monotonic() + LOCKED_RETRY_S
    while (cli := airflow.stack.cli(*command)).returncode:
        # SQLite takes one writer at a time: the command's transaction reads, then may lose the
        # race for the write lock ("database is locked"; more likely under load, and with
        # --reprocess-behavior, which clears runs first). A half-created backfill left behind
        # would block the next one: cancel it, and run the command again, as a user would.
        # Any other failure fails the test. (Seen with Airflow 3.3.2: Airflow's clean-up of
        # the failed attempt deleted the runs it had already cleared; the next attempt creates
        # them again under the same run ids, which keep their pinned ranges.)
        output = cli.stdout[-2000:] + cli.stderr[-4000:]
        assert "database is locked" in output, output
        assert time.monotonic() < deadline, output
        for orphan in airflow.call("GET", f"/api/v2/backfills?dag_id={dag_id}")["backfills"]:
            if orphan["completed_at"] is None:
                airflow.call("PUT", f"/api/v2/backfills/{orphan['id']}/cancel")
    backfills = airflow.call("GET", f"/api/v2/backfills?dag_id={dag_id}&order_by=-id")
    newest = backfills["backfills"][0]
    assert (newest["max_active_runs"], newest["dag_run_conf"], newest["completed_at"]) == \
        (4, conf, None)
    # Backfill runs of a paused DAG stay queued (docs/airflow.md): unpause to run them.
    airflow.unpause(dag_id)
    query = urllib.parse.urlencode({
        "logical_date_gte": start.isoformat(), "limit": 100, "order_by": "logical_date",
        "logical_date_lte": last.isoformat()})
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while True:
        runs = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?{query}")["dag_runs"]
        unfinished = [r["logical_date"] for r in runs if r["state"] not in ("success", "failed")]
        done = not unfinished and airflow.call(
            "GET", f"/api/v2/backfills/{newest['id']}")["completed_at"] is not None
        if done:
            return list(runs)
        assert time.monotonic() < deadline, f"still running after {BACKFILL_TIMEOUT_S}s: {unfinished}"
        time.sleep(2.0)


def check_runs(airflow: AirflowApi, dag_id: str, runs: list[dict[str, Any]],
               after: datetime) -> None:
    """24 backfill runs, one per hour, all successful, every task started after ``after``."""
    failed = [airflow.failure_report(dag_id, r["dag_run_id"]) for r in runs
              if r["state"] != "success"]
    assert not failed, "\n".join(failed)
    starts = [datetime.fromisoformat(r["data_interval_start"]) for r in runs]
    assert starts == [T0 + timedelta(hours=h) for h in range(HOURS)]
    for run, start in zip(runs, starts, strict=True):
        assert run["run_type"] == "backfill"
        assert datetime.fromisoformat(run["logical_date"]) == start
        assert datetime.fromisoformat(run["data_interval_end"]) == start + timedelta(hours=1)
        tis = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/"
                                  f"{urllib.parse.quote(run['dag_run_id'], safe='')}/taskInstances")
        assert {ti["task_id"]: ti["state"] for ti in tis["task_instances"]} == \
            {"resolve_offsets": "success", "ingest": "success"}
        assert all(datetime.fromisoformat(ti["start_date"]) > after
                   for ti in tis["task_instances"]), run["dag_run_id"]


def run_ranges(airflow: AirflowApi, dag_id: str,
               runs: list[dict[str, Any]]) -> list[dict[int, tuple[int, int]]]:
    """Per run (hour order): partition -> the resolved [start, stop)."""
    return [{r["partition"]: (r["start"], r["stop"]) for r in
             airflow.xcom(dag_id, run["dag_run_id"], "resolve_offsets")["ranges"]}
            for run in runs]
