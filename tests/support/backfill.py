"""The hourly backfills both deployed Airflows run (``tests/deployed/test_backfill.py`` into
hourly folders, 8 hours across a midnight; ``tests/tables/test_backfill_into_tables.py`` into
Iceberg, 24 hours): the topic's arrangement, which hour each record belongs to, and ``airflow
backfill create`` driven like a user would, then checked through the REST API.

Which hour a record belongs in: a run reads ``[timestamp:start, timestamp:end)``, and Kafka's
timestamp lookup answers the first offset stamped ``>= T``. So offsets are tiled, and a record
lands in the hour of the newest timestamp at or before it in its partition: its own hour, unless
it is late (stamped before a record produced earlier), then the hour it arrived in.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

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
CURRENT_HOUR = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
T0 = CURRENT_HOUR - timedelta(hours=HOURS + 2)
MS0 = int(T0.timestamp() * 1000)
BACKFILL_TIMEOUT_S = 1200.0
# The scheduler marks a backfill complete every 30 s (Airflow's fixed interval); a new backfill
# of the DAG waits for that first.
COMPLETE_TIMEOUT_S = 180.0
POLL_S = 1.0


@dataclass(frozen=True)
class Layout:
    """Where the arrangement's records go: ``hours`` hourly intervals from ``t0``; ``filled``,
    the four hours that hold records (first, middle, the committed transaction's, last =
    ``hours - 1``); ``late``, four hours that hold only late or aborted records and stay empty
    (p1's two late records, both before ``filled[1]``; the aborted late record; the
    transaction's late record, before ``filled[2]``)."""

    hours: int
    t0: datetime
    filled: tuple[int, int, int, int]
    late: tuple[int, int, int, int]

    def __post_init__(self) -> None:
        first, middle, tx, last = self.filled
        late1, late2, aborted, tx_late = self.late
        assert (first, last) == (0, self.hours - 1) and first < middle < tx < last, self
        assert late1 < middle and late2 < middle and tx_late < tx, self
        assert not set(self.filled) & set(self.late) and len(set(self.late)) == 4, self
        assert self.t0.minute == self.t0.second == self.t0.microsecond == 0, self

    @property
    def ms0(self) -> int:
        return int(self.t0.timestamp() * 1000)

    def start(self, hour: int) -> datetime:
        return self.t0 + timedelta(hours=hour)

    def counts(self) -> dict[int, int]:
        """Hour -> how many committed records it holds."""
        return dict(zip(self.filled, (3, 6, 2, 4), strict=True))


# The 24 hours that end 2 hours before the current one (the tables tier's backfill).
DAY = Layout(HOURS, T0, filled=(0, 11, 21, 23), late=(3, 5, 9, 2))


def across_midnight(hours: int = 8) -> Layout:
    """``hours`` hours (even, >= 8) with the day's edge cases, half before and half after the
    newest midnight that leaves the range ending 2 hours before the current hour (so it starts
    at most ``hours + 25`` hours ago): hours 0 and 3 on one date, 6 and 7 on the next."""
    assert hours >= 8 and hours % 2 == 0, hours
    half = timedelta(hours=hours // 2)
    last_midnight = (CURRENT_HOUR - timedelta(hours=2) - half).replace(hour=0)
    t0 = last_midnight - half
    return Layout(hours, t0, filled=(0, 3, hours - 2, hours - 1), late=(1, 2, 4, 5))


def at(hour: int, minute: int = 0, ms: int = 0, layout: Layout = DAY) -> int:
    """Epoch millis ``hour`` hours (and minutes, millis) after the first interval's start."""
    return layout.ms0 + hour * HOUR_MS + minute * MINUTE_MS + ms


def record(partition: int, ts: int, note: str = "", layout: Layout = DAY) -> Record:
    hour, rest = divmod(ts - layout.ms0, HOUR_MS)
    return (partition, f"k{partition}".encode(),
            f"p{partition} h{hour:02d}+{rest}ms{note}".encode(), ts)


def produce_hours(kafka_config: dict[str, Any], kafka_admin: Any, topic: str,
                  layout: Layout = DAY) -> list[bytes]:
    """Arrange the topic (3 partitions); return the values of the aborted records.

    Four hours hold records (``layout.filled``: 0, 11, 21, 23 of ``DAY``), the others are
    empty: every ingest of a non-empty hour starts a Spark JVM (an empty one starts none),
    which is what a backfill's time goes to. Why each partition holds what it holds is said
    below (hours named as in ``DAY``; ``late``: 3, 5, 9, 2).
    """
    first, middle, tx, last = layout.filled
    late1, late2, aborted_late, tx_late = layout.late

    def on(partition: int, hour: int, minute: int = 0, ms: int = 0, note: str = "") -> Record:
        return record(partition, at(hour, minute, ms, layout), note, layout)

    # p0: a record 1 ms before the range, hour 0's first and last millisecond, hour 11, and
    #     hour 23's first and last millisecond: p0 ends inside the range, so hour 23's stop on
    #     p0 is "latest" when resolved.
    produce(kafka_config, topic, [
        on(0, first, ms=-1), on(0, first), on(0, first + 1, ms=-1), on(0, middle, 30),
        on(0, last), on(0, last + 1, ms=-1)])
    # p1: two late records after hour 11's (stamped 03:30 and 05:15: they belong to hour 11,
    #     hours 3 and 5 stay empty), hour 23, an aborted transaction inside hour 23's range,
    #     then a record stamped exactly at the range's end.
    produce(kafka_config, topic, [on(1, first, 30), on(1, middle), on(1, middle + 1, ms=-1),
                                  on(1, late1, 30, note=" late"), on(1, late2, 15, note=" late"),
                                  on(1, last, 10)])
    aborted = [on(1, last, 20, note=" aborted"), on(1, aborted_late, note=" aborted late")]
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()
    produce(kafka_config, topic, aborted, producer=producer)
    producer.flush(30)
    producer.abort_transaction(30)
    produce(kafka_config, topic, [on(1, layout.hours, note=" after")])
    # p2: hour 11, then a committed transaction (its marker, stamped now, ends hour 23's range):
    #     21:10, a late 02:05 (it belongs to hour 21), 23:45.
    produce(kafka_config, topic, [on(2, middle, 45)])
    producer.begin_transaction()
    produce(kafka_config, topic, [on(2, tx, 10, note=" tx"), on(2, tx_late, 5, note=" tx late"),
                                  on(2, last, 45, note=" tx")], producer=producer)
    producer.commit_transaction(30)
    wait_for_markers(kafka_admin, topic, 3)
    return [value for _, _, value, _ in aborted]


def records_by_hour(kafka_config: dict[str, Any], topic: str,
                    layout: Layout = DAY) -> dict[int, list[tuple[Any, ...]]]:
    """Hour -> the committed records it holds, as (partition, offset, key, value, ts)."""
    folders: dict[int, list[tuple[Any, ...]]] = {}
    newest: dict[int, int] = {}
    for p, o, k, v, ts in consume_all(kafka_config, topic, 3, "read_committed"):
        newest[p] = max(newest.get(p, ts), ts)
        hour = (newest[p] - layout.ms0) // HOUR_MS
        if 0 <= hour < layout.hours:
            folders.setdefault(hour, []).append((p, o, k, v, ts))
    return folders


def read_folder(folder: Path) -> list[tuple[Any, ...]]:
    """An hourly folder's records as (partition, offset, key, value, ts), sorted."""
    rows = pq.read_table(folder, columns=["partition", "offset", "key", "value", "timestamp"])
    return sorted((r["partition"], r["offset"], r["key"], r["value"],
                   int(r["timestamp"].timestamp() * 1000)) for r in rows.to_pylist())


def wait_for_backfills_complete(airflow: AirflowApi, dag_id: str) -> None:
    """Until every backfill of ``dag_id`` is marked complete (Airflow refuses a second one
    meanwhile). The scheduler marks them every 30 s once their runs are finished, so the
    previous backfill's wait overlaps whatever the test did since."""
    deadline = time.monotonic() + COMPLETE_TIMEOUT_S
    while open_ := [b["id"] for b in airflow.call(
            "GET", f"/api/v2/backfills?dag_id={dag_id}&limit=100")["backfills"]
            if b["completed_at"] is None]:
        assert time.monotonic() < deadline, \
            f"backfills {open_} of {dag_id} not complete after {COMPLETE_TIMEOUT_S}s"
        time.sleep(POLL_S)


def backfill(airflow: AirflowApi, dag_id: str, conf: dict[str, Any],
             *options: str, start: datetime = T0, hours: int = HOURS,
             partitions: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``airflow backfill create`` of ``dag_id`` over the 24 hours (or ``hours`` from
    ``start``; the DAG paused meanwhile), then unpause: the runs (hour order) once all are
    finished. (A backfill before it must be marked complete first: waited for here, not when
    it finished, so that wait overlaps the test's work in between.) ``partitions``: a
    partitioned DAG's keys of those hours (its runs have no logical date: found by key; with
    ``--reprocess-behavior``, Airflow 3.3 adds a new run beside the old one: the newest)."""
    last = start + timedelta(hours=hours - 1)
    command = ("backfill", "create", "--dag-id", dag_id, "--from-date", start.isoformat(),
               "--to-date", last.isoformat(),
               "--max-active-runs", "4", "--dag-run-conf", json.dumps(conf), *options)
    wait_for_backfills_complete(airflow, dag_id)
    airflow.pause(dag_id)
    cli = airflow.stack.cli(*command)
    assert cli.returncode == 0, cli.stdout[-2000:] + cli.stderr[-4000:]
    backfills = airflow.call("GET", f"/api/v2/backfills?dag_id={dag_id}&order_by=-id")
    newest = backfills["backfills"][0]
    assert (newest["max_active_runs"], newest["dag_run_conf"], newest["completed_at"]) == \
        (4, conf, None)
    # Backfill runs of a paused DAG stay queued (docs/airflow.md): unpause to run them.
    airflow.unpause(dag_id)
    query = urllib.parse.urlencode({"run_type": "backfill", "limit": 100} if partitions else {
        "logical_date_gte": start.isoformat(), "limit": 100, "order_by": "logical_date",
        "logical_date_lte": last.isoformat()})
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while True:
        runs = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?{query}")["dag_runs"]
        if partitions:  # the newest run of each key (a reprocessed key gets a new run)
            newest = {r["partition_key"]: r for r in sorted(runs, key=lambda r: r["queued_at"])
                      if r["partition_key"] in partitions}
            runs = [newest[key] for key in sorted(newest)]
        unfinished = [r["logical_date"] for r in runs if r["state"] not in ("success", "failed")]
        if runs and not unfinished:
            return list(runs)
        assert time.monotonic() < deadline, f"still running after {BACKFILL_TIMEOUT_S}s: {unfinished}"
        time.sleep(POLL_S)


def check_runs(airflow: AirflowApi, dag_id: str, runs: list[dict[str, Any]],
               after: datetime, layout: Layout = DAY) -> None:
    """One backfill run per hour of ``layout``, all successful, every task started after
    ``after``."""
    failed = [airflow.failure_report(dag_id, r["dag_run_id"]) for r in runs
              if r["state"] != "success"]
    assert not failed, "\n".join(failed)
    starts = [datetime.fromisoformat(r["data_interval_start"]) for r in runs]
    assert starts == [layout.start(h) for h in range(layout.hours)]
    for run, start in zip(runs, starts, strict=True):
        assert run["run_type"] == "backfill"
        assert datetime.fromisoformat(run["logical_date"]) == start
        assert datetime.fromisoformat(run["data_interval_end"]) == start + timedelta(hours=1)
        check_tasks(airflow, dag_id, run, after)


def check_tasks(airflow: AirflowApi, dag_id: str, run: dict[str, Any], after: datetime) -> None:
    """The run's two tasks, resolve and ingest, succeeded, both started after ``after``."""
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
