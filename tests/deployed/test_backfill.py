"""``airflow backfill create`` (the real CLI, as docs/airflow.md tells users) over 24 hourly
intervals of ``kafka_backfill_by_time`` in the deployed Airflow: every run succeeds, the hourly
folders tile the topic's committed records exactly, and a second backfill with
``--reprocess-behavior completed`` re-runs every hour and rewrites byte-identical folders.

Which folder a record belongs in: a run reads ``[timestamp:start, timestamp:end)``, and Kafka's
timestamp lookup answers the first offset stamped ``>= T``. So offsets are tiled, and a record
lands in the hour of the newest timestamp at or before it in its partition: its own hour, unless
it is late (stamped before a record produced earlier), then the hour it arrived in.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.deployed import AirflowApi
from tools.kafka_records import (
    MINUTE_MS,
    Record,
    consume_all,
    produce,
    transactional_producer,
    wait_for_markers,
)

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

DAG_ID = "kafka_backfill_by_time"
HOURS = 24
HOUR_MS = 60 * MINUTE_MS
# Recent and hour-aligned (the broker's retention would delete old CreateTimes). The range ends
# two hours before the current one, so the DAG's own scheduled run (catchup=False: the last
# complete hour) never overlaps it, and every transaction marker (stamped when the test runs)
# is later than every interval bound.
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS + 2)
MS0 = int(T0.timestamp() * 1000)
BACKFILL_TIMEOUT_S = 1200.0
LOCKED_RETRY_S = 120.0
# The manifest fields that say when and how fast a folder was written, not what it holds.
TIMING_FIELDS = ("written_at", "seconds", "records_per_second", "bytes_per_second")
UUID = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


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
    starts a Spark JVM, twice (the reprocessing backfill), which is what this test's time goes
    to. Why each partition holds what it holds is said below.
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


def expected_folders(kafka_config: dict[str, Any], topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """Hour -> the committed records of its folder, as (partition, offset, key, value, ts)."""
    folders: dict[int, list[tuple[Any, ...]]] = {}
    newest: dict[int, int] = {}
    for p, o, k, v, ts in consume_all(kafka_config, topic, 3, "read_committed"):
        newest[p] = max(newest.get(p, ts), ts)
        hour = (newest[p] - MS0) // HOUR_MS
        if 0 <= hour < HOURS:
            folders.setdefault(hour, []).append((p, o, k, v, ts))
    return folders


def read_folder(folder: Path) -> list[tuple[Any, ...]]:
    rows = pq.read_table(folder, columns=["partition", "offset", "key", "value", "timestamp"])
    return sorted((r["partition"], r["offset"], r["key"], r["value"],
                   int(r["timestamp"].timestamp() * 1000)) for r in rows.to_pylist())


def snapshot(folder: Path) -> dict[str, Any]:
    """What a folder holds, by file name (part files without their per-write UUID): each part
    file's rows in order, schema and key-value metadata; the manifest without its timing
    fields; other files' bytes.

    Not the part files' bytes: parquet-mr writes each column chunk's list of encodings from a
    hash set whose order differs from one JVM to the next (seen: 18 bytes of a 2,841-byte
    file's footer), so two Spark jobs never write byte-identical Parquet. Hidden files are
    Hadoop's ``.<name>.crc`` checksums of these files: left out."""
    files: dict[str, Any] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith("."):
            continue
        if path.name == "_kafka_spark_manifest.json":
            manifest = json.loads(path.read_text())
            files[path.name] = {k: v for k, v in manifest.items() if k not in TIMING_FIELDS}
        elif path.name.endswith(".parquet"):
            parquet = pq.ParquetFile(path)
            files[UUID.sub("", path.name)] = (parquet.read().to_pylist(), parquet.schema_arrow,
                                              parquet.metadata.metadata)
        else:
            files[path.name] = path.read_bytes()
    return files


def backfill(airflow: AirflowApi, conf: dict[str, Any], *options: str) -> list[dict[str, Any]]:
    """``airflow backfill create`` over the 24 hours (the DAG paused meanwhile), then unpause:
    the runs once all are finished."""
    command = ("backfill", "create", "--dag-id", DAG_ID, "--from-date", T0.isoformat(),
               "--to-date", (T0 + timedelta(hours=HOURS - 1)).isoformat(),
               "--max-active-runs", "4", "--dag-run-conf", json.dumps(conf), *options)
    airflow.pause(DAG_ID)
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
        for orphan in airflow.call("GET", f"/api/v2/backfills?dag_id={DAG_ID}")["backfills"]:
            if orphan["completed_at"] is None:
                airflow.call("PUT", f"/api/v2/backfills/{orphan['id']}/cancel")
    backfills = airflow.call("GET", f"/api/v2/backfills?dag_id={DAG_ID}&order_by=-id")
    newest = backfills["backfills"][0]
    assert (newest["max_active_runs"], newest["dag_run_conf"], newest["completed_at"]) == \
        (4, conf, None)
    # Backfill runs of a paused DAG stay queued (docs/airflow.md): unpause to run them.
    airflow.unpause(DAG_ID)
    query = urllib.parse.urlencode({
        "logical_date_gte": T0.isoformat(), "limit": 100, "order_by": "logical_date",
        "logical_date_lte": (T0 + timedelta(hours=HOURS - 1)).isoformat()})
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while True:
        runs = airflow.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?{query}")["dag_runs"]
        unfinished = [r["logical_date"] for r in runs if r["state"] not in ("success", "failed")]
        done = not unfinished and airflow.call(
            "GET", f"/api/v2/backfills/{newest['id']}")["completed_at"] is not None
        if done:
            return list(runs)
        assert time.monotonic() < deadline, f"still running after {BACKFILL_TIMEOUT_S}s: {unfinished}"
        time.sleep(2.0)


def check_runs(airflow: AirflowApi, runs: list[dict[str, Any]], after: datetime) -> None:
    """24 backfill runs, one per hour, all successful, every task started after ``after``."""
    failed = [airflow.failure_report(DAG_ID, r["dag_run_id"]) for r in runs
              if r["state"] != "success"]
    assert not failed, "\n".join(failed)
    starts = [datetime.fromisoformat(r["data_interval_start"]) for r in runs]
    assert starts == [T0 + timedelta(hours=h) for h in range(HOURS)]
    for run, start in zip(runs, starts, strict=True):
        assert run["run_type"] == "backfill"
        assert datetime.fromisoformat(run["logical_date"]) == start
        assert datetime.fromisoformat(run["data_interval_end"]) == start + timedelta(hours=1)
        tis = airflow.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/"
                                  f"{urllib.parse.quote(run['dag_run_id'], safe='')}/taskInstances")
        assert {ti["task_id"]: ti["state"] for ti in tis["task_instances"]} == \
            {"resolve_offsets": "success", "ingest": "success"}
        assert all(datetime.fromisoformat(ti["start_date"]) > after
                   for ti in tis["task_instances"]), run["dag_run_id"]


def run_ranges(airflow: AirflowApi, runs: list[dict[str, Any]]) -> list[dict[int, tuple[int, int]]]:
    """Per run (hour order): partition -> the resolved [start, stop)."""
    return [{r["partition"]: (r["start"], r["stop"]) for r in
             airflow.xcom(DAG_ID, run["dag_run_id"], "resolve_offsets")["ranges"]}
            for run in runs]


@pytest.mark.timeout(2 * BACKFILL_TIMEOUT_S + 300)
def test_backfill_by_time_tiles_24_hours_exactly_and_reprocessing_rewrites_identical_folders(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any,
        tmp_path: Path) -> None:
    topic = new_topic(partitions=3, **{"retention.ms": "-1"})
    aborted = produce_hours(kafka_config, kafka_admin, topic)
    expected = expected_folders(kafka_config, topic)
    # The arrangement, spelled out: hours 2, 3, 5 and 9 have only late (or aborted) records,
    # which belong to hours 11 and 21; 15 committed records are in the range.
    assert {h: len(rows) for h, rows in expected.items()} == {0: 3, 11: 6, 21: 2, 23: 4}
    output_root = tmp_path / "hours"
    conf = {"topics": topic, "output_root": str(output_root)}

    try:
        began, before = time.monotonic(), datetime.now(UTC)
        first = backfill(airflow, conf)
        first_seconds = time.monotonic() - began
        check_runs(airflow, first, after=before)
        ranges = run_ranges(airflow, first)
        folders = {h: output_root / (T0 + timedelta(hours=h)).strftime("%Y-%m-%dT%H")
                   for h in range(HOURS)}
        written = {h: snapshot(folder) for h, folder in folders.items() if folder.exists()}

        # After the first backfill: a record stamped inside hour 23 at the end of partition 0,
        # whose last interval stopped at "latest". Reprocessing re-reads each run's pinned ranges,
        # so it is in no folder.
        produce(kafka_config, topic, [record(0, at(23, 30), " after the first backfill")])
        began, before = time.monotonic(), datetime.now(UTC)
        second = backfill(airflow, conf, "--reprocess-behavior", "completed")
        second_seconds = time.monotonic() - began
        check_runs(airflow, second, after=before)
    finally:
        airflow.pause(DAG_ID)
    print(f"backfill: first {first_seconds:.0f}s, reprocessed {second_seconds:.0f}s")

    # The offset ranges tile every partition: hour k stops where hour k+1 starts.
    for before, after in zip(ranges, ranges[1:], strict=False):
        assert {p: stop for p, (_, stop) in before.items()} == \
            {p: start for p, (start, _) in after.items()}
    # Each record in exactly one folder, the folder of its hour; empty hours write no folder.
    assert sorted(written) == sorted(expected)
    outputs = {h: read_folder(folders[h]) for h in written}
    assert outputs == expected
    values = [row[3] for rows in outputs.values() for row in rows]
    assert len(values) == len(set(values)) == 15
    # The aborted records lie inside hour 23's range of partition 1: the read skipped them.
    offsets = {v: o for p, o, _, v, _ in consume_all(kafka_config, topic, 3) if p == 1}
    start, stop = ranges[HOURS - 1][1]
    assert all(start <= offsets[value] < stop for value in aborted)
    assert not set(values) & set(aborted)
    # The same runs, re-run: the same ranges, and identical folders: the same part files with
    # the same rows in the same order, the same manifests but for when and how fast they were
    # written (pinned ranges: the record produced since is in none).
    assert [r["dag_run_id"] for r in second] == [r["dag_run_id"] for r in first]
    assert run_ranges(airflow, second) == ranges
    rewritten = {h: snapshot(folder) for h, folder in folders.items() if folder.exists()}
    assert sorted(rewritten) == sorted(written)
    for h, files in written.items():
        assert sorted(rewritten[h]) == sorted(files) != []
        assert [name for name in files if rewritten[h][name] != files[name]] == [], h
    for h in written:
        manifest = json.loads((folders[h] / "_kafka_spark_manifest.json").read_text())
        assert manifest["run_id"] == first[h]["dag_run_id"]
        assert datetime.fromisoformat(manifest["written_at"]) > \
            datetime.fromisoformat(first[h]["end_date"])
