"""Hostile inputs to the offset core, without a broker: each is this package's error, of the
exact class, and its message says what to do. No raw exception (TypeError, KeyError,
RecursionError, UnicodeDecodeError, OverflowError, a ValueError not of ours...) escapes:
``pytest.raises(KafkaSparkError)`` lets any of them fail the test."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from airflow_provider_kafka_spark.errors import UnknownTopicError
from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    KafkaSparkError,
    OffsetRanges,
    OffsetSpecError,
    PartitionRange,
    SpecificOffsets,
    Subscription,
    Timestamp,
    admin_client,
    commit_offsets,
    list_partitions,
    parse_offset_spec,
    resolve_offsets,
    timestamp_stops,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig, consumer_config, new_client
from airflow_provider_kafka_spark.offsets.specs import shown


def assert_error(call: Callable[[], object], cls: type[KafkaSparkError], fragment: str) -> str:
    """``call()`` raises exactly ``cls`` whose message contains ``fragment``; the message."""
    with pytest.raises(KafkaSparkError) as caught:
        call()
    assert type(caught.value) is cls, repr(caught.value)
    message = str(caught.value)
    assert fragment in message, message
    assert len(message) < 2000, "a hostile value must not be echoed whole"
    return message


# --- Class 5: parse_offset_spec never leaks RecursionError, OverflowError, ValueError... ---

DEEP = 100_000
EPOCH_HELP = "epoch milliseconds from 0 to 253402300799999"
SPEC_CASES: list[tuple[Any, str]] = [
    ('{"t": ' + "[" * DEEP, "nested too deeply"),
    ('{"t": ' + '{"a": ' * DEEP, "nested too deeply"),
    ("{" + "[" * DEEP, "not valid JSON"),
    ('{"t": {"0": ' + "9" * 5000 + "}}", "at most 9223372036854775807"),
    ("timestamp:" + "9" * 5000, EPOCH_HELP),
    ("timestamp:99999999999999999999999", EPOCH_HELP),
    ("timestamp:9223372036854775808", EPOCH_HELP),
    ("timestamp:253402300800000", EPOCH_HELP),
    ("timestamp:9999-12-31T23:59:59-01:00", "at the latest 9999-12-31T23:59:59.999Z"),
    ("timestamp:0001-01-01T00:00:00+01:00", "at the earliest 1970-01-01T00:00:00Z"),
    ("timestamp:\u0661\u0662\u0663", "ASCII digits"),
    ("timestamp:\u00b2", "ASCII digits"),
    ("timestamp:+123", "ASCII digits"),
    ('{"t": {"\u0661": 5}}', "ASCII digits"),
    ('{"t": {" 1 ": 5}}', "ASCII digits"),
    ('{"t": {"1_000": 5}}', "ASCII digits"),
    ('{"t": {"-0": 5}}', "ASCII digits"),
    ({"t": {"0": "\u0661"}}, "an int from 0 to 9223372036854775807"),
    ('{"t": {"0": 99999999999999999999999}}', "an int from 0 to 9223372036854775807"),
    ({"t": {0: 2**63}}, "an int from 0 to 9223372036854775807"),
    ('{"t": {"99999999999999999999": 1}}', "an int from 0 to 2147483647"),
    ({"t": {2**31: 1}}, "an int from 0 to 2147483647"),
    ({"t": {True: 1}}, "an int from 0 to 2147483647"),
    ('{"t": {"0": 1e400}}', "an int from 0 to 9223372036854775807"),
    ('{"t": {"0": NaN}}', "an int from 0 to 9223372036854775807"),
    ('{"t": {"0": 5}, "t": {"1": 3}}', "more than once"),
    ('{"t": {"0": 5, "0": 6}}', "more than once"),
    ('{"": {"0": 1}}', "topic names are 1 to 249 of"),
    ('{"a b": {"0": 1}}', "topic names are 1 to 249 of"),
    ({"t": {"0": 1}, "*": {"*": {"*": "earliest"}}}, "cannot itself be explicit"),
    ('{"t": {"0": 1}, "*": "{\\"u\\": {\\"0\\": 2}}"}', "cannot itself be explicit"),
    (b"\xff\xfe earliest", "decode"),
    (b"earliest", "decode"),
    (datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),
     "at the latest 9999-12-31T23:59:59.999Z"),
    (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
     "at the earliest 1970-01-01T00:00:00Z"),
]


@pytest.mark.parametrize(("value", "fragment"), SPEC_CASES,
                         ids=[f"spec{i}" for i in range(len(SPEC_CASES))])
def test_hostile_offset_specs_are_offset_spec_errors(value: Any, fragment: str) -> None:
    assert_error(lambda: parse_offset_spec(value), OffsetSpecError, fragment)


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: Timestamp(2**70), EPOCH_HELP),
        (lambda: Timestamp(-1), EPOCH_HELP),
        (lambda: Timestamp("5"), EPOCH_HELP),
        (lambda: SpecificOffsets({("t", 2**40): 1}), "an int from 0 to 2147483647"),
        (lambda: SpecificOffsets({("t", 0): 2**64}), "an int from 0 to 9223372036854775807"),
        (lambda: SpecificOffsets({("", 0): 1}), "topic names are 1 to 249 of"),
        (lambda: SpecificOffsets(5), "a mapping of (topic, partition) to offset"),
    ],
)
def test_hostile_spec_objects_are_offset_spec_errors(build: Callable[[], object],
                                                     fragment: str) -> None:
    assert_error(build, OffsetSpecError, fragment)


def test_the_largest_timestamp_still_round_trips() -> None:
    spec = parse_offset_spec("timestamp:9999-12-31T23:59:59.999Z")
    assert spec == Timestamp(253_402_300_799_999)
    assert parse_offset_spec(str(spec)) == spec


# --- Classes 4 and 5: OffsetRanges.from_json ---

def sample() -> dict[str, Any]:
    return OffsetRanges((PartitionRange("a", 0, 0, 3),), lost={("a", 0): 2},
                        truncated={("a", 0): 3},
                        resolved_at=datetime(2024, 5, 1, tzinfo=UTC)).to_dict()


def changed(**fields: Any) -> dict[str, Any]:
    data = sample()
    data.update(fields)
    return data


def lost(**item: Any) -> dict[str, Any]:
    return changed(lost=[{"topic": "a", "partition": 0, "offsets": 2, **item}])


def truncated(**item: Any) -> dict[str, Any]:
    return changed(truncated=[{"topic": "a", "partition": 0, "open_transaction_offset": 3,
                               **item}])


AGAIN = "Resolve the offsets again"
RANGES_CASES: list[tuple[Any, str]] = [
    (changed(version=True), "version True"),
    (changed(version=1.0), "version 1.0"),
    (changed(version="1"), "version '1'"),
    (lost(offsets=-3), "a count from 0 to 9223372036854775807"),
    (lost(offsets=True), "a count from 0 to 9223372036854775807"),
    (lost(offsets="3"), "a count from 0 to 9223372036854775807"),
    (lost(offsets=2.5), "a count from 0 to 9223372036854775807"),
    (lost(partition=-1), "an int from 0 to 2147483647"),
    (lost(topic=["a"]), "topic names are 1 to 249 of"),
    (changed(lost=[5]), "must be an object with the fields"),
    (changed(lost=[{"topic": "a", "partition": 0}]), "'offsets'"),
    (changed(lost=[{"topic": "a", "partition": 0, "offsets": 1}] * 2), "more than once"),
    (changed(lost={"a": 1}), "must be a list"),
    (truncated(open_transaction_offset=-3), "an int from 0 to 9223372036854775807"),
    (truncated(open_transaction_offset=3.5), "an int from 0 to 9223372036854775807"),
    (truncated(open_transaction_offset=False), "an int from 0 to 9223372036854775807"),
    (truncated(open_transaction_offset=2**63), "an int from 0 to 9223372036854775807"),
    (truncated(partition="0"), "an int from 0 to 2147483647"),
    (changed(truncated=[None]), "must be an object with the fields"),
    (changed(truncated=[{"topic": "a", "partition": 0}]), "'open_transaction_offset'"),
    (changed(ranges=[5]), "must be an object with the fields"),
    (changed(ranges=[[1, 2]]), "must be an object with the fields"),
    (changed(ranges=[{"topic": "a", "partition": 0, "start": 0, "stop": 2**70}]),
     "an int from 0 to 9223372036854775807"),
    (changed(ranges=[{"topic": "a", "partition": 2**40, "start": 0, "stop": 2}]),
     "an int from 0 to 2147483647"),
    (changed(resolved_at="9999-12-31T23:59:59-05:00"), "resolved_at"),
    (changed(resolved_at=5), "resolved_at"),
    (changed(resolved_at="yesterday"), "resolved_at"),
    (changed(resolved_at="2024-05-01T00:00:00"), "resolved_at"),
    ({k: v for k, v in sample().items() if k != "resolved_at"}, "'resolved_at'"),
    ("[" * DEEP, "nested too deeply"),
    ('{"ranges": ' + "[" * DEEP, "nested too deeply"),
    ('{"version": ' + "9" * 5000 + "}", "not valid JSON"),
    ('{"version": NaN}', "version nan"),
    (b"\xff\xfe\x00", "not UTF-8"),
    (b"\x80{}", "not UTF-8"),
    (None, "must be a JSON object"),
    (5, "must be a JSON object"),
]


@pytest.mark.parametrize(("data", "fragment"), RANGES_CASES,
                         ids=[f"ranges{i}" for i in range(len(RANGES_CASES))])
def test_hostile_offset_ranges_are_offset_spec_errors(data: Any, fragment: str) -> None:
    text = data if isinstance(data, str | bytes) or data is None or isinstance(data, int) \
        else json.dumps(data)
    message = assert_error(lambda: OffsetRanges.from_json(text), OffsetSpecError, fragment)
    if isinstance(data, dict):
        assert AGAIN in message, message
        # The dict form (from XCom) is checked the same way.
        assert_error(lambda: OffsetRanges.from_json(data), OffsetSpecError, fragment)


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: OffsetRanges(5), "a sequence of PartitionRange"),
        (lambda: OffsetRanges((1, 2)), "a sequence of PartitionRange"),
        (lambda: OffsetRanges((), resolved_at="now"), "resolved_at"),
        (lambda: OffsetRanges((), lost={"a": 1}), "(topic, partition)"),
        (lambda: OffsetRanges((), lost={("a", 0): -1}), "a count from 0"),
        (lambda: OffsetRanges((), truncated={("a", 0): -1}), "an int from 0"),
        (lambda: PartitionRange("a", 0, 0, 2**64), "an int from 0 to 9223372036854775807"),
        (lambda: PartitionRange("a", 2**31, 0, 1), "an int from 0 to 2147483647"),
        (lambda: PartitionRange("a b", 0, 0, 1), "topic names are 1 to 249 of"),
    ],
)
def test_hostile_range_objects_are_offset_spec_errors(build: Callable[[], object],
                                                      fragment: str) -> None:
    assert_error(build, OffsetSpecError, fragment)


# --- Class 6: internal topics named explicitly need allow_internal=True ---

@pytest.mark.parametrize(
    "build",
    [
        lambda **kw: Subscription.topics("__consumer_offsets", **kw),
        lambda **kw: Subscription.topics(["orders", "__transaction_state"], **kw),
        lambda **kw: Subscription.topics(["__anything"], **kw),
        lambda **kw: Subscription.topics("_kafka_spark_ledger", **kw),
        lambda **kw: Subscription.partitions([("__consumer_offsets", 0)], **kw),
        lambda **kw: Subscription.partitions([("orders", 0), ("_kafka_spark_pins", 3)], **kw),
    ],
)
def test_naming_an_internal_topic_needs_allow_internal(build: Callable[..., Subscription]) -> None:
    message = assert_error(build, OffsetSpecError, "allow_internal=True")
    assert "internal topic" in message
    assert build(allow_internal=True).kind in ("topics", "partitions")


def test_allow_internal_reads_the_named_internal_topics() -> None:
    cluster = {"orders": 1, "__consumer_offsets": 2}
    assert Subscription.topics("__consumer_offsets", allow_internal=True).select(cluster) == [
        ("__consumer_offsets", 0), ("__consumer_offsets", 1)]
    assert Subscription.partitions([("__consumer_offsets", 1)], allow_internal=True) \
        .select(cluster) == [("__consumer_offsets", 1)]
    # Ordinary names that merely contain the prefixes are not internal.
    assert Subscription.topics(["my__topic", "x_kafka_spark_y"]).topic_names == (
        "my__topic", "x_kafka_spark_y")


# --- Class 2: timeouts are positive, finite numbers of seconds ---

# Nothing listens there; a call that got past the checks would wait on it (timeout=-1 is
# librdkafka's "forever"), which the per-test timeout turns into a failure.
UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1"}
BAD_TIMEOUTS = [-1, 0, -0.0, None, True, False, "30", float("nan"), float("inf"),
                float("-inf"), 1e300, 3601, [30]]
TIMEOUT_HELP = "pass a positive, finite number of seconds"
RANGES = OffsetRanges((PartitionRange("t", 0, 0, 5),))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=repr)
@pytest.mark.parametrize(
    "call",
    [
        lambda t: resolve_offsets(UNREACHABLE, Subscription.topics("t"), "earliest", "latest",
                                  timeout=t),
        lambda t: commit_offsets(UNREACHABLE, "g", RANGES, timeout=t),
        lambda t: list_partitions(UNREACHABLE, Subscription.topics("t"), timeout=t),
        lambda t: timestamp_stops(UNREACHABLE, [("t", 0)], 0, timeout=t),
    ],
    ids=["resolve_offsets", "commit_offsets", "list_partitions", "timestamp_stops"],
)
def test_a_bad_timeout_is_a_configuration_error(call: Callable[[object], object],
                                                timeout: object) -> None:
    message = assert_error(lambda: call(timeout), ConfigurationError, TIMEOUT_HELP)
    assert message.startswith(f"timeout={shown(timeout)} ")


# --- Class 8: client configs librdkafka refuses are ConfigurationErrors naming the key ---

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
        'password="hunter22";')
SECRETS = ("hunter22", "hunter23", "-----BEGIN garbage")
BASE = {"bootstrap.servers": "127.0.0.1:1", "sasl.password": "hunter23"}
LIBRDKAFKA_DOCS = "CONFIGURATION.md"
CONFIG_CASES: list[tuple[dict[str, Any], str]] = [
    ({"foo.bar": 1}, "'foo.bar'"),
    ({"foo.bar": 1}, LIBRDKAFKA_DOCS),
    ({"sasl.jaas.config": JAAS}, "set sasl.username and sasl.password"),
    ({"sasl.jaas.config": JAAS}, "sasl.mechanism"),
    ({"key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer"},
     "'key.deserializer' is a Java client setting"),
    ({"value.deserializer": "x"}, "remove it"),
    ({"key.serializer": "x"}, "remove it"),
    ({"value.serializer": "x"}, "remove it"),
    ({"ssl.truststore.location": "/etc/truststore.jks"}, "ssl.ca.location"),
    ({"ssl.truststore.password": "hunter22"}, "ssl.ca.location"),
    ({"interceptor.classes": "x"}, "remove it"),
    ({"security.protocol": "SASL_SSLL"}, "'security.protocol'"),
    ({"security.protocol": "SASL_SSLL"}, "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAINN"},
     "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"socket.timeout.ms": -5}, "'socket.timeout.ms'"),
    ({"socket.timeout.ms": "abc"}, "'socket.timeout.ms'"),
    ({"socket.keepalive.enable": "maybe"}, "'socket.keepalive.enable'"),
    ({"stats_cb": 3}, "'stats_cb'"),
    ({"throttle_cb": 1}, "'throttle_cb'"),
    ({"group.id": None}, "['group.id'] is None"),
    ({"sasl.password": None}, "['sasl.password'] is None"),
    ({"sasl.password": "hunter22\udcff"}, "not UTF-8"),
    ({"sasl.password": "hunter22\x00x"}, "NUL"),
    ({"bootstrap.servers": ["a:9092", "b:9092"]}, "comma-separated"),
    ({"client.id": object()}, "['client.id'] is a object"),
    ({"": "x"}, "empty key"),
    ({"ssl.key.pem": "-----BEGIN garbage", "security.protocol": "SSL"}, "'ssl.key.pem'"),
    ({"ssl.key.pem": "-----BEGIN garbage", "security.protocol": "SSL"}, "not shown"),
    ({"bootstrap.servers": ""}, "no 'bootstrap.servers'"),
]


def consumer_client(config: dict[str, Any]) -> object:
    return new_client(Consumer, consumer_config(config, isolation_level="read_committed"))


def producer_client(config: dict[str, Any]) -> object:
    return new_client(Producer, KafkaConfig.of(config).client())


@pytest.mark.parametrize("build", [admin_client, consumer_client, producer_client],
                         ids=["admin", "consumer", "producer"])
@pytest.mark.parametrize(("extra", "fragment"), CONFIG_CASES,
                         ids=[f"config{i}" for i in range(len(CONFIG_CASES))])
def test_a_config_librdkafka_refuses_is_a_configuration_error(
        build: Callable[[dict[str, Any]], object], extra: dict[str, Any], fragment: str) -> None:
    message = assert_error(lambda: build({**BASE, **extra}), ConfigurationError, fragment)
    assert not any(secret in message for secret in SECRETS), message


def test_a_config_error_stops_resolve_and_commit_before_any_request() -> None:
    bad = {**BASE, "sasl.jaas.config": JAAS}
    for call in (lambda: resolve_offsets(bad, Subscription.topics("t"), "earliest", "latest"),
                 lambda: commit_offsets(bad, "g", RANGES),
                 lambda: list_partitions(bad, Subscription.topics("t"))):
        message = assert_error(call, ConfigurationError, "'sasl.jaas.config'")
        assert "hunter22" not in message


def test_kafka_config_must_be_a_mapping() -> None:
    assert_error(lambda: admin_client([("bootstrap.servers", "a:9092")]),  # type: ignore[arg-type]
                 ConfigurationError, "must be a dict of librdkafka settings")


# --- Class 10: every message says what was wrong and what to do ---

CLUSTER = {"orders": 2, "__consumer_offsets": 50}
REMEDY_CASES: list[tuple[Callable[[], object], type[KafkaSparkError], tuple[str, ...]]] = [
    (lambda: resolve_offsets(UNREACHABLE, Subscription.topics("t"), "earliest", "latest",
                             on_data_loss="ignore"),
     ConfigurationError, ("on_data_loss='ignore'", "use 'fail' or 'skip'")),
    (lambda: resolve_offsets(UNREACHABLE, Subscription.topics("t"), "earliest", "latest",
                             on_open_transaction="wait"),
     ConfigurationError, ("on_open_transaction='wait'", "use 'fail' or 'truncate'")),
    (lambda: resolve_offsets(UNREACHABLE, Subscription.topics("t"), "committed", "latest",
                             group_id=5),  # type: ignore[arg-type]
     ConfigurationError, ("group_id=5", "pass the consumer group's id as a string")),
    (lambda: resolve_offsets(UNREACHABLE, Subscription.topics("t"), "committed", "latest"),
     OffsetSpecError, ("needs group_id", "pass the consumer group")),
    (lambda: resolve_offsets(UNREACHABLE, Subscription.topics("t"), Timestamp(5), Timestamp(4)),
     OffsetSpecError, ("is after the stopping time", "swap them")),
    (lambda: resolve_offsets(UNREACHABLE, "orders", "earliest", "latest"),
     OffsetSpecError, ("is not a Subscription", "Subscription.topics(")),
    (lambda: Subscription.pattern("(orders"),
     OffsetSpecError, ("is not a valid regex", "Fix it")),
    (lambda: Subscription.topics("nope").select(CLUSTER),
     UnknownTopicError, ("unknown topic(s) ['nope']", "Create them or fix the names")),
    (lambda: Subscription.pattern("x.*").select(CLUSTER),
     UnknownTopicError, ("matches no topic", "Fix the pattern")),
    (lambda: Subscription.partitions([("orders", 2), ("nope", 0)]).select(CLUSTER),
     UnknownTopicError, ("unknown partition(s)", "orders: partitions 0..1",
                             "nope: no such topic", "Fix the partition numbers")),
    (lambda: OffsetRanges((), resolved_at=datetime(9999, 12, 31, 23,
                                                   tzinfo=timezone(timedelta(hours=-5)))),
     OffsetSpecError, ("is out of range", "pass a time such as datetime.now(UTC)")),
    (lambda: parse_offset_spec('{"t": [1]}'),
     OffsetSpecError, ("explicit offsets must map topic", 'such as {"topic": {"0": 23}}')),
    (lambda: commit_offsets(UNREACHABLE, "", RANGES),
     ConfigurationError, ("group_id=''", "a non-empty group_id string")),
]


@pytest.mark.parametrize(("call", "error", "fragments"), REMEDY_CASES,
                         ids=[f"remedy{i}" for i in range(len(REMEDY_CASES))])
def test_messages_say_what_was_wrong_and_what_to_do(
        call: Callable[[], object], error: type[KafkaSparkError],
        fragments: tuple[str, ...]) -> None:
    message = assert_error(call, error, fragments[0])
    for fragment in fragments[1:]:
        assert fragment in message, message
