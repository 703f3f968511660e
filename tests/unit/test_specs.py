from datetime import UTC, datetime, timedelta, timezone

import pendulum
import pytest

from airflow_provider_kafka_spark.offsets import (
    Committed,
    Earliest,
    Latest,
    OffsetSpecError,
    SpecificOffsets,
    Timestamp,
    parse_offset_spec,
)


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
