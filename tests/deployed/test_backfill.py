"""``airflow backfill create`` (the real CLI, as docs/airflow.md tells users) over 8 hourly
intervals of ``kafka_backfill_by_time`` across a midnight in the deployed Airflow: every run
succeeds, the hourly folders tile the topic's committed records exactly, and a second backfill
with ``--reprocess-behavior completed`` re-runs every hour and rewrites byte-identical folders.
(The arrangement and the backfill driving: ``tests/support/backfill.py``; the edge cases are
those of the tables tier's 24 hours, ``DAY`` there: records 1 ms before the range, at an hour's
first and last millisecond and at the range's end, late records whose own hours stay empty, an
aborted transaction, a committed one whose marker ends the last range, a partition that ends
inside the range, empty hours; 8 hours, 4 runs at a time, also start runs as others end.)
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_kafka_spark.offsets import audit
from tests.support.backfill import (
    BACKFILL_TIMEOUT_S,
    across_midnight,
    at,
    backfill,
    check_runs,
    produce_hours,
    read_folder,
    record,
    records_by_hour,
    run_ranges,
)
from tests.support.deployed import AirflowApi
from tools.kafka_records import consume_all, produce

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

DAG_ID = "kafka_backfill_by_time"
# The manifest fields that say when and how fast a folder was written, not what it holds.
TIMING_FIELDS = ("written_at", "seconds", "records_per_second", "bytes_per_second")
UUID = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# 8 hours (hours 0-3 on one date, 4-7 on the next), ending at the latest 2 hours before the
# current one: records in hours 0, 3, 6 and 7; only late or aborted ones in 1, 2, 4 and 5.
LAYOUT = across_midnight(8)
HOURS = LAYOUT.hours
T0 = LAYOUT.t0


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



@pytest.mark.timeout(2 * BACKFILL_TIMEOUT_S + 300)
def test_backfill_by_time_tiles_hours_across_midnight_exactly_and_reprocessing_rewrites_identical_folders(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any,
        tmp_path: Path) -> None:
    topic = new_topic(partitions=3, **{"retention.ms": "-1"})
    aborted = produce_hours(kafka_config, kafka_admin, topic, LAYOUT)
    expected = records_by_hour(kafka_config, topic, LAYOUT)
    # The arrangement, spelled out: hours 1, 2, 4 and 5 have only late (or aborted) records,
    # which belong to hours 3 and 6; 15 committed records are in the range.
    assert {h: len(rows) for h, rows in expected.items()} == {0: 3, 3: 6, 6: 2, 7: 4}
    output_root = tmp_path / "hours"
    conf = {"topics": topic, "output_root": str(output_root)}

    started = datetime.now(UTC)
    try:
        began, before = time.monotonic(), datetime.now(UTC)
        first = backfill(airflow, DAG_ID, conf, start=T0, hours=HOURS)
        first_seconds = time.monotonic() - began
        check_runs(airflow, DAG_ID, first, after=before, layout=LAYOUT)
        ranges = run_ranges(airflow, DAG_ID, first)
        folders = {h: output_root / (T0 + timedelta(hours=h)).strftime("%Y-%m-%dT%H")
                   for h in range(HOURS)}
        written = {h: snapshot(folder) for h, folder in folders.items() if folder.exists()}

        # After the first backfill: a record stamped inside hour 7 at the end of partition 0,
        # whose last interval stopped at "latest". Reprocessing re-reads each run's pinned ranges,
        # so it is in no folder.
        produce(kafka_config, topic, [record(0, at(HOURS - 1, 30, layout=LAYOUT),
                                             " after the first backfill", LAYOUT)])
        began, before = time.monotonic(), datetime.now(UTC)
        second = backfill(airflow, DAG_ID, conf, "--reprocess-behavior", "completed",
                          start=T0, hours=HOURS)
        second_seconds = time.monotonic() - began
        check_runs(airflow, DAG_ID, second, after=before, layout=LAYOUT)
    finally:
        airflow.pause(DAG_ID)
    print(f"backfill: first {first_seconds:.0f}s, reprocessed {second_seconds:.0f}s")

    # The offset ranges tile every partition: hour k stops where hour k+1 starts.
    for earlier, later in zip(ranges, ranges[1:], strict=False):
        assert {p: stop for p, (_, stop) in earlier.items()} == \
            {p: start for p, (start, _) in later.items()}
    # The second oracle: the audit of the pins finds the same 8 runs, one covered range per
    # partition from hour 0's start to hour 7's stop, no gap, no overlap.
    report = audit(kafka_config, DAG_ID, "resolve_offsets", since=started)
    assert report.ok and not report.gaps and not report.overlaps, report.to_dict()
    # (Unpausing the DAG may also start its scheduled run, on demo.events.)
    assert sorted(run.run_id for run in report.runs if {r.topic for r in run.ranges} == {topic}
                  ) == sorted(r["dag_run_id"] for r in first)
    covered = {p.partition: list(p.covered) for p in report.partitions if p.topic == topic}
    assert covered == {p: [(ranges[0][p][0], ranges[-1][p][1])] for p in range(3)
                       if ranges[0][p][0] < ranges[-1][p][1]}
    # Each record in exactly one folder, the folder of its hour; empty hours write no folder.
    # The range crosses a midnight: the folders of hours 0 and 3 are named for one date, those
    # of 6 and 7 for the next.
    assert sorted(written) == sorted(expected)
    assert len({folders[h].name[:10] for h in (0, 3)}) == len({folders[h].name[:10]
                                                                for h in (6, 7)}) == 1
    assert folders[0].name[:10] < folders[HOURS - 1].name[:10]
    assert (T0 + timedelta(hours=HOURS // 2)).hour == 0
    outputs = {h: read_folder(folders[h]) for h in written}
    assert outputs == expected
    values = [row[3] for rows in outputs.values() for row in rows]
    assert len(values) == len(set(values)) == 15
    # The aborted records lie inside hour 7's range of partition 1: the read skipped them.
    offsets = {v: o for p, o, _, v, _ in consume_all(kafka_config, topic, 3) if p == 1}
    start, stop = ranges[HOURS - 1][1]
    assert all(start <= offsets[value] < stop for value in aborted)
    assert not set(values) & set(aborted)
    # The same runs, re-run: the same ranges, and identical folders: the same part files with
    # the same rows in the same order, the same manifests but for when and how fast they were
    # written (pinned ranges: the record produced since is in none).
    assert [r["dag_run_id"] for r in second] == [r["dag_run_id"] for r in first]
    assert run_ranges(airflow, DAG_ID, second) == ranges
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
