"""Iceberg tables that take the readers' own Parquet files (issue 43): a run of the records as
read lands as one file per split in ``<data>/kafka-spark-<uuid>/``, and one snapshot adds
exactly those files (their statistics from their footers) and records the run; retries,
reprocessing, pyiceberg's reads and its file pruning; the tables whose runs go through Spark's
writer instead, and the name mapping the sink keeps complete."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.sinks.tables import WRITE_COLUMN
from airflow_provider_kafka_spark.spark.intake import LandedParquet, SinkInput, SparkRows
from tests.tables.cases import (
    AS_READ_COLUMNS,
    Table,
    create,
    expected,
    ranges_of,
    reader,
    run_ingest,
)

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

NAME_MAPPING = "schema.name-mapping.default"


@pytest.fixture(scope="module")
def topic(kafka_config: dict[str, Any]) -> Any:
    """A 3-partition topic holding 10 records per partition (offsets 0..9), each with the
    header ``h`` = ``<partition>-<offset>``."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    name = f"landed-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config)
    create_topic(admin, name, 3)
    now = int(time.time() * 1000)  # an old timestamp: the broker's retention deletes it
    data = [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), now + i)
            for i in range(10) for p in range(3)]
    producer = Producer({**kafka_config, "enable.idempotence": True})
    for i, (p, key, value, ts) in enumerate(data):
        producer.produce(name, value=value, key=key, partition=p, timestamp=ts,
                         headers=[("h", f"{p}-{i // 3}".encode())])
    assert producer.flush(30) == 0
    yield name, data
    admin.delete_topics([name])[name].result(30)


def local_or_key(uri: str) -> str:
    """A file's URI as a local path, or ``bucket/key`` on S3."""
    if uri.startswith(("s3a://", "s3://")):
        return uri.split("://", 1)[1]
    return uri.removeprefix("file://").removeprefix("file:")


def current_files(spark: Any, table: Table,
                  one_partition_each: bool = True) -> dict[str, tuple[int, int, int, int]]:
    """The current snapshot's data files: ``{path: (records, partition, lowest offset,
    highest offset)}``, from the files' statistics in the table's metadata (each file of one
    Kafka partition unless not ``one_partition_each``: then the lowest partition)."""
    rows = spark.sql(
        f"SELECT file_path, record_count, readable_metrics.`partition`.lower_bound AS p, "
        f"readable_metrics.`partition`.upper_bound AS p_hi, "
        f"readable_metrics.`offset`.lower_bound AS lo, "
        f"readable_metrics.`offset`.upper_bound AS hi FROM {table.name}.files").collect()
    assert not one_partition_each or all(r["p"] == r["p_hi"] for r in rows)
    return {local_or_key(r["file_path"]): (r["record_count"], r["p"], r["lo"], r["hi"])
            for r in rows}


def stored_parquet(data: str, s3: Any) -> set[str]:
    """Every Parquet file under the table's data folder, in storage."""
    where = local_or_key(data)
    if data.startswith("s3"):
        from pyarrow.fs import FileSelector

        found = s3.pyarrow_fs().get_file_info(FileSelector(where, recursive=True))
        return {f.path for f in found if f.path.endswith(".parquet")}
    return {str(p) for p in Path(where).rglob("*.parquet")}


def newest_summary(spark: Any, table: Table) -> dict[str, str]:
    return dict(spark.sql(f"SELECT summary FROM {table.name}.snapshots ORDER BY committed_at "
                          "DESC LIMIT 1").first()["summary"])


@pytest.mark.parametrize("kind", ["iceberg-hadoop", "iceberg-s3"])  # s3: a JDBC catalog
def test_a_run_as_read_commits_the_readers_files_once_and_a_reprocessing_replaces_them(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        pg_catalog: Any, s3_catalog: Any, s3_endpoint: Any, kind: str) -> None:
    name, data = topic
    table = create(table_spark, kind, warehouses.of(kind), AS_READ_COLUMNS)
    early = ranges_of(name, {0: (0, 5), 1: (0, 5), 2: (0, 5)})

    first = run_ingest(table_spark, kafka_config, early, table.sink("run-1"), sql=None,
                       max_records_per_split=5)
    assert first["committed"] and first["landed"] and first["records_written"] == 15
    assert table.rows(table_spark) == expected(data, early)
    assert table.writes(table_spark) == Counter({first["write_id"]: 15})
    data_folder = f"{first['location'].rstrip('/')}/data"
    files = current_files(table_spark, table)
    landed = re.compile(re.escape(local_or_key(data_folder)) +
                        r"/(kafka-spark-[0-9a-f]{32})/part-[^/]+\.zstd\.parquet")
    folders = {m.group(1) for f in files if (m := landed.fullmatch(f))}
    assert len(folders) == 1 and all(landed.fullmatch(f) for f in files)
    # One file per split (a range each, at this split size), each file's statistics as the
    # readers wrote it.
    assert sorted(files.values()) == [(5, 0, 0, 4), (5, 1, 0, 4), (5, 2, 0, 4)]
    assert stored_parquet(data_folder, s3_endpoint) == set(files)
    [record] = table.records(table_spark)
    assert (record.run, record.write_id) == ("run-1", first["write_id"])
    assert record.ranges == ((name, 0, 0, 5), (name, 1, 0, 5), (name, 2, 0, 5))
    summary = newest_summary(table_spark, table)
    assert (summary["added-data-files"], summary["added-records"]) == ("3", "15")
    assert first["commit"] == str(table_spark.sql(
        f"SELECT snapshot_id FROM {table.name}.snapshots").first()["snapshot_id"])

    # A retry of the run: the table has its write; nothing is committed, its files are gone.
    again = run_ingest(table_spark, kafka_config, early, table.sink("run-1"), sql=None,
                       max_records_per_split=5)
    assert again["skipped"] and not again["committed"] and again["records_written"] == 0
    assert table.commit_count(table_spark) == 1
    assert stored_parquet(data_folder, s3_endpoint) == set(files)

    # A reprocessing: one snapshot removes the run's earlier files and adds the new ones.
    redo = run_ingest(table_spark, kafka_config, early, table.sink("run-1", generation=1),
                      sql=None, max_records_per_split=5)
    assert redo["committed"] and redo["landed"] and redo["replaced"] == [first["write_id"]]
    assert table.commit_count(table_spark) == 2
    assert table.rows(table_spark) == expected(data, early)
    assert table.writes(table_spark) == Counter({redo["write_id"]: 15})
    summary = newest_summary(table_spark, table)
    assert (summary["added-data-files"], summary["deleted-data-files"],
            summary["added-records"], summary["deleted-records"]) == ("3", "3", "15", "15")
    assert summary["kafka-spark.write-id"] == redo["write_id"]
    redone = current_files(table_spark, table)
    assert not set(redone) & set(files) and sorted(redone.values()) == sorted(files.values())

    # Another run; a filter on the offset prunes by the files' statistics.
    late = ranges_of(name, {0: (5, 10), 1: (5, 10), 2: (5, 10)})
    run_ingest(table_spark, kafka_config, late, table.sink("run-2"), sql=None,
               max_records_per_split=5)
    assert table.rows(table_spark) == expected(data, early) + expected(data, late)
    assert sorted(current_files(table_spark, table).values()) == sorted(
        [(5, p, 0, 4) for p in range(3)] + [(5, p, 5, 9) for p in range(3)])
    headers = table_spark.sql(f"SELECT `partition`, `offset`, headers FROM {table.name}")
    assert sorted((r["partition"], r["offset"], [(h["key"], bytes(h["value"]))
                                                 for h in r["headers"]])
                  for r in headers.collect()) == [
        (p, o, [("h", f"{p}-{o}".encode())]) for p in range(3) for o in range(10)]

    catalog = s3_catalog if kind == "iceberg-s3" else pg_catalog
    read_elsewhere = reader(kind, catalog)
    if read_elsewhere is not None:
        from pyiceberg.expressions import LessThan

        assert read_elsewhere(table) == expected(data, early) + expected(data, late)
        loaded = catalog.load_table(table.name.split(".", 1)[1])
        assert len(list(loaded.scan().plan_files())) == 6
        assert len(list(loaded.scan(row_filter=LessThan("offset", 5)).plan_files())) == 3
        assert Counter(r["offset"] < 5 for r in loaded.scan(
            row_filter=LessThan("offset", 5)).to_arrow().to_pylist()) == Counter({True: 15})


def intake_of(spark: Any, table: Table, topic_name: str) -> Any:
    """What the table's sink answers a run of the records as read, after its prepare."""
    from airflow_provider_kafka_spark.spark.schema import kafka_schema

    sink = table.sink("run-x")
    sink.prepare(spark, spark.createDataFrame([], kafka_schema(True)))
    taken = sink.intake(SinkInput("x", "as_read", "python",
                                  ranges_of(topic_name, {0: (0, 1)}))).takes
    sink.abort()
    return taken


@pytest.mark.parametrize(
    ("columns", "change", "why"),
    [
        (AS_READ_COLUMNS, "ALTER TABLE {t} ADD PARTITION FIELD truncate(4, topic)",
         "the table is partitioned by truncate[4](topic), which the readers do not compute "
         "of the files' columns"),
        (AS_READ_COLUMNS, "ALTER TABLE {t} WRITE ORDERED BY `offset`",
         "the table has a sort order, which the readers' files do not follow"),
        (AS_READ_COLUMNS, "ALTER TABLE {t} SET TBLPROPERTIES ('write.format.default'='orc')",
         "its data files are orc, not parquet"),
        (AS_READ_COLUMNS,
         "ALTER TABLE {t} SET TBLPROPERTIES ('write.parquet.compression-codec'='lzo')",
         "its Parquet codec lzo is not one the readers write"),
        (AS_READ_COLUMNS,
         "ALTER TABLE {t} SET TBLPROPERTIES ('write.parquet.compression-codec'='brotli')",
         "its Parquet codec brotli needs a codec the JVM may lack, which Spark's writer checks"),
        (AS_READ_COLUMNS,
         "ALTER TABLE {t} SET TBLPROPERTIES ('write.data.path'='hdfs://nn:8020/data')",
         "its data folder hdfs://nn:8020/data is neither local nor on S3"),
        (AS_READ_COLUMNS.replace("`partition` INT", "`partition` BIGINT"), "",
         "the column partition is optional long in the table; the readers write optional int"),
        (AS_READ_COLUMNS.replace("`offset` BIGINT", "`offset` BIGINT NOT NULL"), "",
         "the column offset is required long in the table; the readers write optional long"),
        (AS_READ_COLUMNS.replace("timestampType INT", "TimestampType INT"), "",
         "the table has no column named exactly timestampType"),
        (AS_READ_COLUMNS + ", extra STRING NOT NULL", "",
         "the table's column extra is NOT NULL and the readers do not write it"),
    ],
    ids=["partitioned", "sorted", "orc", "codec", "brotli", "hdfs", "wider-type", "required",
         "other-case", "required-extra"],
)
def test_tables_that_cannot_take_the_readers_files_get_spark_rows_and_the_log_says_why(
        table_spark: Any, topic: Any, warehouses: Any, caplog: pytest.LogCaptureFixture,
        columns: str, change: str, why: str) -> None:
    table = create(table_spark, "iceberg-hadoop", warehouses.lake, columns)
    if change:
        table_spark.sql(change.format(t=table.name))
    with caplog.at_level(logging.INFO, logger="airflow_provider_kafka_spark.sinks.tables"):
        assert intake_of(table_spark, table, topic[0]) == SparkRows()
    reasons = [r.getMessage() for r in caplog.records if "Spark's writer" in r.getMessage()]
    assert reasons == [f"IcebergSink: the run's records go into {table.name} through Spark's "
                       f"writer, not as the readers' files: {why}."]


@pytest.mark.parametrize(("columns", "partitioned_by"), [
    (AS_READ_COLUMNS, "truncate(4, topic)"),
    (AS_READ_COLUMNS.replace("`partition` INT", "`partition` BIGINT"), ""),
], ids=["partitioned", "wider-type"])
def test_a_table_that_cannot_take_the_files_takes_the_run_through_sparks_writer(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        columns: str, partitioned_by: str) -> None:
    name, data = topic
    table = create(table_spark, "iceberg-hadoop", warehouses.lake, columns, partitioned_by)
    ranges = ranges_of(name, {0: (2, 7), 2: (0, 10)})
    out = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"), sql=None)
    assert out["committed"] and not out["landed"] and out["records_written"] == 15
    assert table.rows(table_spark) == expected(data, ranges)
    assert not any("kafka-spark-" in f for f in current_files(table_spark, table,
                                                              one_partition_each=False))


def mapping_of(spark: Any, table: Table) -> dict[str, Any]:
    """The table's name mapping: ``{name: (field id, {nested name: ...})}``."""
    properties = {r["key"]: r["value"]
                  for r in spark.sql(f"SHOW TBLPROPERTIES {table.name}").collect()}

    def flat(fields: list[dict[str, Any]]) -> dict[str, Any]:
        return {n: (f.get("field-id"), flat(f.get("fields", []))) for f in fields
                for n in f["names"]}

    return flat(json.loads(properties[NAME_MAPPING]))


def test_the_name_mapping_maps_every_column_and_keeps_the_aliases_it_had(
        table_spark: Any, topic: Any, warehouses: Any) -> None:
    table = create(table_spark, "iceberg-hadoop", warehouses.lake, AS_READ_COLUMNS)
    ids = {f.name: i for i, f in enumerate(table_spark.table(table.name).schema.fields, 1)}
    # An earlier mapping with an alias, and without the sink's column or the headers' fields.
    earlier = [{"field-id": 2, "names": ["value", "payload"]},
               {"field-id": 1, "names": ["key"]}, {"field-id": 8, "names": ["headers"]}]
    table_spark.sql(f"ALTER TABLE {table.name} SET TBLPROPERTIES "
                    f"('{NAME_MAPPING}'='{json.dumps(earlier)}')")
    assert isinstance(intake_of(table_spark, table, topic[0]), LandedParquet)
    mapping = mapping_of(table_spark, table)
    header_fields = mapping["headers"][1]["element"][1]
    assert {n: i for n, (i, _) in mapping.items()} == {
        **ids, "payload": 2, WRITE_COLUMN: len(ids) + 1 + 3}  # after headers' 3 nested ids
    assert {n: i for n, (i, _) in header_fields.items()} == {"key": 10, "value": 11}
    # Complete now: the next run leaves it as it is.
    assert isinstance(intake_of(table_spark, table, topic[0]), LandedParquet)
    assert mapping_of(table_spark, table) == mapping


def test_a_try_whose_run_another_try_committed_since_its_look_up_conflicts_and_writes_nothing(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    """Two tries of one run: the second commits between the first's look-up and its commit.
    The first's commit fails validation (files of this run added since the snapshot it read),
    its look-up again finds the write, and it writes nothing: the rows are there once."""
    from airflow_provider_kafka_spark.sinks.tables import IcebergSink

    name, data = topic
    table = create(table_spark, "iceberg-jdbc", warehouses.lake, AS_READ_COLUMNS)
    other = ranges_of(name, {1: (0, 3)})
    run_ingest(table_spark, kafka_config, other, table.sink("run-0"), sql=None)
    ranges = ranges_of(name, {0: (0, 4), 2: (3, 6)})
    raced: list[dict[str, Any]] = []

    class Racing(IcebergSink):
        def commit_files(self, spark: Any, folder: str, files: Any, replacing: list[str],
                         record: Any) -> dict[str, Any]:
            if not raced:  # the other try commits the same write now
                raced.append(run_ingest(table_spark, kafka_config, ranges,
                                        table.sink("run-1"), sql=None))
            return super().commit_files(spark, folder, files, replacing, record)

    with caplog.at_level(logging.INFO, logger="airflow_provider_kafka_spark.sinks.tables"):
        out = run_ingest(table_spark, kafka_config, ranges,
                         Racing(table.name, application="app", run="run-1"), sql=None)
    [conflict] = [r.getMessage() for r in caplog.records if "conflicted" in r.getMessage()]
    assert "Found conflicting files" in conflict
    assert raced[0]["committed"] and raced[0]["landed"] and raced[0]["records_written"] == 7
    assert out["skipped"] and not out["committed"] and out["write_id"] == raced[0]["write_id"]
    assert table.rows(table_spark) == expected(data, ranges) + expected(data, other)
    assert table.commit_count(table_spark) == 2


def test_a_run_whose_splits_landed_no_file_commits_a_snapshot_that_records_it(
        table_spark: Any, topic: Any, warehouses: Any) -> None:
    """Ranges whose records are all gone from the read (e.g. aborted transactions) land no
    file: the commit still records the run, adding nothing."""
    from airflow_provider_kafka_spark.spark.schema import kafka_schema

    table = create(table_spark, "iceberg-hadoop", warehouses.lake, AS_READ_COLUMNS)
    ranges = ranges_of(topic[0], {0: (0, 2)})
    sink = table.sink("run-e")
    sink.prepare(table_spark, table_spark.createDataFrame([], kafka_schema(True)))
    taken = sink.intake(SinkInput("e", "as_read", "python", ranges)).takes
    assert isinstance(taken, LandedParquet)
    taken.adopt([])
    out = sink.commit({"ranges": ranges.to_dict()})
    assert out["committed"] and out["landed"] and out["records_written"] == 0
    assert out["commit"] is not None
    [record] = table.records(table_spark)
    assert (record.run, record.ranges) == ("run-e", ((topic[0], 0, 0, 2),))
    assert table.rows(table_spark) == Counter()


def jobs_of(spark: Any, group: str, call: Any) -> tuple[Any, int]:
    """``call()``'s result and how many Spark jobs it ran (in the job group ``group``)."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        result = call()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return result, len(context.statusTracker().getJobIdsForGroup(group))


def test_the_look_up_reads_the_files_metrics_and_the_rows_only_where_deletes_hide_some(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any) -> None:
    """A run's write ids come from its files' bounds of the write column, planned through
    the Java API without a Spark job; once deletes cover some of its rows, from the rows; once
    they cover all, the run is not in the table and its next try commits it again."""
    name, data = topic
    table = create(table_spark, "iceberg-hadoop", warehouses.of("iceberg-hadoop"),
                   AS_READ_COLUMNS)
    early = ranges_of(name, {0: (0, 5), 1: (0, 5), 2: (0, 5)})
    first = run_ingest(table_spark, kafka_config, early, table.sink("run-1"), sql=None)
    assert first["committed"] and first["landed"]
    sink = table.sink("run-1")
    tag = uuid.uuid4().hex[:8]

    def look_up() -> set[str]:
        sink.refresh(table_spark)
        return sink.writes_of_run(table_spark, sink.application_state(table_spark).head)

    assert jobs_of(table_spark, f"metrics-{tag}", look_up) == ({first["write_id"]}, 0)
    assert table.sink("run-2").writes_of_run(table_spark) == set()

    table_spark.sql(f"ALTER TABLE {table.name} SET TBLPROPERTIES "
                    "('write.delete.mode'='merge-on-read')")
    table_spark.sql(f"DELETE FROM {table.name} WHERE `offset` < 2")  # position deletes
    found, jobs = jobs_of(table_spark, f"rows-{tag}", look_up)
    assert found == {first["write_id"]} and jobs > 0
    table_spark.sql(f"DELETE FROM {table.name} WHERE `offset` >= 2")
    assert table.rows(table_spark) == Counter()
    found, jobs = jobs_of(table_spark, f"none-{tag}", look_up)
    assert found == set() and jobs > 0

    again = run_ingest(table_spark, kafka_config, early, table.sink("run-1"), sql=None)
    assert again["committed"] and again["landed"] and again["replaced"] == []
    assert table.rows(table_spark) == expected(data, early)
