"""Decoded, shaped records landed by the readers into partitioned tables (issue 53): Avro in the
Schema Registry wire format, decoded by the readers, into an Iceberg table partitioned by
``hours(ts)`` and a Delta table partitioned by an ``hour`` column. Each lands exactly the rows
Spark's writer lands from the same slice (the same shape applied through Spark), with the same
partition values as Spark's reader sees them; a retry of the run commits nothing; a
reprocessing replaces the run's rows in one commit; a dead-letter decode is refused before the
read."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.errors import ConfigurationError, CorruptRecordError
from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.shaping import Derived, Shape
from airflow_provider_kafka_spark.sinks.tables import WRITE_COLUMN
from airflow_provider_kafka_spark.spark import ingest
from airflow_provider_kafka_spark.spark.shape import shape_frame
from tests.tables.cases import AS_READ_COLUMNS, create, delta_storage_options
from tools.kafka_records import produce

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

HOUR_MS = 3_600_000
HOUR_US = HOUR_MS * 1000
RECORDS = 60
SHAPES = {
    "iceberg": Shape(["partition", "offset", "timestamp AS ts", "value.*"]),
    "delta": Shape(["partition", "offset", "value.*"],
                        {"hour": Derived("timestamp", "hour")}),
}
COLUMNS = {
    "iceberg": ("`partition` INT, `offset` BIGINT, ts TIMESTAMP, id BIGINT, "
                       "user STRING, amount DOUBLE"),
    "delta": ("`partition` INT, `offset` BIGINT, id BIGINT, user STRING, amount DOUBLE, "
                   "hour STRING"),
}
PARTITIONED_BY = {"iceberg": "hours(ts)", "delta": "hour"}


@pytest.fixture(scope="module")
def events(kafka_config: dict[str, Any], schema_registry: dict[str, Any]) -> Any:
    """:data:`RECORDS` Avro events over 3 partitions, their Kafka timestamps over 4 hours, and
    one corrupt record (``on_corrupt="skip"`` drops it)."""
    import uuid

    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    topic = f"avro-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config)
    create_topic(admin, topic, 3)
    serializer = AvroSerializer(SchemaRegistryClient(schema_registry), json.dumps({
        "type": "record", "name": "Event", "fields": [
            {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
            {"name": "amount", "type": "double"}]}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    start = (1_796_371_200_000 // HOUR_MS) * HOUR_MS  # 2026-12-04T08:00Z
    records = [(i % 3, None, serializer({"id": i, "user": f"u{i % 5}", "amount": i / 4}, ctx),
                start + (i % 4) * HOUR_MS + i) for i in range(RECORDS)]
    records[17] = (2, None, b"not avro", start)
    produce(kafka_config, topic, records)
    yield topic, start
    admin.delete_topics([topic])[topic].result(30)


def _decode(schema_registry: dict[str, Any], on_corrupt: str = "skip") -> Decoding:
    return Decoding(value_format="avro", schema_registry=schema_registry, on_corrupt=on_corrupt)


def _rows(spark: Any, df: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in df.drop(WRITE_COLUMN).collect())


@pytest.mark.parametrize("kind", ["iceberg-hadoop", "delta-path", "iceberg-s3", "delta-s3"])
def test_a_decoded_slice_lands_in_a_partitioned_table_as_sparks_writer_lands_it(
        table_spark: Any, kafka_config: dict[str, Any], schema_registry: dict[str, Any],
        events: Any, warehouses: Any, s3_endpoint: Any, kind: str) -> None:
    topic, start = events
    fmt = kind.split("-")[0]
    shape = SHAPES[fmt]
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    ours = create(table_spark, kind, warehouses.of(kind), COLUMNS[fmt], PARTITIONED_BY[fmt])
    theirs = create(table_spark, kind, warehouses.of(kind), COLUMNS[fmt], PARTITIONED_BY[fmt])

    result = ingest(table_spark, ranges, kafka_config, ours.sink("run-1"),
                    decode=_decode(schema_registry), shape=shape)
    spark_writer = ingest(table_spark, ranges, kafka_config, theirs.sink("run-1"),
                          decode=_decode(schema_registry),
                          transform=lambda df: shape_frame(df, shape))

    assert result.output["landed"] and result.output["committed"]
    assert not spark_writer.output["landed"]
    assert result.records == spark_writer.records == RECORDS
    assert result.decode is not None and result.decode.to_dict() == {
        "decoded": RECORDS - 1, "skipped": 1, "dead_lettered": 0}
    assert result.output["records_written"] == RECORDS - 1
    landed = _rows(table_spark, ours.df(table_spark))
    assert landed == _rows(table_spark, theirs.df(table_spark))
    assert sum(landed.values()) == RECORDS - 1
    assert ours.writes(table_spark) == Counter({result.output["write_id"]: RECORDS - 1})
    first_hour = start // HOUR_MS
    if kind.startswith("iceberg"):
        # the partition data each file's commit recorded, as Spark's reader sees it
        def partitions(table: Any) -> Counter[tuple[int, int]]:
            return Counter({(r[0], r[1]) for r in table_spark.sql(
                f"SELECT partition.ts_hour, record_count FROM {table.name}.partitions").collect()})

        assert partitions(ours) == partitions(theirs)
        assert {h for h, _ in partitions(ours)} == {first_hour + h for h in range(4)}
        by_file = table_spark.sql(f"SELECT _partition.ts_hour AS h, ts FROM {ours.name}").collect()
        assert all(int(r.h) == int(r.ts.timestamp()) // 3600 for r in by_file)
        pruned = table_spark.sql(f"SELECT count(*) FROM {ours.name} WHERE ts >= "
                                 f"timestamp_millis({start + 2 * HOUR_MS})").first()[0]
        assert pruned == sum(1 for h in range(RECORDS) if h != 17 and h % 4 >= 2)
    else:
        hours = ours.df(table_spark).selectExpr("hour", "_metadata.file_path AS f").collect()
        assert all(f"/hour={r.hour}/" in r.f for r in hours)  # read from partitionValues
        import pyarrow as pa
        from deltalake import DeltaTable

        options = delta_storage_options(s3_endpoint) if kind == "delta-s3" else None
        actions = pa.table(DeltaTable(ours.location, storage_options=options)
                           .get_add_actions(flatten=True)).to_pylist()
        assert {a["partition.hour"] for a in actions} == {
            f"2026-12-04-{8 + h:02d}" for h in range(4)}
        assert all(json.loads(a["stats"])["numRecords"] > 0 if "stats" in a else True
                   for a in actions)
        assert table_spark.sql(f"DESCRIBE DETAIL delta.`{ours.name}`").first()[
            "partitionColumns"] == ["hour"]
    commits = ours.commit_count(table_spark)

    again = ingest(table_spark, ranges, kafka_config, ours.sink("run-1"),
                   decode=_decode(schema_registry), shape=shape)
    assert again.output["skipped"] and not again.output["committed"]
    assert ours.commit_count(table_spark) == commits
    assert _rows(table_spark, ours.df(table_spark)) == landed

    redone = ingest(table_spark, ranges, kafka_config, ours.sink("run-1", generation=1),
                    decode=_decode(schema_registry), shape=shape)
    assert redone.output["committed"] and redone.output["replaced"] == [
        result.output["write_id"]]
    assert ours.commit_count(table_spark) == commits + 1
    assert _rows(table_spark, ours.df(table_spark)) == landed
    assert ours.writes(table_spark) == Counter({redone.output["write_id"]: RECORDS - 1})


def test_a_corrupt_record_fails_a_landed_run_with_nothing_committed_and_dead_letters_are_refused(
        table_spark: Any, kafka_config: dict[str, Any], schema_registry: dict[str, Any],
        events: Any, warehouses: Any) -> None:
    topic, _ = events
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    table = create(table_spark, "delta-path", warehouses.lake, COLUMNS["delta"], "hour")
    with pytest.raises(ConfigurationError, match="dead.letter"):
        ingest(table_spark, ranges, kafka_config, table.sink("run-1"),
               decode=_decode(schema_registry, "dead_letter"), shape=SHAPES["delta"])

    with pytest.raises(CorruptRecordError, match=rf"the first is {topic}/2 at offset 5: value "
                                                 "is not avro"):
        ingest(table_spark, ranges, kafka_config, table.sink("run-1"),
               decode=_decode(schema_registry, "fail"), shape=SHAPES["delta"])
    assert table.df(table_spark).count() == 0
    assert table.records(table_spark) == []  # no commit of a run (prepare added its column)
    assert not list(Path(table.location).glob("kafka-spark-*"))  # the landed files went


def test_records_as_read_land_in_an_iceberg_table_partitioned_by_identity_days_and_bucket(
        table_spark: Any, kafka_config: dict[str, Any], events: Any, warehouses: Any) -> None:
    """Three partition fields (``identity`` of an int, ``days`` of a timestamp: a date value,
    ``bucket[4]`` of a long: Iceberg's murmur3): the readers' files carry the same partition
    data as Spark's writer's (Iceberg's Java transforms)."""
    topic, _ = events
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    spec = "`partition`, days(`timestamp`), bucket(4, `offset`)"
    ours = create(table_spark, "iceberg-hadoop", warehouses.lake, AS_READ_COLUMNS, spec)
    theirs = create(table_spark, "iceberg-hadoop", warehouses.lake, AS_READ_COLUMNS, spec)

    landed = ingest(table_spark, ranges, kafka_config, ours.sink("run-1")).output
    spark_writer = ingest(table_spark, ranges, kafka_config, theirs.sink("run-1"),
                          sql="SELECT * FROM kafka").output

    assert landed["landed"] and not spark_writer["landed"]
    assert landed["records_written"] == spark_writer["records_written"] == RECORDS
    def rows(table: Any) -> Counter[tuple[Any, ...]]:
        return Counter((r[0], r[1], bytes(r[2]), r[3]) for r in table.df(table_spark).select(
            "partition", "offset", "value", "timestamp").collect())

    assert rows(ours) == rows(theirs)
    assert sum(rows(ours).values()) == RECORDS

    def partitions(table: Any) -> set[tuple[Any, ...]]:
        return {tuple(r) for r in table_spark.sql(
            f"SELECT partition.`partition`, partition.timestamp_day, "
            f"partition.offset_bucket, record_count "
            f"FROM {table.name}.partitions").collect()}

    assert partitions(ours) == partitions(theirs)
    assert len({p[:2] for p in partitions(ours)}) == 3  # three Kafka partitions, one day
    assert len({p[2] for p in partitions(ours)}) == 4  # every bucket


def test_the_readers_transforms_are_pyicebergs() -> None:
    """Iceberg's transforms as the readers compute them, against pyiceberg's own, on random
    values (before the epoch too) and nulls."""
    import datetime as dt
    import random

    import pyarrow as pa
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )
    from pyiceberg.types import DateType, IntegerType, LongType, StringType, TimestamptzType

    from airflow_provider_kafka_spark.spark.read.transforms import partition_values

    def ours(values: list[Any], kind: pa.DataType, transform: str) -> list[Any]:
        return partition_values(pa.array(values, kind), transform).to_pylist()

    def theirs(values: list[Any], function: Any) -> list[Any]:
        return [None if v is None else str(function(v)) for v in values]

    rng = random.Random(53)
    longs = [rng.randint(-2**63, 2**63 - 1) for _ in range(300)] + [0, -1, 34, None]
    ints = [rng.randint(-2**31, 2**31 - 1) for _ in range(300)] + [None]
    micros = [rng.randint(-2**55, 2**55) for _ in range(300)] + [-1, 0, None]
    days = [rng.randint(-40_000, 40_000) for _ in range(300)] + [None]
    texts = ["", "a", "abcd", "abcde", "iceberg", "ünïcødé ✓", None,
             *(str(rng.random()) for _ in range(100))]
    utc = pa.timestamp("us", tz="UTC")
    for n in (1, 4, 16, 1000):
        bucket = BucketTransform(n)
        assert ours(longs, pa.int64(), f"bucket[{n}]") == theirs(longs, bucket.transform(LongType()))
        assert ours(ints, pa.int32(), f"bucket[{n}]") == theirs(ints, bucket.transform(IntegerType()))
        assert ours(micros, utc, f"bucket[{n}]") == theirs(
            micros, bucket.transform(TimestamptzType()))
        assert ours(texts, pa.string(), f"bucket[{n}]") == theirs(
            texts, bucket.transform(StringType()))
        assert partition_values(pa.array(days, pa.int32()).cast(pa.date32()),
                                f"bucket[{n}]").to_pylist() == theirs(
            days, bucket.transform(DateType()))
    for name, transform in (("hour", HourTransform()), ("month", MonthTransform()),
                            ("year", YearTransform())):
        assert ours(micros, utc, name) == theirs(micros, transform.transform(TimestamptzType()))
    day = DayTransform().transform(TimestamptzType())
    assert ours(micros, utc, "day") == [
        None if m is None else (dt.date(1970, 1, 1) + dt.timedelta(days=day(m))).isoformat()
        for m in micros]
    assert ours(longs, pa.int64(), "truncate[10]") == theirs(
        longs, TruncateTransform(10).transform(LongType()))


@pytest.mark.parametrize("kind", ["iceberg-hadoop", "delta-path"])
def test_two_runs_landing_decoded_partitions_at_once_land_once_each(
        table_spark: Any, kafka_config: dict[str, Any], schema_registry: dict[str, Any],
        events: Any, warehouses: Any, kind: str) -> None:
    """Four ingests of one driver at once into one partitioned table: two runs (each half of
    every Kafka partition), each tried twice. Each run is committed once (the other try finds
    it and writes nothing), and the table holds every decoded record once, in its hour."""
    import threading
    import time as clock

    from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange

    topic, start = events
    fmt = kind.split("-")[0]
    table = create(table_spark, kind, warehouses.of(kind), COLUMNS[fmt], PARTITIONED_BY[fmt])
    per_partition = RECORDS // 3
    half = per_partition // 2
    runs = {"first": OffsetRanges(tuple(PartitionRange(topic, p, 0, half) for p in range(3))),
            "second": OffsetRanges(tuple(PartitionRange(topic, p, half, per_partition)
                                         for p in range(3)))}
    tries = [(run, n) for run in runs for n in range(2)]
    outputs: dict[tuple[str, int], Any] = {}
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(tries))

    def run_one(run: str, n: int) -> None:
        try:
            sink = table.sink(run)
            barrier.wait(60)
            outputs[(run, n)] = dict(ingest(table_spark, runs[run], kafka_config, sink,
                                            decode=_decode(schema_registry),
                                            shape=SHAPES[fmt]).output)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run_one, args=t) for t in tries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    if failures:
        raise failures[0]
    for run in runs:
        done = sorted((outputs[(run, n)]["committed"], outputs[(run, n)]["skipped"])
                      for n in range(2))
        assert done == [(False, True), (True, False)], (run, done)
        assert any(outputs[(run, n)]["landed"] for n in range(2))
    assert sorted(r.run for r in table.records(table_spark)) == ["first", "second"]

    want: Counter[tuple[Any, ...]] = Counter()
    for i in range(RECORDS):
        if i == 17:  # the corrupt record, skipped
            continue
        ms = start + (i % 4) * HOUR_MS + i
        if fmt == "iceberg":
            want[(i % 3, i // 3, ms * 1000, i, f"u{i % 5}", i / 4)] += 1
        else:
            hour = clock.strftime("%Y-%m-%d-%H", clock.gmtime(ms // 1000))
            want[(i % 3, i // 3, i, f"u{i % 5}", i / 4, hour)] += 1
    got = table.df(table_spark).drop(WRITE_COLUMN)
    if fmt == "iceberg":
        got = got.selectExpr("`partition`", "`offset`", "unix_micros(ts) AS ts", "id", "user",
                             "amount")
    assert Counter(tuple(r) for r in got.collect()) == want


def test_a_partition_spec_changed_while_the_readers_land_commits_nothing_and_the_retry_lands(
        table_spark: Any, kafka_config: dict[str, Any], schema_registry: dict[str, Any],
        events: Any, warehouses: Any) -> None:
    """The readers split the files by the spec the sink read before the read; a spec changed
    before the commit (another writer's ALTER, made here once the files landed) fails the
    commit with nothing committed, and the retry lands by the new spec."""
    from airflow_provider_kafka_spark.errors import TableError
    from airflow_provider_kafka_spark.sinks.tables import IcebergSink

    topic, _ = events
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    table = create(table_spark, "iceberg-hadoop", warehouses.lake, COLUMNS["iceberg"],
                   PARTITIONED_BY["iceberg"])

    class AlteredAfterTheLanding(IcebergSink):
        def _adopt(self, files: Any) -> Any:
            table_spark.sql(f"ALTER TABLE {table.name} ADD PARTITION FIELD `partition`")
            return super()._adopt(files)

    with pytest.raises(TableError, match="partition spec of .* changed since the read"):
        ingest(table_spark, ranges, kafka_config,
               AlteredAfterTheLanding(table.name, application="app", run="run-1"),
               decode=_decode(schema_registry), shape=SHAPES["iceberg"])
    table_spark.sql(f"REFRESH TABLE {table.name}")
    assert table.records(table_spark) == [] and table.df(table_spark).count() == 0

    retried = ingest(table_spark, ranges, kafka_config, table.sink("run-1"),
                     decode=_decode(schema_registry), shape=SHAPES["iceberg"]).output
    assert retried["committed"] and retried["landed"]
    assert retried["records_written"] == RECORDS - 1
    assert {r[0] for r in table_spark.sql(
        f"SELECT partition.`partition` FROM {table.name}.partitions").collect()} == {0, 1, 2}
