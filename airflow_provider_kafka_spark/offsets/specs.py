"""Offset specs: how a starting or stopping offset is chosen for each partition.

The specs mirror Flink's ``OffsetsInitializer``: earliest, latest, committed (with an optional
reset strategy), timestamp, and explicit offsets. ``parse_offset_spec`` is the one parser; every
spec's ``str()`` parses back to an equal spec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from airflow_provider_kafka_spark.offsets.errors import OffsetSpecError

TopicPartitionKey = tuple[str, int]

_SPEC_HELP = (
    "Use 'earliest', 'latest', 'committed', 'committed:earliest', 'committed:latest', "
    "'timestamp:<ISO-8601 with zone>' or 'timestamp:<epoch millis>', an aware datetime, "
    'or explicit offsets such as {"topic": {"0": 23}} (optionally with "*": <spec> for the '
    "partitions not listed)."
)


@dataclass(frozen=True)
class Earliest:
    """The log start offset: the first offset still stored."""

    def __str__(self) -> str:
        return "earliest"


@dataclass(frozen=True)
class Latest:
    """The end of the readable log: the last stable offset under ``read_committed``,
    the high watermark under ``read_uncommitted``."""

    def __str__(self) -> str:
        return "latest"


@dataclass(frozen=True)
class Committed:
    """The consumer group's committed offset (needs ``group_id``).

    ``reset`` is used for partitions the group never committed; ``None`` makes such
    partitions an error that names them.
    """

    reset: Literal["earliest", "latest"] | None = None

    def __post_init__(self) -> None:
        if self.reset not in (None, "earliest", "latest"):
            raise OffsetSpecError(
                f"Committed(reset={self.reset!r}) is not valid; use None, 'earliest' or 'latest'."
            )

    def __str__(self) -> str:
        return "committed" if self.reset is None else f"committed:{self.reset}"


@dataclass(frozen=True)
class Timestamp:
    """The offset of the first record whose timestamp is >= ``millis`` (epoch milliseconds,
    UTC); the partition's latest offset when no such record exists.

    Kafka's own lookup (``ListOffsets`` by timestamp) answers it, so a ``[T1, T2)`` pair of
    timestamp specs covers exactly the records with ``T1 <= timestamp < T2`` in a partition
    whose timestamps do not decrease.
    """

    millis: int

    def __post_init__(self) -> None:
        if isinstance(self.millis, bool) or not isinstance(self.millis, int) or self.millis < 0:
            raise OffsetSpecError(
                f"Timestamp(millis={self.millis!r}) must be a non-negative int of epoch millis."
            )

    @classmethod
    def from_datetime(cls, moment: datetime) -> Timestamp:
        """The spec for an aware datetime; a naive one is rejected as ambiguous."""
        if moment.tzinfo is None or moment.tzinfo.utcoffset(moment) is None:
            raise OffsetSpecError(
                f"datetime {moment.isoformat()} has no time zone, so it is ambiguous; "
                "pass an aware datetime (e.g. pendulum.datetime(..., tz='UTC'))."
            )
        delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
        return cls(delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000)

    @property
    def datetime(self) -> datetime:
        """The instant as an aware UTC datetime."""
        return datetime.fromtimestamp(self.millis / 1000, tz=UTC)

    def __str__(self) -> str:
        return "timestamp:" + self.datetime.isoformat(timespec="milliseconds").replace(
            "+00:00", "Z"
        )


@dataclass(frozen=True)
class SpecificOffsets:
    """Explicit offsets per ``(topic, partition)``; ``default`` covers partitions not listed.

    Without a default, a subscribed partition that is not listed is an error.
    """

    offsets: Mapping[TopicPartitionKey, int]
    default: OffsetSpec | None = field(default=None)

    def __post_init__(self) -> None:
        checked: dict[TopicPartitionKey, int] = {}
        for key, offset in dict(self.offsets).items():
            if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
                    and isinstance(key[1], int) and key[1] >= 0):
                raise OffsetSpecError(
                    f"SpecificOffsets key {key!r} must be a (topic, partition) tuple "
                    "with a non-negative partition."
                )
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise OffsetSpecError(
                    f"offset {offset!r} for {key[0]}/{key[1]} must be a non-negative int."
                )
            checked[key] = offset
        object.__setattr__(self, "offsets", dict(sorted(checked.items())))
        if self.default is not None:
            default = parse_offset_spec(self.default)
            if isinstance(default, SpecificOffsets):
                raise OffsetSpecError("the default of SpecificOffsets cannot itself be explicit.")
            object.__setattr__(self, "default", default)

    def __hash__(self) -> int:
        return hash((tuple(self.offsets.items()), self.default))

    def __str__(self) -> str:
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in self.offsets.items():
            by_topic.setdefault(topic, {})[str(partition)] = offset
        as_json: dict[str, Any] = dict(by_topic)
        if self.default is not None:
            as_json["*"] = str(self.default)
        return json.dumps(as_json, sort_keys=True, separators=(",", ":"))


OffsetSpec = Earliest | Latest | Committed | Timestamp | SpecificOffsets
"""Any one of the spec classes."""

_KEYWORDS: dict[str, OffsetSpec] = {
    "earliest": Earliest(),
    "latest": Latest(),
    "committed": Committed(),
    "committed:earliest": Committed("earliest"),
    "committed:latest": Committed("latest"),
}


def parse_offset_spec(value: object) -> OffsetSpec:
    """Turn a spec object, spec string, aware datetime or offsets mapping into a spec.

    Strings: ``earliest``, ``latest``, ``committed``, ``committed:earliest``,
    ``committed:latest``, ``timestamp:<ISO-8601 with offset or Z>``, ``timestamp:<epoch ms>``,
    or a JSON object of explicit offsets ``{"topic": {"0": 23}, "*": "earliest"}``
    (``"*"`` is optional: the spec for partitions not listed).

    Raises:
        OffsetSpecError: the value is none of those, or a time has no zone.
    """
    if isinstance(value, Earliest | Latest | Committed | Timestamp | SpecificOffsets):
        return value
    if isinstance(value, datetime):
        return Timestamp.from_datetime(value)
    if isinstance(value, Mapping):
        return _parse_offsets_mapping(value)
    if not isinstance(value, str):
        raise OffsetSpecError(f"offset spec {value!r} ({type(value).__name__}) is not valid. "
                              + _SPEC_HELP)
    text = value.strip()
    keyword = _KEYWORDS.get(text.lower())
    if keyword is not None:
        return keyword
    if text.lower().startswith("timestamp:"):
        return _parse_timestamp(text[len("timestamp:"):].strip())
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OffsetSpecError(f"explicit offsets {text!r} are not valid JSON: {exc}.") from None
        if not isinstance(parsed, dict):
            raise OffsetSpecError(f"explicit offsets {text!r} must be a JSON object. " + _SPEC_HELP)
        return _parse_offsets_mapping(parsed)
    raise OffsetSpecError(f"unknown offset spec {value!r}. " + _SPEC_HELP)


def _parse_timestamp(text: str) -> Timestamp:
    if text.isdigit():
        return Timestamp(int(text))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise OffsetSpecError(
            f"timestamp {text!r} is neither epoch millis nor an ISO-8601 time. " + _SPEC_HELP
        ) from None
    if moment.tzinfo is None:
        raise OffsetSpecError(
            f"timestamp {text!r} has no time zone, so it is ambiguous; "
            "add an offset such as 'Z' or '+02:00'."
        )
    return Timestamp.from_datetime(moment)


def _parse_offsets_mapping(mapping: Mapping[Any, Any]) -> SpecificOffsets:
    offsets: dict[TopicPartitionKey, int] = {}
    default: OffsetSpec | None = None
    for topic, per_partition in mapping.items():
        if topic == "*":
            default = parse_offset_spec(per_partition)
            continue
        if not isinstance(topic, str) or not isinstance(per_partition, Mapping):
            raise OffsetSpecError(
                f"explicit offsets must map topic -> {{partition: offset}}, got {topic!r}: "
                f"{per_partition!r}. " + _SPEC_HELP
            )
        for partition, offset in per_partition.items():
            try:
                partition_number = int(partition)
            except (TypeError, ValueError):
                raise OffsetSpecError(
                    f"partition {partition!r} of topic {topic!r} is not an integer."
                ) from None
            offsets[(topic, partition_number)] = offset
    return SpecificOffsets(offsets, default=default)
