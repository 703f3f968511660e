"""Delta tables that take the readers' own Parquet files (issue 43): a run of the records as
read (no decode, transform or sql) lands one file per split under ``kafka-spark-<uuid>/`` in
the table's folder, with the write id in every row, and delta-rs commits exactly those files in
one version recording the run (its ``userMetadata`` and transaction identifier), with Delta
statistics from their footers (Spark prunes files by them). A retry writes nothing, a
reprocessing goes through Spark's writer (delta-rs cannot remove the run's earlier files in the
same version), two runs landing at once both land, and a table the files cannot go into as
written (partitioned, a protocol beyond appends, another column type) takes the run through
Spark's writer. Local, catalog and S3 tables (``tests/tables/cases.py``'s kinds)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_kafka_spark.sinks.tables import WRITE_COLUMN, CommitRecord
from airflow_provider_kafka_spark.sinks.tables.delta_files import delta_stats
from tests.tables.cases import (
    AS_READ_COLUMNS,
    Table,
    create,
    expected,
    ranges_of,
    reader,
    run_ingest,
)
from tools.kafka_records import produce

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

NOW = int(time.time() * 1000)
LANDED = re.compile(r"^kafka-spark-[0-9a-f]{32}/part-[^/]+\.snappy\.parquet$")
"""The path of a file the readers landed, relative to the table's folder."""


@pytest.fixture(scope="module")
def topic(kafka_config: dict[str, Any]) -> Any:
    """A 3-partition topic holding 12 records per partition (offsets 0..11)."""
    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    name = f"delta-landed-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config)
    create_topic(admin, name, 3)
    data = [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), NOW + i)
            for i in range(12) for p in range(3)]
    produce(kafka_config, name, data)
    yield name, data
    admin.delete_topics([name])[name].result(30)


def version_actions(table: Table, version: str, s3: Any) -> list[dict[str, Any]]:
    """The actions of the table's ``version`` as its log file holds them (read beside Spark
    and delta-rs: the local file, or the object on S3)."""
    name = f"_delta_log/{int(version):020d}.json"
    if table.location.startswith("s3a://"):
        with s3.pyarrow_fs().open_input_stream(
                f"{table.location.removeprefix('s3a://')}/{name}") as stream:
            text = stream.read().decode()
    else:
        with open(f"{table.location.removeprefix('file:')}/{name}") as log:
            text = log.read()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def of_kind(actions: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [a[kind] for a in actions if kind in a]


def scanned_files(spark: Any, df: Any) -> int:
    """The files Spark's scan of ``df`` read (Delta's ``numFiles`` metric, AQE off)."""
    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        df.collect()
        leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
        found = []
        for i in range(leaves.size()):
            metrics = leaves.apply(i).metrics()
            if metrics.contains("numFiles"):
                found.append(int(metrics.apply("numFiles").value()))
        [files] = found
        return files
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", before)


@pytest.mark.parametrize("kind", ["delta-path", "delta-catalog", "delta-s3"])
def test_a_run_as_read_is_the_readers_files_in_one_delta_rs_version(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        s3_endpoint: Any, kind: str) -> None:
    name, data = topic
    table = create(table_spark, kind, warehouses.of(kind), AS_READ_COLUMNS)
    bounds = {0: (0, 4), 1: (4, 8), 2: (8, 12)}
    ranges = ranges_of(name, bounds)

    first = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"), sql=None,
                       max_records_per_split=4)
    assert first["committed"] and not first["skipped"] and first["records_written"] == 12
    assert first["replaced"] == []
    assert table.rows(table_spark) == expected(data, ranges)
    assert table.writes(table_spark) == Counter({first["write_id"]: 12})
    read_elsewhere = reader(kind, None, s3_endpoint)
    assert read_elsewhere is not None and read_elsewhere(table) == expected(data, ranges)

    actions = version_actions(table, first["commit"], s3_endpoint)
    assert sorted(next(iter(a)) for a in actions) == ["add", "add", "add", "commitInfo", "txn"]
    [info], [txn], adds = (of_kind(actions, "commitInfo"), of_kind(actions, "txn"),
                           of_kind(actions, "add"))
    assert info["engineInfo"].startswith("delta-rs")
    recorded = CommitRecord.from_properties(json.loads(info["userMetadata"]))
    assert recorded is not None
    assert (recorded.application, recorded.run, recorded.write_id) == (
        "app", "run-1", first["write_id"])
    assert recorded.offsets == {(name, 0): 4, (name, 1): 8, (name, 2): 12}
    assert (txn["appId"], txn["version"]) == (f"kafka-spark:{first['write_id']}", 1)
    # Exactly the readers' files: one per split (a range each, at this split size), in one
    # landing folder, found there.
    assert all(LANDED.match(a["path"]) for a in adds), [a["path"] for a in adds]
    assert len({a["path"].split("/")[0] for a in adds}) == 1
    files = {r[0].rsplit("/", 2)[-2] + "/" + r[0].rsplit("/", 1)[-1] for r in
             table.df(table_spark).selectExpr("_metadata.file_path").distinct().collect()}
    assert files == {a["path"] for a in adds}
    # Their statistics, from the footers: what each file holds.
    stats = sorted((json.loads(a["stats"]) for a in adds), key=lambda s: s["minValues"]["offset"])
    for (partition, (start, stop)), stat in zip(sorted(bounds.items()), stats, strict=True):
        assert stat["numRecords"] == stop - start
        assert {k: stat["minValues"][k] for k in ("partition", "offset", WRITE_COLUMN)} == {
            "partition": partition, "offset": start, WRITE_COLUMN: first["write_id"]}
        assert {k: stat["maxValues"][k] for k in ("partition", "offset", WRITE_COLUMN)} == {
            "partition": partition, "offset": stop - 1, WRITE_COLUMN: first["write_id"]}
        assert stat["minValues"]["topic"] == stat["maxValues"]["topic"] == name
        assert stat["nullCount"] == {"key": 0, "value": 0, "topic": 0, "partition": 0,
                                     "offset": 0, "timestamp": 0, "timestampType": 0,
                                     WRITE_COLUMN: 0}
    # ... by which Spark reads one file of three for the last partition's offsets.
    assert scanned_files(table_spark, table.df(table_spark).where("`offset` >= 8")) == 1
    commits = table.commit_count(table_spark)

    # A retry of the run: the table says it is done.
    again = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"), sql=None,
                       max_records_per_split=4)
    assert again["skipped"] and not again["committed"] and again["records_written"] == 0
    assert again["write_id"] == first["write_id"]
    assert table.commit_count(table_spark) == commits
    assert table.rows(table_spark) == expected(data, ranges)

    # A reprocessing (generation 1) replaces the run's rows in one version of Spark's writer.
    redo = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1", generation=1),
                      sql=None, max_records_per_split=4)
    assert redo["committed"] and redo["replaced"] == [first["write_id"]]
    assert redo["records_written"] == 12
    assert table.rows(table_spark) == expected(data, ranges)
    assert table.writes(table_spark) == Counter({redo["write_id"]: 12})
    assert table.commit_count(table_spark) == commits + 1
    actions = version_actions(table, redo["commit"], s3_endpoint)
    assert {r["path"] for r in of_kind(actions, "remove")} == {a["path"] for a in adds}
    assert of_kind(actions, "add") and not any(
        LANDED.match(a["path"]) for a in of_kind(actions, "add"))
    assert of_kind(actions, "commitInfo")[0]["engineInfo"].startswith("Apache-Spark")


@pytest.mark.parametrize("kind", ["delta-s3"])  # on S3: the conditional PUTs of the log
def test_two_runs_landing_at_once_both_land_and_two_tries_of_one_run_land_once(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        s3_endpoint: Any, kind: str) -> None:
    """Four ingests of one driver at once: runs hour-3 and hour-4, each tried twice. delta-rs
    commits each run's files once (on S3 by a conditional PUT of the version's log file): a
    second commit of a write is refused, its try looks again and writes nothing."""
    name, data = topic
    table = create(table_spark, kind, warehouses.of(kind), AS_READ_COLUMNS)
    hours = {"hour-3": ranges_of(name, {0: (0, 6), 1: (0, 6), 2: (0, 6)}),
             "hour-4": ranges_of(name, {0: (6, 12), 1: (6, 12), 2: (6, 12)})}
    tries = [(run, n) for run in hours for n in range(2)]
    outputs: dict[tuple[str, int], Any] = {}
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(tries))

    def ingest(run: str, n: int) -> None:
        try:
            sink = table.sink(run)
            barrier.wait(60)
            outputs[(run, n)] = run_ingest(table_spark, kafka_config, hours[run], sink, sql=None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=ingest, args=t) for t in tries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    if failures:
        raise failures[0]
    for run in hours:
        done = sorted((outputs[(run, n)]["committed"], outputs[(run, n)]["skipped"])
                      for n in range(2))
        assert done == [(False, True), (True, False)], (run, done)
    assert table.rows(table_spark) == expected(data, hours["hour-3"]) + expected(
        data, hours["hour-4"])
    assert sorted(r.run for r in table.records(table_spark)) == ["hour-3", "hour-4"]
    for output in outputs.values():
        if output["committed"]:
            adds = of_kind(version_actions(table, output["commit"], s3_endpoint), "add")
            # one split of the run's three ranges: one file
            assert len(adds) == 1 and all(LANDED.match(a["path"]) for a in adds)
    assert table.sink("-", application="app").recorded_offsets(table_spark) == {
        (name, 0): 12, (name, 1): 12, (name, 2): 12}


@pytest.mark.parametrize(
    ("partitioned_by", "change"),
    [
        ("`partition`", ""),
        ("", "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"),
        ("", "ADD CONSTRAINT known_offset CHECK (`offset` >= 0)"),
    ],
    ids=["partitioned", "deletion-vectors", "check-constraint"],
)
def test_a_table_the_files_cannot_go_into_as_written_takes_the_run_through_spark(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        s3_endpoint: Any, partitioned_by: str, change: str) -> None:
    name, data = topic
    table = create(table_spark, "delta-path", warehouses.lake, AS_READ_COLUMNS,
                   partitioned_by=partitioned_by)
    if change:
        table_spark.sql(f"ALTER TABLE delta.`{table.name}` {change}")
    ranges = ranges_of(name, {0: (0, 3), 2: (5, 9)})
    done = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"), sql=None)
    assert done["committed"] and done["records_written"] == 7
    assert table.rows(table_spark) == expected(data, ranges)
    actions = version_actions(table, done["commit"], s3_endpoint)
    assert of_kind(actions, "commitInfo")[0]["engineInfo"].startswith("Apache-Spark")
    assert of_kind(actions, "add") and not any(
        a["path"].startswith("kafka-spark-") for a in of_kind(actions, "add"))
    local = table.location.removeprefix("file:")
    assert not [f for f in os.listdir(local) if f.startswith("kafka-spark-")]


def test_delta_stats_are_the_footers_as_delta_writes_them(tmp_path: Any) -> None:
    """Two row groups, nulls, a timestamp off the millisecond: numRecords, the counted columns'
    nullCount, the bounded ones' min (truncated to ms) and max (rounded up), nothing else."""
    us = int(datetime(2026, 5, 1, 12, 0, tzinfo=UTC).timestamp() * 1_000_000)
    batch = pa.RecordBatch.from_pydict({
        "key": pa.array([b"a", None, b"c"], pa.binary()),
        "topic": pa.array(["t", "t", None]),
        "offset": pa.array([7, 3, 9], pa.int64()),
        "timestamp": pa.array([us + 1_500, us, us + 2_000], pa.timestamp("us", "UTC")),
        "headers": pa.array([None, [], [{"key": "h", "value": b"v"}]],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })
    path = tmp_path / "f.parquet"
    with pq.ParquetWriter(path, batch.schema) as writer:
        writer.write_batch(batch.slice(0, 2))
        writer.write_batch(batch.slice(2))
    stats = json.loads(delta_stats(pq.read_metadata(path),
                                   frozenset({"key", "topic", "offset", "timestamp", "headers"}),
                                   frozenset({"topic", "offset", "timestamp"})))
    assert stats == {
        "numRecords": 3,
        "minValues": {"topic": "t", "offset": 3, "timestamp": "2026-05-01T12:00:00.000Z"},
        "maxValues": {"topic": "t", "offset": 9, "timestamp": "2026-05-01T12:00:00.002Z"},
        "nullCount": {"key": 1, "topic": 1, "offset": 0, "timestamp": 0},
    }

