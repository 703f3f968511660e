from datetime import UTC, datetime, timedelta, timezone

import pendulum
import pytest

from airflow_provider_kafka_spark.offsets import (
    Committed,
    Earliest,
    FromTable,
    Latest,
    OffsetResolutionError,
    OffsetSpecError,
    SpecificOffsets,
    Timestamp,
    parse_offset_spec,
)
from airflow_provider_kafka_spark.offsets.specs import LookupContext


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("earliest", Earliest()),
        ("LATEST", Latest()),
        (" committed ", Committed()),
        ("committed:earliest", Committed("earliest")),
        ("committed:latest", Committed("latest")),
        ("timestamp:0", Timestamp(0)),
        ("timestamp:1700000000123", Timestamp(1_700_000_000_123)),
        ("timestamp:2024-05-01T00:00:00Z", Timestamp(1_714_521_600_000)),
        ("timestamp:2024-05-01T02:00:00+02:00", Timestamp(1_714_521_600_000)),
        # What Airflow renders for {{ data_interval_start }}.
        ("timestamp:2024-05-01 00:00:00+00:00", Timestamp(1_714_521_600_000)),
        ("timestamp:2024-05-01T00:00:00.250Z", Timestamp(1_714_521_600_250)),
    ],
)
def test_parse_strings(text, expected):
    assert parse_offset_spec(text) == expected


def test_parse_datetimes():
    aware = datetime(2024, 5, 1, 1, 0, tzinfo=timezone(timedelta(hours=1)))
    assert parse_offset_spec(aware) == Timestamp(1_714_521_600_000)
    assert parse_offset_spec(pendulum.datetime(2024, 5, 1, tz="UTC")) == Timestamp(1_714_521_600_000)
    with pytest.raises(OffsetSpecError, match="no time zone"):
        parse_offset_spec(datetime(2024, 5, 1))


@pytest.mark.parametrize(
    "bad",
    ["", "earliest-ish", "committed:oldest", "timestamp:2024-05-01T00:00:00", "timestamp:soon",
     "timestamp:-5", "{not json", "[1, 2]", 42, None, {"t": 5}, {"t": {"x": 1}},
     {"t": {"0": -1}}, {"t": {"0": 1.5}}],
)
def test_parse_rejects_bad_specs_clearly(bad):
    with pytest.raises(OffsetSpecError) as info:
        parse_offset_spec(bad)
    assert str(info.value)


def test_explicit_offsets_from_json_and_mapping_agree():
    from_json = parse_offset_spec('{"orders": {"0": 23, "1": 31}}')
    from_map = parse_offset_spec({"orders": {0: 23, "1": 31}})
    assert from_json == from_map == SpecificOffsets({("orders", 0): 23, ("orders", 1): 31})
    assert from_json.default is None


def test_explicit_offsets_default():
    spec = parse_offset_spec('{"orders": {"0": 23}, "*": "committed:earliest"}')
    assert isinstance(spec, SpecificOffsets)
    assert spec.default == Committed("earliest")
    assert SpecificOffsets({("orders", 0): 23}, default="committed:earliest") == spec
    with pytest.raises(OffsetSpecError, match="cannot itself be explicit"):
        SpecificOffsets({("a", 0): 1}, default={"b": {"0": 2}})


@pytest.mark.parametrize(
    "spec",
    [Earliest(), Latest(), Committed(), Committed("latest"), Timestamp(1_714_521_600_123),
     SpecificOffsets({("a", 0): 1, ("b", 2): 0}), SpecificOffsets({("a", 1): 5}, default=Latest())],
)
def test_str_round_trips(spec):
    assert parse_offset_spec(str(spec)) == spec


def test_timestamp_str_is_readable_utc():
    assert str(Timestamp(1_714_521_600_000)) == "timestamp:2024-05-01T00:00:00.000Z"
    assert Timestamp(1_714_521_600_000).datetime == datetime(2024, 5, 1, tzinfo=UTC)


class FakeCluster:
    """The cluster's answers for two partitions: log start, end, and first offsets at or after
    timestamp 100 (-1: none)."""

    isolation_level = "read_committed"
    ANSWERS = {"earliest": {("t", 0): 2, ("t", 1): 0}, "latest": {("t", 0): 9, ("t", 1): 5},
               100: {("t", 0): 4, ("t", 1): -1}}

    def __init__(self) -> None:
        self.asked: list[str | int] = []

    def offsets(self, kind, isolation_level=None):
        self.asked.append(kind)
        return dict(self.ANSWERS[kind])


PARTITIONS = [("t", 0), ("t", 1)]


@pytest.mark.parametrize(
    ("spec", "context", "expected"),
    [
        (Earliest(), {}, {("t", 0): 2, ("t", 1): 0}),
        (Latest(), {}, {("t", 0): 9, ("t", 1): 5}),
        (Timestamp(100), {}, {("t", 0): 4, ("t", 1): 5}),  # none at or after T: latest
        (Committed(), {"committed": {("t", 0): 3, ("t", 1): 1}}, {("t", 0): 3, ("t", 1): 1}),
        (Committed("latest"), {"committed": {("t", 0): 3}}, {("t", 0): 3, ("t", 1): 5}),
        (FromTable("earliest"), {"table_offsets": {("t", 1): 4}}, {("t", 0): 2, ("t", 1): 4}),
        (SpecificOffsets({("t", 0): 7}, default="earliest"), {}, {("t", 0): 7, ("t", 1): 0}),
        (SpecificOffsets({("t", 0): 7, ("t", 1): 5}), {}, {("t", 0): 7, ("t", 1): 5}),
    ],
    ids=str,
)
def test_each_spec_looks_up_its_own_offsets(spec, context, expected):
    assert spec.lookup(LookupContext(FakeCluster(), **context), PARTITIONS) == expected


def test_what_a_spec_reads_besides_the_cluster():
    assert [spec.reads() for spec in (Earliest(), Latest(), Timestamp(1), Committed(),
                                      FromTable(), SpecificOffsets({}, default="committed"),
                                      SpecificOffsets({}, default="table"),
                                      SpecificOffsets({("t", 0): 1}))] == [
        None, None, None, "group", "table", "group", "table", None]


@pytest.mark.parametrize(
    ("spec", "context", "error"),
    [
        (Committed(), {"committed": {("t", 0): 3}},
         r"^stopping spec 'committed': the group has no committed offset for 1 partition\(s\): "
         r"t/1\. Use 'committed:earliest'"),
        (FromTable(), {}, r"the table records no stop of the application for 2 partition"),
        (SpecificOffsets({("t", 0): 1}), {}, r"^stopping offsets do not list 1 subscribed"),
        (SpecificOffsets({("u", 0): 1}, default="latest"), {},
         r"^stopping offsets name partitions that are not subscribed"),
        (SpecificOffsets({("t", 0): 10}, default="latest"), {},
         r"^stopping offsets are beyond the end of the log \(read_committed\): t/0: 10 > "
         r"latest 9"),
    ],
    ids=str,
)
def test_a_spec_without_an_offset_for_a_partition_names_it(spec, context, error):
    with pytest.raises(OffsetResolutionError, match=error):
        spec.lookup(LookupContext(FakeCluster(), **context), PARTITIONS, "stopping")


def test_a_spec_asks_only_what_it_needs():
    cluster = FakeCluster()
    Committed("latest").lookup(LookupContext(cluster, {("t", 0): 1, ("t", 1): 2}), PARTITIONS)
    assert cluster.asked == []  # every partition committed: the reset is not looked up
