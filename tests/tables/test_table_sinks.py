"""Exactly once into Iceberg (Hadoop and JDBC-on-PostgreSQL catalogs) and Delta (path and
catalog tables), by the table's own state: retries, reprocessing, ranges resolved anew,
concurrent runs and the ``table`` start spec, each checked as exact multisets of rows and the
commits the table records; pyiceberg and delta-rs see the same rows as Spark."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    Subscription,
    resolve_offsets,
)
from airflow_provider_kafka_spark.sinks.tables import WRITE_COLUMN
from tests.tables.cases import (
    SQL,
    UPPER_SQL,
    create,
    expected,
    ranges_of,
    reader,
    run_ingest,
)
from tools.kafka_records import produce

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

NOW = int(time.time() * 1000)


def records(partitions: int, per_partition: int, tag: str = "") -> list[Any]:
    return [(p, f"k{p}-{tag}{i}".encode(), f"v{p}-{tag}{i}".encode(), NOW + i)
            for i in range(per_partition) for p in range(partitions)]


@pytest.fixture(scope="module")
def topic(kafka_config: dict[str, Any]) -> Any:
    """A 3-partition topic holding 20 records per partition (offsets 0..19)."""
    import uuid

    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    name = f"tables-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config)
    create_topic(admin, name, 3)
    data = records(3, 20)
    produce(kafka_config, name, data)
    yield name, data
    admin.delete_topics([name])[name].result(30)


@pytest.mark.parametrize("kind", ["iceberg-hadoop", "delta-path"])
def test_a_run_lands_once_a_retry_writes_nothing_and_a_reprocessing_replaces_it(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        pg_catalog: Any, kind: str) -> None:
    name, data = topic
    table = create(table_spark, kind, warehouses.lake)
    ranges = ranges_of(name, {0: (0, 10), 1: (5, 15), 2: (0, 20)})

    first = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    assert first["committed"] and not first["skipped"] and first["records_written"] == 40
    assert first["replaced"] == [] and first["location"]
    assert table.rows(table_spark) == expected(data, ranges)
    assert table.writes(table_spark) == Counter({first["write_id"]: 40})
    [record] = table.records(table_spark)
    assert (record.application, record.run, record.write_id) == ("app", "run-1",
                                                                  first["write_id"])
    assert record.ranges == ((name, 0, 0, 10), (name, 1, 5, 15), (name, 2, 0, 20))
    assert record.offsets == {(name, 0): 10, (name, 1): 15, (name, 2): 20}
    # Another run, whose rows this run's replacements below must never touch.
    other = ranges_of(name, {0: (0, 3)})
    run_ingest(table_spark, kafka_config, other, table.sink("run-2"))
    commits = table.commit_count(table_spark)

    # A retry of the same run (same generation, same ranges): the table says it is done.
    again = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    assert again["skipped"] and not again["committed"] and again["records_written"] == 0
    assert again["write_id"] == first["write_id"]
    assert table.rows(table_spark) == expected(data, ranges) + expected(data, other)
    assert table.commit_count(table_spark) == commits

    # Reprocessing on purpose (the run was cleared: generation 1) with a changed transform:
    # the run's rows are replaced in one new commit.
    redo = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1", generation=1),
                      sql=UPPER_SQL)
    assert redo["committed"] and redo["replaced"] == [first["write_id"]]
    assert table.rows(table_spark) == expected(data, ranges, upper=True) + expected(data, other)
    assert table.commit_count(table_spark) == commits + 1
    assert [r.write_id for r in table.records(table_spark)][0] == redo["write_id"]

    # Ranges resolved anew for the run (re_resolve): exactly the new ranges' rows remain.
    wider = ranges_of(name, {0: (0, 20), 1: (5, 20), 2: (0, 20)})
    run_ingest(table_spark, kafka_config, wider, table.sink("run-1", generation=1))
    assert table.rows(table_spark) == expected(data, wider) + expected(data, other)
    assert table.commit_count(table_spark) == commits + 2

    read_elsewhere = reader(kind, pg_catalog)
    if read_elsewhere is not None:
        assert read_elsewhere(table) == table.rows(table_spark)


@pytest.mark.parametrize("kind", ["iceberg-jdbc", "delta-catalog"])
def test_catalog_tables_take_a_run_once_and_other_readers_see_the_same_rows(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        pg_catalog: Any, kind: str) -> None:
    name, data = topic
    table = create(table_spark, kind, warehouses.lake)
    ranges = ranges_of(name, {0: (2, 12), 2: (0, 7)})
    first = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    again = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    assert first["committed"] and again["skipped"]
    assert table.rows(table_spark) == expected(data, ranges)
    assert [r.write_id for r in table.records(table_spark)] == [first["write_id"]]
    read_elsewhere = reader(kind, pg_catalog)
    if read_elsewhere is not None:
        assert read_elsewhere(table) == expected(data, ranges)


@pytest.mark.parametrize("kind", ["iceberg-hadoop", "delta-path", "iceberg-s3", "delta-s3"])
def test_two_runs_committing_at_once_both_land(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        kind: str) -> None:
    """Two runs of one driver (threads) commit at once. On S3 (``*-s3``) Iceberg's commit is
    the JDBC catalog's compare-and-swap, Delta's the single-driver S3 log store's (its lock in
    this JVM, then a plain PUT of the version's file)."""
    name, data = topic
    table = create(table_spark, kind, warehouses.of(kind))
    hours = {"hour-3": ranges_of(name, {0: (0, 10), 1: (0, 10), 2: (0, 10)}),
             "hour-4": ranges_of(name, {0: (10, 20), 1: (10, 20), 2: (10, 20)})}
    outputs: dict[str, Any] = {}
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(hours))

    def run(run_id: str) -> None:
        try:
            sink = table.sink(run_id)
            barrier.wait(30)
            outputs[run_id] = run_ingest(table_spark, kafka_config, hours[run_id], sink)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in hours]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    if failures:
        raise failures[0]
    assert all(o["committed"] for o in outputs.values())
    assert table.rows(table_spark) == expected(data, hours["hour-3"]) + expected(
        data, hours["hour-4"])
    assert sorted(r.run for r in table.records(table_spark)) == ["hour-3", "hour-4"]
    # Whichever committed last, the application's stops cover both runs.
    assert table.sink("-", application="app").recorded_offsets(table_spark) == {
        (name, 0): 20, (name, 1): 20, (name, 2): 20}


@pytest.mark.parametrize("kind", ["iceberg-hadoop", "delta-path"])
def test_the_look_up_of_a_runs_writes_opens_no_file_of_another_run(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        kind: str) -> None:
    # The files' statistics of the write column prune the look-up: with another run's data
    # files gone from disk, a retry still finds its own write (and writes nothing).
    from urllib.parse import urlparse

    from pyspark.sql import functions as F

    name, data = topic
    table = create(table_spark, kind, warehouses.lake)
    ranges = ranges_of(name, {0: (0, 5)})
    first = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    run_ingest(table_spark, kafka_config, ranges_of(name, {1: (0, 5)}), table.sink("run-2"))
    files = {(r[0], r[1]) for r in table.df(table_spark).select(
        F.input_file_name(), WRITE_COLUMN).distinct().collect()}
    others = {f for f, w in files if w != first["write_id"]}
    assert others and not others & {f for f, w in files if w == first["write_id"]}
    for uri in others:
        Path(urlparse(uri).path).unlink()
    again = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    assert again["skipped"] and again["records_written"] == 0


@pytest.mark.parametrize("kind", ["iceberg-jdbc", "delta-catalog"])
def test_the_table_start_spec_reads_every_record_once_over_five_runs(
        table_spark: Any, kafka_config: dict[str, Any], new_topic: Any, warehouses: Any,
        kind: str) -> None:
    name = new_topic(partitions=2)
    table = create(table_spark, kind, warehouses.lake)
    subscription = Subscription.topics([name])
    produced: list[Any] = []
    for run in range(5):
        batch = [(p, f"k{p}-{run}-{i}".encode(), f"v{p}-{run}-{i}".encode(), NOW + i)
                 for i in range(3 + run) for p in range(2)]
        produce(kafka_config, name, batch)
        produced += batch
        recorded = table.sink("-", application="hourly").recorded_offsets(table_spark)
        ranges = resolve_offsets(kafka_config, subscription, "table:earliest", "latest",
                                 table_offsets=recorded)
        assert ranges.group_id is None  # no consumer group anywhere
        if run:
            assert {(r.topic, r.partition): r.start for r in ranges} == recorded
        out = run_ingest(table_spark, kafka_config, ranges,
                         table.sink(f"run-{run}", application="hourly"))
        assert out["records_written"] == len(batch)
    everything = ranges_of(name, {0: (0, 25), 1: (0, 25)})
    assert table.rows(table_spark) == expected(produced, everything)
    assert sum(table.rows(table_spark).values()) == len(produced) == 50
    assert table.sink("-", application="hourly").recorded_offsets(table_spark) == {
        (name, 0): 25, (name, 1): 25}


def test_an_iceberg_table_partitioned_by_hour_keeps_its_partitioning(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any) -> None:
    name, data = topic
    table = create(table_spark, "iceberg-hadoop", warehouses.lake,
                   columns="topic STRING, `partition` INT, `offset` BIGINT, key STRING, "
                           "value STRING, `timestamp` TIMESTAMP",
                   partitioned_by="hours(`timestamp`), `partition`")
    ranges = ranges_of(name, {0: (0, 20), 1: (0, 20), 2: (0, 20)})
    sql = SQL.replace(" FROM kafka", ", `timestamp` FROM kafka")
    run_ingest(table_spark, kafka_config, ranges, table.sink("r"), sql=sql)
    run_ingest(table_spark, kafka_config, ranges, table.sink("r", generation=1), sql=sql)
    assert table.rows(table_spark) == expected(data, ranges)
    spec = table_spark.sql(f"SELECT partition FROM {table.name}.partitions").collect()
    assert {r["partition"]["partition"] for r in spec} == {0, 1, 2}


UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 1000}
"""A Kafka config nothing answers at: an error before the read is the sink's, not Kafka's."""


@pytest.mark.parametrize(
    ("kind", "table_name", "sql", "message"),
    [
        ("iceberg-hadoop", "nocatalog.db.orders", SQL, "names the catalog 'nocatalog', which the "
                                                       "session does not know"),
        ("iceberg-hadoop", "lake.db.missing_table", SQL, "does not exist. Create it first"),
        ("iceberg-hadoop", "{table}", SQL.replace("CAST(key AS STRING)", "`offset`"),
         r"do not fit the table .*key: output bigint, table string"),
        ("iceberg-hadoop", "{table}", SQL.replace(" FROM kafka", ", 1.5 AS extra FROM kafka"),
         "lacks the output's column.*extra decimal"),
        ("iceberg-hadoop", "{table}", SQL.replace(" FROM kafka", ", 'x' AS _kafka_spark_write "
                                                                 "FROM kafka"),
         "has a column '_kafka_spark_write', which the sink writes itself"),
        ("delta-path", "{warehouse}/not_a_table", SQL, "no Delta table at the path"),
        ("delta-catalog", "default.missing_delta", SQL, "no Delta table named"),
    ],
)
def test_bad_tables_and_schemas_fail_before_anything_is_read_or_written(
        table_spark: Any, topic: Any, warehouses: Any, kind: str, table_name: str, sql: str,
        message: str) -> None:
    name, _ = topic
    table = create(table_spark, kind, warehouses.lake)
    target = table_name.format(table=table.name, warehouse=warehouses.lake)
    from airflow_provider_kafka_spark.sinks.tables import table_sink
    from airflow_provider_kafka_spark.spark import ingest

    sink = table_sink(table.format, target, application="app", run="r")
    with pytest.raises(ConfigurationError, match=message):
        ingest(table_spark, ranges_of(name, {0: (0, 5)}), UNREACHABLE, sink, sql=sql)
    assert table.rows(table_spark) == Counter()


def test_a_table_of_the_other_format_is_refused_before_the_read(
        table_spark: Any, topic: Any, warehouses: Any) -> None:
    from airflow_provider_kafka_spark.sinks import DeltaSink, IcebergSink
    from airflow_provider_kafka_spark.spark import ingest

    name, _ = topic
    ranges = ranges_of(name, {0: (0, 5)})
    delta = create(table_spark, "delta-catalog", warehouses.lake)
    iceberg = create(table_spark, "iceberg-hadoop", warehouses.lake)
    with pytest.raises(ConfigurationError, match="not an Iceberg catalog; write a Delta table"):
        ingest(table_spark, ranges, UNREACHABLE,
               IcebergSink(f"spark_catalog.{delta.name}", application="a", run="r"), sql=SQL)
    with pytest.raises(ConfigurationError, match="is a iceberg table, not a Delta table|no "
                                                 "Delta table named"):
        ingest(table_spark, ranges, UNREACHABLE,
               DeltaSink(iceberg.name, application="a", run="r"), sql=SQL)


def test_schema_evolution_adds_the_missing_column_with_the_commit(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any) -> None:
    name, data = topic
    for kind in ("iceberg-hadoop", "delta-path"):
        table = create(table_spark, kind, warehouses.lake)
        ranges = ranges_of(name, {1: (0, 4)})
        sql = SQL.replace(" FROM kafka", ", length(value) AS size FROM kafka")
        run_ingest(table_spark, kafka_config, ranges, table.sink("r", schema_evolution=True),
                   sql=sql)
        df = table.df(table_spark)
        assert {"size", WRITE_COLUMN} <= set(df.columns)
        assert sorted(r["size"] for r in df.collect()) == [4, 4, 4, 4]  # 'v1-0'..'v1-3'
        assert table.rows(table_spark) == expected(data, ranges)


def test_a_partition_reprocessed_as_a_new_run_replaces_its_rows_once(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any) -> None:
    """Airflow 3.3 reprocesses a partition (``airflow backfill create --reprocess-behavior
    completed``) as a new run beside the old one. The ingest operator's table sink for that
    run (``for_run`` of its ``run_info``) is the same run with another generation: its commit
    replaces the first run's rows, and the table holds each record once."""
    from types import SimpleNamespace

    import pendulum

    from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
    from airflow_provider_kafka_spark.operators.sink_run import run_info
    from airflow_provider_kafka_spark.sinks import IcebergSink

    name, data = topic
    table = create(table_spark, "iceberg-hadoop", warehouses.lake)
    ranges = ranges_of(name, {0: (0, 10), 1: (5, 15), 2: (0, 20)})
    operator = KafkaSparkIngestOperator(task_id="ingest", ranges=ranges.to_dict(),
                                        sink=IcebergSink(table.name))
    hour = pendulum.datetime(2026, 11, 25, 8, tz="UTC")

    def sink_of(run_id: str, started: Any) -> Any:
        context = {"run_id": run_id, "partition_key": "2026-11-25T08:00:00",
                   "partition_date": hour, "ti": SimpleNamespace(map_index=-1, try_number=1),
                   "dag_run": SimpleNamespace(clear_number=0, start_date=started,
                                              run_after=hour)}
        return operator.sink.for_run(run_info(operator, context, ranges))

    first = run_ingest(table_spark, kafka_config, ranges,
                       sink_of("backfill__2026-11-25T08:00:00+00:00__a", hour.add(days=2)))
    again = run_ingest(table_spark, kafka_config, ranges,
                       sink_of("backfill__2026-11-25T08:00:00+00:00__b",
                               hour.add(days=2, hours=1)))
    assert first["committed"] and again["committed"] and again["replaced"] == [first["write_id"]]
    assert table.rows(table_spark) == expected(data, ranges)
    assert [r.run for r in table.records(table_spark)] == ["partition=2026-11-25T08:00:00"] * 2


@pytest.mark.parametrize("kind", ["delta-path", "iceberg-hadoop"])
def test_a_narrower_integer_column_lands_in_the_tables_wider_one(
        spark: Any, kafka_config: dict[str, Any], warehouses: Any, topic: Any, kind: str) -> None:
    """The column check lets an int into a bigint column: the rows land cast to the table's
    type (Delta's writer refused them after the read, a retry could never succeed)."""
    name, data = topic
    table = create(spark, kind, warehouses.of(kind),
                   "topic STRING, `partition` BIGINT, `offset` BIGINT, key STRING, value STRING")
    ranges = ranges_of(name, {0: (0, 4), 1: (2, 5)})
    output = run_ingest(spark, kafka_config, ranges, table.sink("r-wide"))
    assert (output["committed"], output["records_written"]) == (True, 7)
    assert table.rows(spark) == expected(data, ranges)
