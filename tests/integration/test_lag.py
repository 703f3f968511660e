"""Lag at resolution: each partition's end under the isolation level (last stable offset or high
watermark) minus the range's stop, exact against the real broker with an open transaction."""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import OffsetRanges, Subscription, resolve_offsets
from tools.kafka_records import produce, transactional_producer

pytestmark = pytest.mark.integration


def test_lag_is_the_end_under_the_isolation_level_minus_the_stop(
        kafka_config: dict[str, Any], new_topic: Any) -> None:
    topic = new_topic(partitions=2)
    now = int(time.time() * 1000)
    produce(kafka_config, topic, [(p, None, b"v", now) for p in (0, 1) for _ in range(5)])
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()  # offsets 5 and 6 of partition 0 stay uncommitted
    produce(kafka_config, topic, [(0, None, b"open", now), (0, None, b"open", now)], producer)
    producer.flush(30)
    try:
        stops = {topic: {"0": 3, "1": 5}}
        committed = resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", stops)
        assert committed.lag == {(topic, 0): 5 - 3, (topic, 1): 0}  # LSO 5
        assert committed.total_lag() == 2
        uncommitted = resolve_offsets(kafka_config, Subscription.topics(topic), "earliest",
                                      stops, isolation_level="read_uncommitted")
        assert uncommitted.lag == {(topic, 0): 7 - 3, (topic, 1): 0}  # high watermark 7
        latest = resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest")
        assert latest.lag == {(topic, 0): 0, (topic, 1): 0}
    finally:
        producer.abort_transaction(30)

    again = OffsetRanges.from_json(committed.to_json())
    assert again.lag == committed.lag
    document = committed.to_dict()
    assert document["lag"] == [{"topic": topic, "partition": 0, "offsets": 2},
                               {"topic": topic, "partition": 1, "offsets": 0}]
    del document["lag"]  # ranges pinned or pushed to XCom before lag was recorded
    assert OffsetRanges.from_json(document).lag == {}
