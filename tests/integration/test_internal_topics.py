"""offsets/internal_topics.py against the real broker: compacted topics, partitions, reads."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_provider_kafka_spark.offsets.internal_topics import (
    InternalRecord,
    InternalTopicError,
    PartitionRead,
    end_offset,
    ensure_compacted_topic,
    log_start_offset,
    partition_for,
    read_partition,
)

pytestmark = [pytest.mark.integration]


def test_ensure_compacted_topic_creates_once_and_keeps_an_existing_topics_partitions(
    kafka_config: dict[str, Any], kafka_admin: Any
) -> None:
    topic = f"_kafka_spark_test_{uuid.uuid4().hex[:8]}"
    try:
        assert ensure_compacted_topic(kafka_admin, topic, partitions=3) == 3
        assert ensure_compacted_topic(kafka_admin, topic, partitions=8) == 3
        assert log_start_offset(kafka_admin, topic, 2) == 0
        assert end_offset(kafka_admin, topic, 2, committed=True) == 0
    finally:
        kafka_admin.delete_topics([topic])[topic].result(timeout=30)


def test_ensure_compacted_topic_rejects_a_topic_that_is_not_compacted(
    kafka_admin: Any, new_topic: Any
) -> None:
    topic = new_topic(partitions=1)  # cleanup.policy=delete

    with pytest.raises(InternalTopicError,
                       match=rf"{topic!r} has cleanup.policy='delete'; it needs 'compact'"):
        ensure_compacted_topic(kafka_admin, topic, partitions=1)


def test_partition_for_is_crc32_of_the_utf8_key() -> None:
    assert partition_for("abc", 8) == 891568578 % 8 == 2
    assert partition_for("pin/ü", 5) == 0


STAMP = 1_790_000_000_000  # every record's timestamp, which a read returns with it


def test_read_partition_returns_kept_keys_with_offsets_and_tombstones_up_to_the_end(
    kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any
) -> None:
    topic = new_topic(partitions=2)  # not compacted: a compacted topic refuses keyless records
    producer = Producer(kafka_config)
    failures: list[Any] = []
    for key, value in [(b"a", b"1"), (b"b", b"2"), (None, b"keyless"), (b"a", None),
                       (b"a", b"3")]:
        producer.produce(topic, value, key, 1, timestamp=STAMP,
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
    assert producer.flush(30) == 0 and failures == []
    transactional = Producer({**kafka_config, "transactional.id": f"t-{uuid.uuid4().hex}"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, b"aborted", b"a", 1)
    transactional.flush(30)
    transactional.abort_transaction(30)

    everything = read_partition(kafka_config, topic, 1)
    only_a = read_partition(kafka_config, topic, 1, keep=lambda key: key == b"a")
    tail = read_partition(kafka_config, topic, 1, start_offset=2, until_offset=4)
    nothing = read_partition(kafka_config, topic, 1, start_offset=3, until_offset=3)

    high = end_offset(kafka_admin, topic, 1, committed=False)
    assert high == 7  # five records, the aborted one, its abort marker
    assert everything == PartitionRead((InternalRecord(b"a", b"1", 0, STAMP),
                                        InternalRecord(b"b", b"2", 1, STAMP),
                                        InternalRecord(b"a", None, 3, STAMP),
                                        InternalRecord(b"a", b"3", 4, STAMP)), 7, scanned=5)
    assert only_a.records == (InternalRecord(b"a", b"1", 0, STAMP), InternalRecord(b"a", None, 3, STAMP),
                              InternalRecord(b"a", b"3", 4, STAMP))
    assert tail == PartitionRead((InternalRecord(b"a", None, 3, STAMP),), 4, scanned=2)
    assert nothing == PartitionRead((), 3)
    assert read_partition(kafka_config, topic, 0) == PartitionRead((), 0)
