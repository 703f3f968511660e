"""Subscription.select without a broker: which topics a pattern may match."""

from __future__ import annotations

import pytest

from airflow_provider_kafka_spark.offsets import OffsetResolutionError, Subscription
from airflow_provider_kafka_spark.offsets.subscription import INTERNAL_TOPIC_PREFIX

CLUSTER = {"orders": 2, "_orders_raw": 1, "__consumer_offsets": 50, "_kafka_spark_ledger": 4,
           "_kafka_spark_pins": 8, "my_kafka_spark_ledger": 1}


def test_patterns_never_match_kafka_or_package_internal_topics() -> None:
    assert INTERNAL_TOPIC_PREFIX == "_kafka_spark_"
    assert Subscription.pattern(".*").select(CLUSTER) == [
        ("_orders_raw", 0), ("my_kafka_spark_ledger", 0), ("orders", 0), ("orders", 1)]
    assert Subscription.pattern(".*ledger.*").select(CLUSTER) == [("my_kafka_spark_ledger", 0)]


def test_a_pattern_matching_only_internal_topics_says_what_is_excluded() -> None:
    with pytest.raises(OffsetResolutionError) as caught:
        Subscription.pattern("_kafka_spark_.*").select(CLUSTER)
    assert str(caught.value) == (
        "topic_pattern '_kafka_spark_.*' matches no topic on the cluster. Patterns never match "
        "internal topics: names starting with '__' (Kafka's own) or '_kafka_spark_' (this "
        "package's ledger and run pins). Fix the pattern (it must match whole names), or name "
        "an internal topic with Subscription.topics(..., allow_internal=True) to read it.")


def test_named_internal_topics_can_still_be_read() -> None:
    assert Subscription.topics("_kafka_spark_ledger", allow_internal=True).select(CLUSTER) == [
        ("_kafka_spark_ledger", p) for p in range(4)]
