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


def test_named_topics_missing_are_listed_and_the_wait_for_them_is_said() -> None:
    # What subscribed_partitions looks up again (a pattern names no topic) and how its
    # error says so.
    assert Subscription.topics(["orders", "b", "a"]).missing_topics(CLUSTER) == ["a", "b"]
    assert Subscription.partitions([("orders", 5), ("b", 0), ("b", 1)]).missing_topics(
        CLUSTER) == ["b"]
    assert Subscription.pattern("nothing.*").missing_topics(CLUSTER) == []
    with pytest.raises(OffsetResolutionError) as caught:
        Subscription.topics(["orders", "b"]).select(CLUSTER, waited_s=4.99999)
    assert str(caught.value) == (
        "unknown topic(s) ['b']: they do not exist on the cluster (looked up again for 5s: a "
        "topic created a moment ago shows within that). Create them or fix the names (topic "
        "auto-creation is not used for reads).")
    with pytest.raises(OffsetResolutionError) as caught:
        Subscription.partitions([("orders", 2), ("b", 0)]).select(CLUSTER, waited_s=0.74)
    assert str(caught.value) == (
        "unknown partition(s) [('b', 0), ('orders', 2)]: not on the cluster (b: no such topic; "
        "orders: partitions 0..1) (looked up again for 0.7s: a topic created a moment ago shows "
        "within that). Fix the partition numbers or topic names, or add partitions to the topic "
        "first.")
    # Only missing partitions of existing topics: no topic was waited for.
    with pytest.raises(OffsetResolutionError) as caught:
        Subscription.partitions([("orders", 2)]).select(CLUSTER, waited_s=5)
    assert "looked up again" not in str(caught.value)
