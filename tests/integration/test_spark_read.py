"""read_kafka against the real broker and a real local[2] Spark: exact record sets."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec
from pyspark.sql import Observation

from airflow_provider_kafka_spark.offsets import (
    DataLossError,
    OffsetRanges,
    PartitionRange,
    Subscription,
    resolve_offsets,
)
from airflow_provider_kafka_spark.spark import (
    DecodeError,
    KafkaReadError,
    PartitionSummary,
    SparkKafkaSourceMissingError,
    decode_kafka,
    kafka_errors,
    kafka_schema,
    read_kafka,
    read_split,
    spark_kafka_package,
    summarize,
)
from airflow_provider_kafka_spark.spark.read import sources as sources_module
from airflow_provider_kafka_spark.spark.read.splits import plan_splits
from airflow_provider_kafka_spark.spark.read.summary import LostOffsets, ReadSummary
from airflow_provider_kafka_spark.spark.session import JVM_LOGGER
from airflow_provider_kafka_spark.spark.split_ends import SPLIT_END_COLUMN

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# Recent timestamps: records older than the topic's retention.ms would be deleted by the broker.
BASE_MS = int(time.time() * 1000) - 60_000
Row = tuple[str, int, int, bytes | None, bytes | None, datetime]


def produce(kafka_config: dict[str, Any], topic: str, records: Iterable[tuple[int, bytes | None,
            bytes | None]], *, headers: bool = False) -> list[Row]:
    """Produce (partition, key, value) with timestamps BASE_MS + i; return the stored rows."""
    producer = Producer({**kafka_config, "linger.ms": 5})
    stored: list[Row] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        stored.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                       _ts(msg.timestamp()[1])))

    for i, (partition, key, value) in enumerate(records):
        producer.produce(topic, value=value, key=key, partition=partition,
                         timestamp=BASE_MS + i, on_delivery=on_delivery,
                         headers=[("i", str(i).encode()), ("n", None)] if headers else None)
    assert producer.flush(30) == 0
    return sorted(stored)


def _ts(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def rows(df: Any) -> list[Row]:
    """(topic, partition, offset, key, value, timestamp UTC) of every row, sorted."""
    out = []
    for r in df.select("topic", "partition", "offset", "key", "value", "timestamp").collect():
        key = None if r["key"] is None else bytes(r["key"])
        value = None if r["value"] is None else bytes(r["value"])
        out.append((r["topic"], r["partition"], r["offset"], key, value,
                    r["timestamp"].replace(tzinfo=UTC)))
    return sorted(out)


def full_ranges(kafka_config: dict[str, Any], topic: str,
                isolation_level: str = "read_committed") -> OffsetRanges:
    return resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest",
                           isolation_level=isolation_level)


def wait_for_markers(kafka_admin: Any, topic: str, partitions: int, timeout: float = 30) -> None:
    """Commit markers are written asynchronously: wait until the LSO reaches the high watermark."""
    tps = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    deadline = time.monotonic() + timeout
    while True:
        def latest(level: IsolationLevel) -> dict[int, int]:
            futures = kafka_admin.list_offsets(tps, isolation_level=level)
            return {tp.partition: f.result().offset for tp, f in futures.items()}
        if latest(IsolationLevel.READ_COMMITTED) == latest(IsolationLevel.READ_UNCOMMITTED):
            return
        assert time.monotonic() < deadline, "transaction markers were not written in time"
        time.sleep(0.1)


def transactional_producer(kafka_config: dict[str, Any]) -> Producer:
    producer = Producer({**kafka_config, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    return producer


def test_reads_exactly_the_ranges(spark: Any, kafka_config: dict[str, Any],
                                  new_topic: Any) -> None:
    topic = new_topic(partitions=3)
    stored = produce(kafka_config, topic,
                     [(i % 3, f"k{i}".encode() if i % 5 else None, f"v{i}".encode() * 3)
                      for i in range(60)])
    # A slice in the middle of each partition: [3, 15) of 20 records per partition.
    ranges = OffsetRanges(tuple(PartitionRange(topic, p, 3, 15) for p in range(3)))

    df = read_kafka(spark, ranges.to_json(), kafka_config)

    assert df.schema == kafka_schema(include_headers=True)
    assert rows(df) == [r for r in stored if 3 <= r[2] < 15]
    assert len(rows(df)) == 36


def test_reads_in_one_session_register_the_source_once(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    """Each read_kafka registered the data source again, and the driver JVM logged a warning
    for it ("The data source kafka_bounded replaced a previously registered data source"):
    a task log with a read and a second read for its counts carried a warning line."""
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, f"v{i}".encode()) for i in range(3)])
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 3),))
    with caplog.at_level(logging.INFO, logger=JVM_LOGGER):
        counts = [read_kafka(spark, ranges, kafka_config).count() for _ in range(3)]
        time.sleep(2.0)  # the JVM's lines reach logging through a pipe and a thread
    assert counts == [3, 3, 3]
    replaced = [r.getMessage() for r in caplog.records
                if "replaced a previously registered data source" in r.getMessage()]
    assert replaced == []


def test_the_planned_read_and_the_data_source_read_the_same_splits(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any) -> None:
    """A read only the package consumes (split ends for write_kafka; landing) is planned as one
    mapInArrow task per split, without the data source's Python processes: the same records
    and Spark partitions as the data source's read. The end rows mark each split."""
    topic = new_topic(partitions=2)
    stored = produce(kafka_config, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode())
                                           for i in range(40)])
    ranges = OffsetRanges(tuple(PartitionRange(topic, p, 2, 17) for p in range(2)))
    source = read_kafka(spark, ranges, kafka_config, max_records_per_split=4)
    planned = read_kafka(spark, ranges, kafka_config, max_records_per_split=4, split_ends=True)

    expected = [r for r in stored if 2 <= r[2] < 17]
    assert rows(source) == expected
    assert rows(planned.where(f"{SPLIT_END_COLUMN} IS NULL")) == expected
    ends = sorted(tuple(r[SPLIT_END_COLUMN]) for r in
                  planned.where(f"{SPLIT_END_COLUMN} IS NOT NULL").collect())
    assert ends == sorted((r.topic, r.partition, r.start, r.stop, r.size, index, 1)
                          for index, s in enumerate(plan_splits(ranges, 4)) for r in s.ranges)
    # One Spark partition per split of at most 4 offsets: 4 per Kafka partition.
    assert source.rdd.getNumPartitions() == planned.rdd.getNumPartitions() == 8


def _small_transactional_partitions(kafka_config: dict[str, Any], kafka_admin: Any,
                                    topic: str, partitions: int) -> list[Row]:
    """Per partition 5 plain records, then one committed transaction of 2 records on every
    partition: each range up to the log's end ends in a commit marker."""
    stored = produce(kafka_config, topic, [(p, None, f"{p}-{i}".encode())
                                           for p in range(partitions) for i in range(5)])
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()
    for p in range(partitions):
        for i in range(2):
            producer.produce(topic, value=f"{p}-t{i}".encode(), partition=p)
    producer.commit_transaction(30)
    wait_for_markers(kafka_admin, topic, partitions)
    return stored


def test_small_ranges_of_many_partitions_are_one_task_read_by_one_consumer(
        spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any) -> None:
    """Twelve ranges of 8 offsets (5 records, a transaction of 2, its marker) make one split:
    one Spark task, one consumer, the records of every range exactly, an end row per range."""
    topic = new_topic(partitions=12)
    plain = _small_transactional_partitions(kafka_config, kafka_admin, topic, 12)
    ranges = full_ranges(kafka_config, topic)
    assert {(r.partition, r.start, r.stop) for r in ranges.ranges} == {
        (p, 0, 8) for p in range(12)}
    source = read_kafka(spark, ranges, kafka_config)
    planned = read_kafka(spark, ranges, kafka_config, split_ends=True)

    assert source.rdd.getNumPartitions() == planned.rdd.getNumPartitions() == 1
    read = rows(source)
    assert [r for r in read if r[2] < 5] == sorted(plain, key=lambda r: (r[1], r[2]))
    assert sorted((r[1], r[2], r[4]) for r in read if r[2] >= 5) == [
        (p, 5 + i, f"{p}-t{i}".encode()) for p in range(12) for i in range(2)]
    assert rows(planned.where(f"{SPLIT_END_COLUMN} IS NULL")) == read
    ends = [tuple(r[SPLIT_END_COLUMN]) for r in
            planned.where(f"{SPLIT_END_COLUMN} IS NOT NULL").collect()]
    assert ends == [(topic, p, 0, 8, 7, 0, 12) for p in range(12)]


def test_a_range_ending_at_a_marker_never_waits_for_the_fetch_to_time_out(
        kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any) -> None:
    """The end of a range at the log's end (after a commit marker) is known from a fetch at the
    end, which the broker holds up to fetch.wait.max.ms: the reader's default (10 ms) against
    librdkafka's (500 ms), eight ranges read one after the other (a consumer each)."""
    topic = new_topic(partitions=8)
    _small_transactional_partitions(kafka_config, kafka_admin, topic, 8)
    ranges = full_ranges(kafka_config, topic).ranges

    def seconds(config: dict[str, Any]) -> float:
        started = time.monotonic()
        records = sum(b.num_rows for r in ranges for b in read_split(r, config))
        assert records == 8 * 7
        return time.monotonic() - started

    waiting = seconds({**kafka_config, "fetch.wait.max.ms": 500})
    default = seconds(kafka_config)
    assert waiting - default > 8 * 0.4 * 0.5, (waiting, default)  # at least half the wait


def test_a_range_of_a_shared_consumer_that_lost_offsets_goes_on_alone(
        spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any) -> None:
    """One split of three ranges; offsets of the middle one are deleted after the read was
    planned: "fail" names that partition, "skip" reads the rest of it (a consumer of its own)
    and every record of the other two."""
    topic = new_topic(partitions=3)
    stored = produce(kafka_config, topic, [(p, None, f"{p}-{i}".encode())
                                           for p in range(3) for i in range(10)])
    ranges = full_ranges(kafka_config, topic)
    failing = read_kafka(spark, ranges, kafka_config)
    lost = LostOffsets()
    skipping = read_kafka(spark, ranges, kafka_config, on_data_loss="skip", lost=lost)
    assert skipping.rdd.getNumPartitions() == 1
    deleted = TopicPartition(topic, 1, 4)
    kafka_admin.delete_records([deleted])[deleted].result(30)

    with pytest.raises(DataLossError, match=rf"{topic}/1 \[0, 10\)") as caught, kafka_errors():
        failing.collect()
    assert caught.value.lost == {(topic, 1): 4}
    assert rows(skipping) == [r for r in sorted(stored, key=lambda r: (r[1], r[2]))
                              if not (r[1] == 1 and r[2] < 4)]
    assert lost.by_partition() == {(topic, 1): 4}


def test_a_join_never_broadcasts_the_read(spark: Any, kafka_config: dict[str, Any],
                                          new_topic: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Spark does not know the size of read_kafka's DataFrame (a Python data source, like its
    own Kafka source), so a join with a small table broadcasts the table, never the read: a
    plan of one row per split would look small enough to collect to the driver."""
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"v")])
    read = read_kafka(spark, OffsetRanges((PartitionRange(topic, 0, 0, 1),)), kafka_config)
    small = spark.range(3).selectExpr("CAST(id AS INT) AS partition", "'p' || id AS name")
    capsys.readouterr()
    read.join(small, "partition").explain()
    plan = capsys.readouterr().out
    assert "BroadcastHashJoin" in plan and "BuildRight" in plan, plan  # the right: small
    assert read.join(small, "partition").count() == 1


def test_headers_timestamp_type_and_no_headers(spark: Any, kafka_config: dict[str, Any],
                                               new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, b"k", b"v"), (0, None, None)], headers=True)
    ranges = full_ranges(kafka_config, topic)

    got = read_kafka(spark, ranges, kafka_config).orderBy("offset").collect()
    assert [r["headers"] for r in got] == [
        [("i", b"0"), ("n", None)], [("i", b"1"), ("n", None)]]
    assert [r["timestampType"] for r in got] == [0, 0]  # CreateTime
    assert (got[1]["key"], got[1]["value"]) == (None, None)

    plain = read_kafka(spark, ranges.to_dict(), kafka_config, include_headers=False)
    assert plain.schema == kafka_schema(include_headers=False)
    assert plain.count() == 2


def test_empty_ranges_never_touch_kafka(spark: Any) -> None:
    ranges = OffsetRanges((PartitionRange("nowhere", 0, 5, 5),))
    unreachable = {"bootstrap.servers": "127.0.0.1:1"}

    df = read_kafka(spark, ranges, unreachable)

    assert df.schema == kafka_schema()
    assert df.collect() == []
    assert read_kafka(spark, OffsetRanges(()), unreachable, engine="spark-kafka").count() == 0


def _transactional_topic(kafka_config: dict[str, Any], kafka_admin: Any,
                         new_topic: Any) -> tuple[str, list[int], list[int]]:
    """Offsets 0-4 committed, 5 marker, 6-10 aborted, 11 marker, 12-14 committed, 15 marker."""
    topic = new_topic(partitions=1)
    producer = transactional_producer(kafka_config)
    for commit, values in ((True, range(0, 5)), (False, range(5, 10)), (True, range(10, 13))):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=f"v{v}".encode(), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    wait_for_markers(kafka_admin, topic, 1)
    return topic, [0, 1, 2, 3, 4, 12, 13, 14], [6, 7, 8, 9, 10]


@pytest.mark.timeout(120)
def test_transactions_committed_vs_uncommitted(spark: Any, kafka_config: dict[str, Any],
                                               kafka_admin: Any, new_topic: Any) -> None:
    topic, committed, aborted = _transactional_topic(kafka_config, kafka_admin, new_topic)
    ranges = full_ranges(kafka_config, topic)
    assert [(r.start, r.stop) for r in ranges] == [(0, 16)]  # stop right after a commit marker

    read = read_kafka(spark, ranges, kafka_config, poll_timeout=20)
    assert [r["offset"] for r in read.orderBy("offset").collect()] == committed

    uncommitted = read_kafka(spark, full_ranges(kafka_config, topic, "read_uncommitted"),
                             kafka_config, isolation_level="read_uncommitted", poll_timeout=20)
    assert [r["offset"] for r in uncommitted.orderBy("offset").collect()] == sorted(
        committed + aborted)


@pytest.mark.timeout(60)
def test_stop_right_after_a_commit_marker_in_the_middle_finishes(
        spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any) -> None:
    topic, _, _ = _transactional_topic(kafka_config, kafka_admin, new_topic)
    # [0, 6): records 0-4 and the commit marker at 5; the last record is at stop - 2.
    # [6, 12): only aborted records and the abort marker: nothing to return, must still finish.
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 6),))
    gap_only = OffsetRanges((PartitionRange(topic, 0, 6, 12),))

    assert [r["offset"] for r in read_kafka(spark, ranges, kafka_config, poll_timeout=20)
            .orderBy("offset").collect()] == [0, 1, 2, 3, 4]
    assert read_kafka(spark, gap_only, kafka_config, poll_timeout=20).count() == 0


@pytest.mark.timeout(90)
def test_open_transaction_stops_at_the_lso(spark: Any, kafka_config: dict[str, Any],
                                           kafka_admin: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    stored = produce(kafka_config, topic, [(0, None, f"c{i}".encode()) for i in range(4)])
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"open{i}".encode(), partition=0)
    producer.flush(30)
    try:
        ranges = full_ranges(kafka_config, topic)
        assert [(r.start, r.stop) for r in ranges] == [(0, 4)]  # the LSO, not the HW (7)

        df = read_kafka(spark, ranges, kafka_config, poll_timeout=20)

        assert rows(df) == stored
    finally:
        producer.abort_transaction(30)


def test_splits_read_each_offset_exactly_once(spark: Any, kafka_config: dict[str, Any],
                                             new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    stored = produce(kafka_config, topic, [(0, None, str(i).encode()) for i in range(100)])
    ranges = OffsetRanges((PartitionRange(topic, 0, 5, 95),))

    df = read_kafka(spark, ranges, kafka_config, max_records_per_split=25)

    assert df.rdd.getNumPartitions() == 4
    assert rows(df) == stored[5:95]
    per_split = df.rdd.mapPartitions(lambda it: [[r["offset"] for r in it]]).collect()
    assert [(min(s), max(s), len(s)) for s in per_split] == [
        (5, 26, 22), (27, 49, 23), (50, 71, 22), (72, 94, 23)]


@pytest.mark.timeout(120)
def test_engine_parity(spark: Any, kafka_config: dict[str, Any], kafka_admin: Any,
                       new_topic: Any) -> None:
    topic = new_topic(partitions=3)
    produce(kafka_config, topic, [(i % 3, f"k{i}".encode(), f"v{i}".encode())
                                  for i in range(90)], headers=True)
    producer = transactional_producer(kafka_config)
    for commit in (True, False, True):
        producer.begin_transaction()
        for i in range(9):
            producer.produce(topic, key=b"tx", value=f"t{i}".encode(), partition=i % 3)
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    wait_for_markers(kafka_admin, topic, 3)
    ranges = OffsetRanges(tuple(
        PartitionRange(r.topic, r.partition, 2, r.stop) for r in full_ranges(kafka_config, topic)))

    python = read_kafka(spark, ranges, kafka_config, max_records_per_split=13)
    builtin = read_kafka(spark, ranges, kafka_config, max_records_per_split=13,
                         engine="spark-kafka")

    assert python.schema == builtin.schema
    order = ["topic", "partition", "offset"]
    python_rows = python.orderBy(order).collect()
    assert python_rows == builtin.orderBy(order).collect()
    assert len(python_rows) == 3 * 28 + 18


def test_deleted_before_the_read_raises_data_loss(spark: Any, kafka_config: dict[str, Any],
                                                  kafka_admin: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=2)
    stored = produce(kafka_config, topic, [(i % 2, None, str(i).encode()) for i in range(20)])
    ranges = full_ranges(kafka_config, topic)
    kafka_admin.delete_records([TopicPartition(topic, 0, 4)])[
        TopicPartition(topic, 0, 4)].result(30)

    with pytest.raises(DataLossError, match=rf"{topic}/0: 4 offset") as caught:
        read_kafka(spark, ranges, kafka_config)
    assert caught.value.lost == {(topic, 0): 4}

    skipped = read_kafka(spark, ranges, kafka_config, on_data_loss="skip")
    assert rows(skipped) == [r for r in stored if not (r[1] == 0 and r[2] < 4)]


def test_deleted_during_the_read_raises_data_loss(spark: Any, kafka_config: dict[str, Any],
                                                  kafka_admin: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    stored = produce(kafka_config, topic, [(0, None, str(i).encode()) for i in range(30)])
    ranges = full_ranges(kafka_config, topic)
    df = read_kafka(spark, ranges, kafka_config)  # checked against the log start here
    skipping = read_kafka(spark, ranges, kafka_config, on_data_loss="skip")
    tp = TopicPartition(topic, 0, 10)
    kafka_admin.delete_records([tp])[tp].result(30)

    with pytest.raises(DataLossError, match=rf"{topic}/0 \[0, 30\)") as caught, kafka_errors():
        df.collect()
    assert caught.value.lost == {(topic, 0): 10}
    assert rows(skipping) == stored[10:]


def test_lost_offsets_counts_skips_at_resolution_before_and_during_the_read(
        spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=2)
    stored = produce(kafka_config, topic, [(i % 2, None, str(i).encode()) for i in range(40)])
    resolved = full_ranges(kafka_config, topic)
    ranges = OffsetRanges(resolved.ranges, lost={(topic, 1): 3})  # as if lost at resolution
    before = TopicPartition(topic, 0, 4)
    kafka_admin.delete_records([before])[before].result(30)
    lost = LostOffsets()
    df = read_kafka(spark, ranges, kafka_config, on_data_loss="skip", lost=lost,
                    max_records_per_split=5)
    assert lost.by_partition() == {(topic, 0): 4, (topic, 1): 3}  # known on the driver
    during = TopicPartition(topic, 1, 12)  # splits [0, 5) [5, 10) [10, 15) of 1 lose 5, 5, 2
    kafka_admin.delete_records([during])[during].result(30)

    assert rows(df) == [r for r in stored if r[2] >= (4 if r[1] == 0 else 12)]
    assert lost.by_partition() == {(topic, 0): 4, (topic, 1): 3 + 12}
    df.count()  # the splits are read again: each still counts once
    assert lost.by_partition() == {(topic, 0): 4, (topic, 1): 3 + 12}
    assert lost.total() == 19


def test_lost_offsets_is_empty_without_data_loss(spark: Any, kafka_config: dict[str, Any],
                                                 new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"x")] * 3)
    lost = LostOffsets()
    df = read_kafka(spark, full_ranges(kafka_config, topic), kafka_config, on_data_loss="skip",
                    lost=lost)
    assert df.count() == 3
    assert (lost.by_partition(), lost.total()) == ({}, 0)


def test_the_readers_summary_is_the_summary_of_the_ranges_they_read_whole(
        spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any) -> None:
    """The splits' counts make the summary once they cover the ranges read, also from a
    start that the deleted offsets moved up; a read that stopped early has none."""
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [(i % 2, None, str(i).encode()) for i in range(40)])
    ranges = full_ranges(kafka_config, topic)
    deleted = TopicPartition(topic, 0, 4)
    kafka_admin.delete_records([deleted])[deleted].result(30)

    whole = ReadSummary()
    df = read_kafka(spark, ranges, kafka_config, on_data_loss="skip", summary=whole,
                    max_records_per_split=3)
    assert whole.partitions() is None  # nothing read yet
    assert df.count() == 36
    summaries = whole.partitions()
    assert summaries == summarize(df)
    assert [(p.partition, p.records, p.first_offset, p.last_offset) for p in summaries] == [
        (0, 16, 4, 19), (1, 20, 0, 19)]

    partial = ReadSummary()
    read_kafka(spark, ranges, kafka_config, on_data_loss="skip", summary=partial,
               max_records_per_split=3).limit(1).collect()
    assert partial.partitions() is None


def test_no_progress_fails_after_poll_timeout(kafka_config: dict[str, Any],
                                              new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"x")] * 3)
    beyond_the_log = PartitionRange(topic, 0, 0, 10)

    started = time.monotonic()
    with pytest.raises(KafkaReadError, match=r"no progress for 2s at offset 3.*readable end"):
        list(read_split(beyond_the_log, kafka_config, poll_timeout=2))
    assert time.monotonic() - started < 10


def test_decode_json_policies(spark: Any, kafka_config: dict[str, Any], new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [
        (0, b"a", b'{"id": 1, "name": "x"}'),
        (0, b"b", b"not json"),
        (0, b"\xff", b'{"id": 3, "name": "z"}'),
        (0, None, None),
    ])
    df = read_kafka(spark, full_ranges(kafka_config, topic), kafka_config)
    schema = "id long, name string"

    with pytest.raises(DecodeError, match="value_format='json' needs value_schema"):
        decode_kafka(df, value_format="json")
    with pytest.raises(DecodeError, match="key_schema is only used with key_format='json'"):
        decode_kafka(df, key_format="string", key_schema=schema)
    with pytest.raises(DecodeError, match="on_corrupt='ignore' is not valid"):
        decode_kafka(df, on_corrupt="ignore")  # type: ignore[arg-type]

    with pytest.raises(Exception, match=rf"corrupt record in {topic}/0 at offset 1: value is not"):
        decode_kafka(df, value_format="json", value_schema=schema).collect()

    observation = Observation("decode")
    skipped = decode_kafka(df, key_format="string", value_format="json", value_schema=schema,
                           on_corrupt="skip", observation=observation).orderBy("offset")
    assert [(r["offset"], r["key"], r["value"]) for r in skipped.collect()] == [
        (0, "a", (1, "x")), (3, None, None)]
    assert observation.get == {"corrupt_records": 2}

    dead = decode_kafka(df, key_format="string", value_format="json", value_schema=schema,
                        on_corrupt="dead_letter").orderBy("offset").collect()
    assert [(r["offset"], r["value"], r["raw_key"], r["raw_value"], r["decode_error"])
            for r in dead] == [
        (0, (1, "x"), None, None, None),
        (1, None, b"b", b"not json",
         "value is not JSON matching the schema id long, name string"),
        (2, None, b"\xff", b'{"id": 3, "name": "z"}', "key is not valid string"),
        (3, None, None, None, None),
    ]


def test_summarize(spark: Any, kafka_config: dict[str, Any], new_topic: Any) -> None:
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [(i % 2, None, b"v") for i in range(10)])
    df = read_kafka(spark, OffsetRanges((PartitionRange(topic, 0, 1, 5),
                                         PartitionRange(topic, 1, 0, 5))), kafka_config)

    assert summarize(df) == [  # bytes: the 1-byte values (no keys)
        PartitionSummary(topic, 0, 4, 1, 4, _ts(BASE_MS + 2), _ts(BASE_MS + 8), bytes=4),
        PartitionSummary(topic, 1, 5, 0, 4, _ts(BASE_MS + 1), _ts(BASE_MS + 9), bytes=5),
    ]
    assert summarize(df)[0].to_dict()["min_timestamp"] == _ts(BASE_MS + 2).isoformat()
    assert [s.bytes for s in summarize(df.select("topic", "partition", "offset", "timestamp"))
            ] == [None, None]
    assert summarize(df.where("offset > 100")) == []



def test_spark_kafka_without_the_jar_says_how_to_add_it(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The session's classpath is fixed at start and has the jar; ask Spark for a source name
    # that is not on it, so Spark itself answers DATA_SOURCE_NOT_FOUND.
    monkeypatch.setattr(sources_module, "SPARK_KAFKA_FORMAT", "kafka-not-on-the-classpath")
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"x")])
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 1),))

    with pytest.raises(SparkKafkaSourceMissingError) as caught:
        read_kafka(spark, ranges, kafka_config, engine="spark-kafka")
    assert str(caught.value) == (
        "engine='spark-kafka' needs Spark's kafka source, which is not on this session's "
        f"classpath. Start the session with spark.jars.packages={spark_kafka_package()} "
        "(spark_session(spark_kafka=True) does that), or add the jar with spark.jars; or use "
        "engine='python', which needs no jar.")
