"""Airflow 3.3 partitioned runs in the deployed Airflow: ``kafka_hourly_partitioned``
(``CronPartitionTimetable``, run_offset=-1) backfilled by partition date over 4 hours (late
records, an aborted transaction, an empty hour), a daily rollup on ``PartitionedAssetTimetable``
created by the hourly partitions' asset events, a reprocessing backfill of 2 of the hours, and
the inputs the REST API can give the resolve task that have no slice.
"""

from __future__ import annotations

import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import audit
from tests.support.backfill import (
    BACKFILL_TIMEOUT_S,
    HOUR_MS,
    backfill,
    check_tasks,
    read_folder,
    records_by_hour,
)
from tests.support.deployed import AirflowApi
from tools.kafka_records import MINUTE_MS, produce, transactional_producer, wait_for_markers

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

DAG_ID = "kafka_hourly_partitioned"
ROLLUP = "kafka_test_partial_day_rollup"
HOURS = 4
# The 4 hours: 08:00-12:00 two days ago, so no scheduled run of the DAG (the last hour) falls
# on their day, and every transaction marker (stamped now) is after their end.
T0 = (datetime.now(UTC) - timedelta(days=2)).replace(hour=8, minute=0, second=0, microsecond=0)
MS0 = int(T0.timestamp() * 1000)
KEYS = [(T0 + timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%S") for h in range(HOURS)]
DAY = T0.strftime("%Y-%m-%d")
# The rollup of the example (kafka_daily_rollup) waits for all 24 hours of a day; this one
# fires once 4 of them are in (MinimumCount(-20): at most 20 missing), for the test's 4 hours.
ROLLUP_DAG = f'''
import os
from airflow.sdk import (DAG, Asset, DayWindow, MinimumCount, PartitionedAssetTimetable,
                         RollupMapper, StartOfDayMapper, task)

OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")
HOURLY = Asset(name="kafka_hourly_partitioned",
               uri=f"file://{{OUTPUT_ROOT}}/kafka_hourly_partitioned")

with DAG(dag_id="{ROLLUP}", schedule=PartitionedAssetTimetable(
        assets=HOURLY, default_partition_mapper=RollupMapper(
            upstream_mapper=StartOfDayMapper(), window=DayWindow(),
            wait_policy=MinimumCount(-20)))):

    @task
    def consumed(dag_run=None, triggering_asset_events=None):
        return {{"day": dag_run.partition_key,
                 "hours": sorted(e.partition_key for events in triggering_asset_events.values()
                                 for e in events)}}

    consumed()
'''


def at(hour: int, minute: int = 0, ms: int = 0) -> int:
    return MS0 + hour * HOUR_MS + minute * MINUTE_MS + ms


def on(partition: int, hour: int, minute: int = 0, ms: int = 0, note: str = "") -> Any:
    return (partition, f"k{partition}".encode(),
            f"p{partition} h{hour}+{minute}m{ms}ms{note}".encode(), at(hour, minute, ms))


def produce_hours(kafka_config: dict[str, Any], kafka_admin: Any, topic: str) -> list[bytes]:
    """Hour 0: three records (p0 at its first and last millisecond); hour 1: empty (p1's late
    record stamped in it comes after hour 2's and belongs there); hour 2: three; hour 3: two,
    and an aborted transaction on p1, whose marker (stamped now) ends hour 3's range there;
    p2 ends inside hour 3 (its stop there is "latest" when resolved). Records 1 ms before the
    range and at its end are in no hour. The aborted values return."""
    produce(kafka_config, topic, [on(0, 0, ms=-1), on(0, 0), on(0, 1, ms=-1), on(0, 2, 30),
                                  on(0, HOURS)])
    produce(kafka_config, topic, [on(1, 0, 30), on(1, 2, 10), on(1, 1, 30, note=" late"),
                                  on(1, 3, 40)])
    aborted = [on(1, 3, 50, note=" aborted")]
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()
    produce(kafka_config, topic, aborted, producer=producer)
    producer.flush(30)
    producer.abort_transaction(30)
    produce(kafka_config, topic, [on(1, HOURS, 5, note=" after"), on(2, 3, 5)])
    wait_for_markers(kafka_admin, topic, 3)
    return [value for _, _, value, _ in aborted]


def folder(root: Path, hour: int) -> Path:
    return root / (T0 + timedelta(hours=hour)).strftime("%Y-%m-%dT%H")


def ranges_of(airflow: AirflowApi, runs: list[dict[str, Any]]) -> list[dict[int, tuple[int, int]]]:
    return [{r["partition"]: (r["start"], r["stop"]) for r in
             airflow.xcom(DAG_ID, run["dag_run_id"], "resolve_offsets")["ranges"]}
            for run in runs]


def check_runs(airflow: AirflowApi, runs: list[dict[str, Any]], keys: list[str],
               after: datetime) -> None:
    failed = [airflow.failure_report(DAG_ID, r["dag_run_id"]) for r in runs
              if r["state"] != "success"]
    assert not failed, "\n".join(failed)
    assert [r["partition_key"] for r in runs] == keys
    for run in runs:
        assert (run["run_type"], run["logical_date"], run["data_interval_start"]) == \
            ("backfill", None, None)
        check_tasks(airflow, DAG_ID, run, after)


def wait_for_rollup(airflow: AirflowApi) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while True:
        runs = airflow.call("GET", f"/api/v2/dags/{ROLLUP}/dagRuns?limit=10")["dag_runs"]
        if runs and all(r["state"] in ("success", "failed") for r in runs):
            assert len(runs) == 1, runs
            return dict(runs[0])
        assert time.monotonic() < deadline, f"no finished run of {ROLLUP}: {runs}"
        time.sleep(1.0)


@pytest.mark.timeout(2 * BACKFILL_TIMEOUT_S + 600)
def test_partitioned_hours_tile_roll_up_by_day_and_reprocess_their_pinned_slices(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any,
        tmp_path: Path) -> None:
    (Path(str(airflow.stack.extra_dags)) / f"{ROLLUP}.py").write_text(ROLLUP_DAG)
    topic = new_topic(partitions=3, **{"retention.ms": "-1"})
    aborted = produce_hours(kafka_config, kafka_admin, topic)
    expected = records_by_hour(kafka_config, topic, SimpleNamespace(ms0=MS0, hours=HOURS))
    assert {h: len(rows) for h, rows in expected.items()} == {0: 3, 2: 3, 3: 2}
    root = tmp_path / "hours"
    conf = {"topics": topic, "output_root": str(root)}
    airflow.wait_parsed(ROLLUP)
    airflow.unpause(ROLLUP)

    started = datetime.now(UTC)
    try:
        first = backfill(airflow, DAG_ID, conf, start=T0, hours=HOURS, partitions=KEYS)
        check_runs(airflow, first, KEYS, after=started)
        ranges = ranges_of(airflow, first)
        written = {h: read_folder(folder(root, h)) for h in range(HOURS)
                   if folder(root, h).exists()}
        report = audit(kafka_config, DAG_ID, "resolve_offsets", since=started)
        rollup = wait_for_rollup(airflow)

        # A record of hour 3 produced after the backfill at the end of p2 (whose hour-3 stop
        # was "latest"): a new resolution would read it; the reprocessed runs read their
        # pinned ranges, so it is in no folder.
        produce(kafka_config, topic, [on(2, 3, 50, note=" after the first backfill")])
        before = datetime.now(UTC)
        again = backfill(airflow, DAG_ID, conf, "--reprocess-behavior", "completed",
                         start=T0 + timedelta(hours=2), hours=2, partitions=KEYS[2:])
        check_runs(airflow, again, KEYS[2:], after=before)
    finally:
        airflow.pause(DAG_ID)
        airflow.pause(ROLLUP)

    # Exactly its hour's records in each hour's folder (by key, value, offset and timestamp);
    # the empty hour writes no folder; the aborted records are in none.
    assert written == expected
    values = [row[3] for rows in written.values() for row in rows]
    assert len(values) == len(set(values)) == 8 and not set(values) & set(aborted)
    # The hours tile every partition (hour k stops where k+1 starts), and the audit of the pins
    # finds the 4 runs covering one range per partition, no gap, no overlap.
    for earlier, later in zip(ranges, ranges[1:], strict=False):
        assert {p: stop for p, (_, stop) in earlier.items()} == \
            {p: start for p, (start, _) in later.items()}
    assert report.ok and not report.gaps and not report.overlaps, report.to_dict()
    mine = [run for run in report.runs if {r.topic for r in run.ranges} == {topic}]
    assert sorted(run.run_id for run in mine) == sorted(r["dag_run_id"] for r in first)
    covered = {p.partition: list(p.covered) for p in report.partitions if p.topic == topic}
    assert covered == {p: [(ranges[0][p][0], ranges[-1][p][1])] for p in range(3)}

    # The rollup: one run, its partition key the day, created by the 4 hourly events.
    assert (rollup["state"], rollup["partition_key"]) == ("success", DAY), rollup
    assert airflow.xcom(ROLLUP, rollup["dag_run_id"], "consumed") == {"day": DAY, "hours": KEYS}
    events = airflow.call("GET", f"/api/v2/dags/{ROLLUP}/dagRuns/"
                                 f"{urllib.parse.quote(rollup['dag_run_id'], safe='')}"
                                 "/upstreamAssetEvents")["asset_events"]
    assert sorted((e["partition_key"], e["source_dag_id"]) for e in events) == \
        [(key, DAG_ID) for key in KEYS]

    # Reprocessed: Airflow 3.3 makes a new run per partition (it keeps the old one), which
    # resolves its partition again and meets the instants the first runs pinned (their
    # boundary records): the same ranges, the same records in the folders.
    assert {r["dag_run_id"] for r in again}.isdisjoint(r["dag_run_id"] for r in first)
    assert ranges_of(airflow, again) == ranges[2:]
    for run in again:
        log = airflow.log(DAG_ID, run["dag_run_id"], "resolve_offsets")
        assert "The start (timestamp:" in log and "The stop (timestamp:" in log, log[-3000:]
    # The audit now sees those hours read twice, by the old run and the new one, nothing else.
    after = audit(kafka_config, DAG_ID, "resolve_offsets", since=started)
    overlaps = sorted((o.partition, o.start, o.stop, tuple(r.run_id for r in o.runs))
                      for o in after.overlaps if o.topic == topic)
    assert not after.unexplained_gaps and overlaps == sorted(
        (p, start, stop, (old["dag_run_id"], new["dag_run_id"]))
        for old, new, hours in zip(first[2:], again, ranges[2:], strict=True)
        for p, (start, stop) in hours.items() if start < stop), after.to_dict()
    print("\nrun / partition / ranges (partition: [start, stop)) / records:")
    for run, hours in zip([*first, *again], [*ranges, *ranges[2:]], strict=True):
        key = run["partition_key"]
        print(f"  {run['dag_run_id']:<62} {key}  {hours}  "
              f"{len(expected.get(KEYS.index(key), []))}")
    print(f"rollup {rollup['dag_run_id']}: partition {rollup['partition_key']}, consumed {KEYS}")
    assert {h: read_folder(folder(root, h)) for h in (2, 3)} == {h: expected[h] for h in (2, 3)}


def resolve_failure(airflow: AirflowApi, run_id: str) -> str:
    """The resolve task's log once it failed: at once, on its first try, without the DAG's
    retries (a configuration error is certain: it is never up for retry)."""
    deadline = time.monotonic() + 120
    while (state := airflow.task_states(DAG_ID, run_id).get("resolve_offsets")) != "failed":
        assert state != "up_for_retry", f"{run_id}: a certain error was retried"
        assert time.monotonic() < deadline, airflow.task_states(DAG_ID, run_id)
        time.sleep(1.0)
    # No retry to wait out: the run fails with its task (no PATCH of the run's state needed).
    return airflow.log(DAG_ID, run_id, "resolve_offsets")


def test_runs_without_a_slice_fail_with_the_package_error_naming_what_to_pass(
        airflow: AirflowApi) -> None:
    airflow.unpause(DAG_ID)
    try:
        no_partition = airflow.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                    {"logical_date": None})["dag_run_id"]
        off_tick = airflow.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                {"logical_date": None,
                                 "partition_key": KEYS[0].replace(":00:00", ":30:00")}
                                )["dag_run_id"]
        logs = {run: resolve_failure(airflow, run) for run in (no_partition, off_tick)}
    finally:
        airflow.pause(DAG_ID)
    # A manual run of the partitioned DAG without a key is told to pass one (or the Params).
    assert "ConfigurationError" in logs[no_partition]
    assert "resolve_offsets: this run of a partitioned DAG (CronPartitionTimetable) has no " \
           "partition key" in logs[no_partition]
    assert "Trigger it with a partition key" in logs[no_partition]
    assert "ConfigurationError" in logs[off_tick]
    assert f"the run's partition '{KEYS[0][:-5]}30:00'" in logs[off_tick]
    assert "is not a tick of the DAG's cron '0 * * * *'" in logs[off_tick]
    # A key the timetable cannot read is refused by the REST API itself (Airflow 3.3).
    with pytest.raises(AssertionError, match="-> 4[0-9][0-9]"):
        airflow.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                     {"logical_date": None, "partition_key": f"us|{KEYS[0]}"})
