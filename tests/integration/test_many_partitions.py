"""A slice of a topic of 200 partitions, each range ending in a commit marker: planned into a
few tasks by size (not a task and a file per partition), landed exactly once on S3 and into an
exactly-once ``KafkaSink``, with exact per-partition statistics (issue 54)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import OffsetRanges, Subscription, resolve_offsets
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.sinks import FileSink, KafkaSink, published_files
from airflow_provider_kafka_spark.spark import ingest
from airflow_provider_kafka_spark.spark.read.splits import plan_splits
from tests.support.topics import create_topic
from tools.kafka_records import (
    produce,
    read_committed,
    transactional_producer,
    wait_for_markers,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 200
PLAIN = 5  # records per partition before the transaction
IN_TRANSACTION = 2  # records per partition in the one committed transaction across them all
# Offsets per split: the 200 ranges of 8 offsets (5 + 2 + the marker) make 4 splits.
SPLIT_SIZE = 400


@pytest.fixture(scope="module")
def wide(kafka_config: dict[str, Any], kafka_admin: Any) -> tuple[str, Counter[tuple[int, bytes]]]:
    """A topic of :data:`PARTITIONS` partitions: per partition :data:`PLAIN` records, then one
    committed transaction of :data:`IN_TRANSACTION` records on every partition (so every range
    up to the log's end ends in its marker). (topic, the records as (partition, value))."""
    topic = create_topic(kafka_admin, f"wide-{int(time.time() * 1000)}", PARTITIONS)
    ms = int(time.time() * 1000) - 60_000
    produce(kafka_config, topic, [(p, None, f"{p}-{i}".encode(), ms + i)
                                  for p in range(PARTITIONS) for i in range(PLAIN)])
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        for i in range(IN_TRANSACTION):
            producer.produce(topic, value=f"{p}-t{i}".encode(), partition=p, timestamp=ms)
    producer.commit_transaction(30)
    wait_for_markers(kafka_admin, topic, PARTITIONS)
    records = Counter((p, f"{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(PLAIN))
    records.update((p, f"{p}-t{i}".encode()) for p in range(PARTITIONS)
                   for i in range(IN_TRANSACTION))
    yield topic, records
    kafka_admin.delete_topics([topic])[topic].result(30)


def _ranges(kafka_config: dict[str, Any], topic: str) -> OffsetRanges:
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    assert {(r.start, r.stop) for r in ranges.ranges} == {(0, PLAIN + IN_TRANSACTION + 1)}
    assert len(ranges.ranges) == PARTITIONS
    return ranges


def _values(spark: Any, files: list[str]) -> Counter[tuple[int, bytes]]:
    return Counter((r["partition"], bytes(r["value"]))
                   for r in spark.read.parquet(*files).select("partition", "value").collect())


def test_a_wide_slice_lands_on_s3_in_a_file_per_split_and_a_rerun_rewrites_the_same_keys(
        spark: Any, kafka_config: dict[str, Any], s3_endpoint: Any, s3_bucket: str,
        wide: tuple[str, Counter[tuple[int, bytes]]]) -> None:
    topic, records = wide
    ranges = _ranges(kafka_config, topic)
    path = f"s3a://{s3_bucket}/wide/{topic}"
    settings = S3Settings(endpoint_url=s3_endpoint.url, region=s3_endpoint.region,
                          access_key=s3_endpoint.access_key, secret_key=s3_endpoint.secret_key,
                          path_style=True)
    splits = plan_splits(ranges.ranges, SPLIT_SIZE)
    assert [len(s.ranges) for s in splits] == [50] * 4

    first = ingest(spark, ranges, kafka_config, FileSink(path),
                   max_records_per_split=SPLIT_SIZE)
    files = published_files(path, settings)

    assert sorted(f.rsplit("/", 1)[1] for f in files) == sorted(
        f"part-{s.name()}.snappy.parquet" for s in splits)
    assert _values(spark, files) == records
    assert first.records == sum(records.values())
    assert [(p.partition, p.records, p.first_offset, p.last_offset)
            for p in first.partitions] == [(p, 7, 0, 6) for p in range(PARTITIONS)]

    again = ingest(spark, ranges, kafka_config, FileSink(path),
                   max_records_per_split=SPLIT_SIZE)  # a retry of the same pinned slice

    assert published_files(path, settings) == files
    assert _values(spark, [path]) == records  # nothing else in the folder
    assert again.records == first.records


def test_a_wide_slice_into_an_exactly_once_kafka_sink_writes_every_record_once(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        wide: tuple[str, Counter[tuple[int, bytes]]]) -> None:
    topic, records = wide
    ranges = _ranges(kafka_config, topic)
    out = new_topic(partitions=6)
    sink = KafkaSink(out, kafka_config=kafka_config, delivery_guarantee="exactly_once",
                     transactional_id_prefix=f"wide-{out}", write_id=f"wide-{out}")

    result = ingest(spark, ranges, kafka_config, sink, max_records_per_split=SPLIT_SIZE)
    again = ingest(spark, ranges, kafka_config, sink, max_records_per_split=SPLIT_SIZE)

    total = sum(records.values())
    assert (result.records, result.output["records_written"]) == (total, total)
    assert result.output["skipped_tasks"] == []
    # the re-run of the same write finds each split's transaction in the ledger
    assert (again.output["records_written"], again.output["skipped_tasks"]) == (0, [0, 1, 2, 3])
    read_back = Counter(m.value() for m in read_committed(kafka_config, out, total))
    assert read_back == Counter(value for _, value in records.elements())
