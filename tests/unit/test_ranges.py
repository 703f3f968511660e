import json
from datetime import UTC, datetime

import pytest

from airflow_provider_kafka_spark.offsets import (
    OffsetRanges,
    OffsetResolutionError,
    OffsetSpecError,
    PartitionRange,
    Subscription,
)


def sample() -> OffsetRanges:
    return OffsetRanges(
        (PartitionRange("b", 0, 5, 5), PartitionRange("a", 1, 10, 20), PartitionRange("a", 0, 0, 3)),
        starting="timestamp:2024-05-01T00:00:00.000Z",
        stopping="latest",
        isolation_level="read_uncommitted",
        group_id="g",
        resolved_at=datetime(2024, 5, 1, 3, tzinfo=UTC),
        lost={("a", 0): 7},
    )


def test_ranges_sorted_and_iterable():
    ranges = sample()
    assert [(r.topic, r.partition) for r in ranges] == [("a", 0), ("a", 1), ("b", 0)]
    assert len(ranges) == 3
    assert ranges.total() == 13
    assert not ranges.is_empty()
    assert OffsetRanges((PartitionRange("a", 0, 4, 4),)).is_empty()


def test_json_round_trip_exact():
    ranges = sample()
    text = ranges.to_json()
    assert json.loads(text)["version"] == 1
    assert OffsetRanges.from_json(text) == ranges
    assert OffsetRanges.from_json(ranges.to_dict()) == ranges
    assert OffsetRanges.from_json(text).lost == {("a", 0): 7}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=2), "version 2"),
        (lambda d: d.pop("version"), "version None"),
        (lambda d: d["ranges"][0].update(start=-1), "start=-1"),
        (lambda d: d["ranges"][0].update(start=9, stop=3), "start 9 is after stop 3"),
        (lambda d: d["ranges"][0].update(partition="0"), "partition='0'"),
        (lambda d: d["ranges"][0].pop("stop"), r"has no field\(s\) \['stop'\]"),
        (lambda d: d.update(ranges={"a": 1}), "must be a list"),
        (lambda d: d.update(isolation_level="dirty"), "isolation_level"),
        (lambda d: d["ranges"].append(dict(d["ranges"][0])), "more than once"),
    ],
)
def test_from_json_validates(mutate, message):
    data = sample().to_dict()
    mutate(data)
    with pytest.raises(OffsetSpecError, match=message):
        OffsetRanges.from_json(json.dumps(data))


def test_from_json_rejects_non_objects():
    with pytest.raises(OffsetSpecError, match="not valid JSON"):
        OffsetRanges.from_json("{")
    with pytest.raises(OffsetSpecError, match="JSON object"):
        OffsetRanges.from_json("[]")


def test_subscription_select():
    counts = {"orders": 2, "orders-eu": 1, "__consumer_offsets": 50, "other": 1}
    assert Subscription.topics(["orders"]).select(counts) == [("orders", 0), ("orders", 1)]
    assert Subscription.pattern("orders.*").select(counts) == [
        ("orders", 0), ("orders", 1), ("orders-eu", 0)]
    with pytest.raises(OffsetResolutionError, match="matches no topic"):
        Subscription.pattern(".*offsets").select(counts)
    with pytest.raises(OffsetResolutionError, match="unknown topic"):
        Subscription.topics(["nope", "orders"]).select(counts)
    assert Subscription.partitions([("orders", 1)]).select(counts) == [("orders", 1)]
    with pytest.raises(OffsetResolutionError, match="unknown partition"):
        Subscription.partitions([("orders", 2)]).select(counts)


@pytest.mark.parametrize(
    "build",
    [lambda: Subscription.topics([]), lambda: Subscription.pattern("(unclosed"),
     lambda: Subscription.partitions([("t", -1)]), lambda: Subscription.partitions([]),
     lambda: Subscription.partitions(["t"])],
)
def test_subscription_rejects_bad_input(build):
    with pytest.raises(OffsetSpecError):
        build()
