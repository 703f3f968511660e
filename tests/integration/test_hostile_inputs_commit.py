"""commit_offsets checks every partition before it commits any: ranges with one bad partition
(no such topic or partition, a stop beyond the end of the log under the ranges' isolation
level) leave the group's offsets exactly as they were, and the error names every bad
partition and what to do."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.offsets import (
    CommitError,
    ConfigurationError,
    KafkaSparkError,
    OffsetRanges,
    PartitionRange,
    commit_offsets,
)
from tools.kafka_records import OPEN_FOR_LONG_MS, produce, transactional_producer

pytestmark = pytest.mark.integration

NOW = int(time.time() * 1000)
AGAIN = "resolve the offsets again"


def committed(admin: AdminClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets on ``topic`` (partitions without one are absent)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                                   for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


@pytest.fixture
def topic(kafka_config: dict[str, Any], new_topic: Any) -> str:
    """Two partitions of five records each: offsets 0..4, end of the log 5."""
    name = new_topic(partitions=2)
    produce(kafka_config, name, [(p, None, b"v", NOW) for p in (0, 1) for _ in range(5)])
    return name


@pytest.fixture
def group(kafka_config: dict[str, Any], topic: str, kafka_admin: AdminClient) -> str:
    """A group committed at offset 1 on both partitions."""
    name = f"g-{uuid.uuid4().hex[:8]}"
    commit_offsets(kafka_config, name, OffsetRanges((PartitionRange(topic, 0, 0, 1),
                                                     PartitionRange(topic, 1, 0, 1))))
    assert committed(kafka_admin, name, topic, 2) == {0: 1, 1: 1}
    return name


def assert_commit_error(call: Any, *fragments: str) -> str:
    with pytest.raises(KafkaSparkError) as caught:
        call()
    assert type(caught.value) is CommitError, repr(caught.value)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_an_unknown_partition_commits_nothing(kafka_config: dict[str, Any], kafka_admin: Any,
                                             topic: str, group: str) -> None:
    ranges = OffsetRanges((PartitionRange(topic, 0, 1, 3), PartitionRange(topic, 2, 0, 1)))
    assert_commit_error(lambda: commit_offsets(kafka_config, group, ranges),
                        "nothing was committed", f"{topic}/2: no such partition", AGAIN)
    assert committed(kafka_admin, group, topic, 2) == {0: 1, 1: 1}


def test_an_unknown_topic_commits_nothing(kafka_config: dict[str, Any], kafka_admin: Any,
                                         topic: str, group: str) -> None:
    gone = f"gone-{uuid.uuid4().hex[:8]}"
    ranges = OffsetRanges((PartitionRange(topic, 0, 1, 3), PartitionRange(gone, 0, 0, 1)))
    assert_commit_error(lambda: commit_offsets(kafka_config, group, ranges),
                        f"{gone}/0: no such topic", AGAIN)
    assert committed(kafka_admin, group, topic, 2) == {0: 1, 1: 1}


def test_a_stop_beyond_the_end_of_the_log_commits_nothing(
        kafka_config: dict[str, Any], kafka_admin: Any, topic: str, group: str) -> None:
    ranges = OffsetRanges((PartitionRange(topic, 0, 1, 3), PartitionRange(topic, 1, 1, 99)))
    assert_commit_error(lambda: commit_offsets(kafka_config, group, ranges),
                        f"{topic}/1: stop 99 is beyond the end of the log (5, read_committed)")
    assert committed(kafka_admin, group, topic, 2) == {0: 1, 1: 1}


def test_every_bad_partition_is_named_and_a_fresh_group_stays_empty(
        kafka_config: dict[str, Any], kafka_admin: Any, topic: str) -> None:
    fresh = f"g-{uuid.uuid4().hex[:8]}"
    gone = f"gone-{uuid.uuid4().hex[:8]}"
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 3), PartitionRange(topic, 1, 0, 6),
                           PartitionRange(topic, 7, 0, 1), PartitionRange(gone, 3, 0, 1)))
    message = assert_commit_error(lambda: commit_offsets(kafka_config, fresh, ranges),
                                  "3 partition(s)")
    for fragment in (f"{topic}/1: stop 6", f"{topic}/7: no such partition (the topic has "
                     "partitions 0..1)", f"{gone}/3: no such topic"):
        assert fragment in message, message
    assert f"{topic}/0" not in message
    assert committed(kafka_admin, fresh, topic, 2) == {}


def test_a_partition_already_past_its_stop_is_still_a_no_op(
        kafka_config: dict[str, Any], kafka_admin: Any, topic: str, group: str) -> None:
    commit_offsets(kafka_config, group, OffsetRanges((PartitionRange(topic, 1, 1, 4),)))
    # p1 is at 4, past this stop of 2: left and reported; a bad partition still stops it all.
    ranges = OffsetRanges((PartitionRange(topic, 0, 1, 3), PartitionRange(topic, 1, 1, 2)))
    bad = OffsetRanges((*ranges, PartitionRange(topic, 5, 0, 1)))
    assert_commit_error(lambda: commit_offsets(kafka_config, group, bad), f"{topic}/5")
    assert committed(kafka_admin, group, topic, 2) == {0: 1, 1: 4}

    result = commit_offsets(kafka_config, group, ranges)
    assert (result.committed, result.unchanged) == ({(topic, 0): 3}, {(topic, 1): 4})
    assert committed(kafka_admin, group, topic, 2) == {0: 3, 1: 4}


@pytest.fixture
def open_transaction(kafka_config: dict[str, Any], new_topic: Any) -> Iterator[str]:
    """One partition: 3 plain records, then 2 of a transaction left open (LSO 3, HW 5)."""
    name = new_topic(partitions=1)
    produce(kafka_config, name, [(0, None, b"v", NOW)] * 3)
    hanging = transactional_producer(kafka_config, OPEN_FOR_LONG_MS)
    hanging.begin_transaction()
    produce(kafka_config, name, [(0, None, b"open", NOW)] * 2, hanging)
    assert hanging.flush(30) == 0
    yield name
    hanging.abort_transaction(30)


def test_the_end_of_the_log_follows_the_ranges_isolation_level(
        kafka_config: dict[str, Any], kafka_admin: Any, open_transaction: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    ranges = OffsetRanges((PartitionRange(open_transaction, 0, 0, 5),))
    assert_commit_error(lambda: commit_offsets(kafka_config, group, ranges),
                        f"{open_transaction}/0: stop 5 is beyond the end of the log "
                        "(3, read_committed)")
    assert committed(kafka_admin, group, open_transaction, 1) == {}

    uncommitted = OffsetRanges(tuple(ranges), isolation_level="read_uncommitted")
    assert commit_offsets(kafka_config, group, uncommitted).committed == {
        (open_transaction, 0): 5}
    assert committed(kafka_admin, group, open_transaction, 1) == {0: 5}


@pytest.mark.parametrize("allow_rewind", ["yes", 1, None])
def test_allow_rewind_must_be_a_bool(kafka_config: dict[str, Any], kafka_admin: Any,
                                     topic: str, group: str, allow_rewind: object) -> None:
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 0),))
    with pytest.raises(ConfigurationError, match="allow_rewind=.* pass True or False"):
        commit_offsets(kafka_config, group, ranges, allow_rewind=allow_rewind)  # type: ignore[arg-type]
    assert committed(kafka_admin, group, topic, 2) == {0: 1, 1: 1}
