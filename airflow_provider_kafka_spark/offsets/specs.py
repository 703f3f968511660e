"""Offset specs: how a starting or stopping offset is chosen for each partition.

The specs mirror Flink's ``OffsetsInitializer``: earliest, latest, committed (with an optional
reset strategy), timestamp, and explicit offsets; ``table`` starts where an application's
commits to an Iceberg or Delta table stopped (the offsets live in the table, atomically with the
data). ``parse_offset_spec`` is the one parser; every
spec's ``str()`` parses back to an equal spec.

Each spec finds its own offsets, as Flink's initializers do through a
``PartitionOffsetsRetriever``: ``spec.lookup(context, partitions)`` with a
:class:`LookupContext` (the cluster's answers, the group's committed offsets, a table's
recorded stops) that :func:`~airflow_provider_kafka_spark.offsets.resolve.resolve_offsets`
builds once per resolution.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from airflow_provider_kafka_spark.errors import OffsetResolutionError, OffsetSpecError
from airflow_provider_kafka_spark.options import is_topic_name

TopicPartitionKey = tuple[str, int]

MAX_PARTITION = 2**31 - 1
"""The largest partition number (Kafka's partition ids are 32-bit)."""
MAX_OFFSET = 2**63 - 1
"""The largest offset (Kafka's offsets are 64-bit)."""
MAX_TIMESTAMP_MILLIS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z in epoch milliseconds: the latest instant a ``datetime`` holds."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# ASCII only: str.isdigit() also accepts '١' and '²', which int() then refuses or converts.
_ASCII_DIGITS = re.compile(r"[0-9]+")
# Longer digit strings are out of every range here (and int() refuses 4300+ digits).
_MAX_DIGITS = 19
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlong = 40
_SHORT.maxlevel = 3

_SPEC_HELP = (
    "Use 'earliest', 'latest', 'committed', 'committed:earliest', 'committed:latest', "
    "'table', 'table:earliest', 'table:latest' (starting only), "
    "'timestamp:<ISO-8601 with zone>' or 'timestamp:<epoch millis>', an aware datetime, "
    'or explicit offsets such as {"topic": {"0": 23}} (optionally with "*": <spec> for the '
    "partitions not listed)."
)

_EPOCH_RANGE = (f"use epoch milliseconds from 0 to {MAX_TIMESTAMP_MILLIS} "
                "(1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z)")


def shown(value: object) -> str:
    """A short ``repr`` of a user's value for an error message: a hostile value (a huge
    string, a deeply nested dict) is cut, never echoed whole."""
    try:
        return _SHORT.repr(value)
    except ValueError:  # an int of more than 4300 digits has no repr
        return f"<a {type(value).__name__} too long to show>"


def check_topic_name(topic: object, where: str) -> str:
    """``topic`` if it can name a Kafka topic, else :class:`OffsetSpecError` (``where``
    says whose topic it is)."""
    if isinstance(topic, str) and is_topic_name(topic):
        return topic
    raise OffsetSpecError(
        f"{where}: {shown(topic)} is not a Kafka topic name; topic names are 1 to 249 of the "
        "characters a-z A-Z 0-9 . _ - (check for spaces and typos)."
    )


def check_partition(partition: object, where: str) -> int:
    """``partition`` if it is a partition number (an int, not a bool, from 0 to
    :data:`MAX_PARTITION`), else :class:`OffsetSpecError`."""
    if _is_int_up_to(partition, MAX_PARTITION):
        return partition  # type: ignore[return-value]
    raise OffsetSpecError(
        f"{where}: partition={shown(partition)} is not a partition number; use an int from 0 "
        f"to {MAX_PARTITION}."
    )


def check_offset(offset: object, where: str, what: str = "offset") -> int:
    """``offset`` if it is a Kafka offset (an int, not a bool, from 0 to :data:`MAX_OFFSET`),
    else :class:`OffsetSpecError` naming it ``what``."""
    if _is_int_up_to(offset, MAX_OFFSET):
        return offset  # type: ignore[return-value]
    raise OffsetSpecError(
        f"{where}: {what}={shown(offset)} is not an offset; use an int from 0 to {MAX_OFFSET}."
    )


def _is_int_up_to(value: object, maximum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value <= maximum


def load_json(text: str | bytes, what: str, remedy: str) -> Any:
    """``json.loads`` that only raises :class:`OffsetSpecError` (``what`` names the document
    in it, ``remedy`` says what to pass instead): bytes that are not UTF-8, bad syntax, deep
    nesting, numbers too long for Python, and a key that appears twice in one object (one of
    its values would be silently dropped)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OffsetSpecError(
                f"{what} are bytes that are not UTF-8 text (byte {text[exc.start]:#04x} at "
                f"position {exc.start}). {remedy}"
            ) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except OffsetSpecError as exc:
        raise OffsetSpecError(f"{what}: {exc} {remedy}") from None
    except RecursionError:
        raise OffsetSpecError(f"{what} are nested too deeply to be read. {remedy}") from None
    except json.JSONDecodeError as exc:
        raise OffsetSpecError(f"{what} are not valid JSON ({exc}). {remedy}") from None
    except ValueError:  # int() refuses numbers of more than 4300 digits
        raise OffsetSpecError(
            f"{what} are not valid JSON here: a number has thousands of digits (offsets are "
            f"at most {MAX_OFFSET}). {remedy}"
        ) from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise OffsetSpecError(
                f"the key {shown(key)} appears more than once in one JSON object, so all but "
                "one of its values would be silently dropped; list it once."
            )
        result[key] = value
    return result


class OffsetAnswers(Protocol):
    """The cluster's offsets for a resolution's partitions (Flink's
    ``PartitionOffsetsRetriever``); :class:`~airflow_provider_kafka_spark.offsets.cluster.OffsetLookup`
    answers it through the resolution's one admin client, batched and cached."""

    isolation_level: str

    def offsets(self, kind: str | int,
                isolation_level: str | None = None) -> dict[TopicPartitionKey, int]:
        """``kind``: ``"earliest"``, ``"latest"`` or a timestamp in epoch millis (-1 where no
        record is at or after it); under ``isolation_level`` (default: the lookup's)."""
        ...


@dataclass(frozen=True)
class LookupContext:
    """What a spec's lookup may use, built once per resolution.

    ``cluster``: the cluster's offsets (one admin client, the resolution's isolation level and
    deadline). ``committed``: the consumer group's committed offsets (read only when a spec
    needs them; partitions without one are absent). ``table_offsets``: the stops a table
    recorded for the application (with a ``table`` start).
    """

    cluster: OffsetAnswers
    committed: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    table_offsets: Mapping[TopicPartitionKey, int] = field(default_factory=dict)


class _Spec:
    """What every spec answers: its offsets per partition, and what it reads besides the
    cluster's offsets."""

    def lookup(self, context: LookupContext, partitions: list[TopicPartitionKey],
               role: str = "starting") -> dict[TopicPartitionKey, int]:
        """The spec's offset of each of ``partitions`` (``role``, ``starting`` or
        ``stopping``, names it in errors).

        Raises:
            OffsetResolutionError: the spec has no offset for a partition (see each spec).
        """
        raise NotImplementedError

    def reads(self) -> Literal["group", "table"] | None:
        """``group``: the spec needs the consumer group's committed offsets; ``table``: a
        table's recorded stops; ``None``: only the cluster's offsets."""
        return None


def _answers(context: LookupContext, kind: str | int,
             partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    found = context.cluster.offsets(kind)
    return {k: found[k] for k in partitions}


@dataclass(frozen=True)
class Earliest(_Spec):
    """The log start offset: the first offset still stored."""

    def lookup(self, context: LookupContext, partitions: list[TopicPartitionKey],
               role: str = "starting") -> dict[TopicPartitionKey, int]:
        return _answers(context, "earliest", partitions)

    def __str__(self) -> str:
        return "earliest"


@dataclass(frozen=True)
class Latest(_Spec):
    """The end of the readable log: the last stable offset under ``read_committed``,
    the high watermark under ``read_uncommitted``."""

    def lookup(self, context: LookupContext, partitions: list[TopicPartitionKey],
               role: str = "starting") -> dict[TopicPartitionKey, int]:
        return _answers(context, "latest", partitions)

    def __str__(self) -> str:
        return "latest"


def _stored_or_reset(spec: Committed | FromTable, stored: Mapping[TopicPartitionKey, int],
                     holder: str, context: LookupContext, partitions: list[TopicPartitionKey],
                     role: str) -> dict[TopicPartitionKey, int]:
    """The offsets a group or table stored, the reset strategy's where it stored none."""
    missing = [k for k in partitions if k not in stored]
    if missing and spec.reset is None:
        names = ", ".join(f"{t}/{p}" for t, p in missing[:50])
        raise OffsetResolutionError(
            f"{role} spec '{spec}': {holder} for {len(missing)} partition(s): {names}. Use "
            f"'{spec}:earliest' or '{spec}:latest' to choose where such partitions begin."
        )
    fallback = context.cluster.offsets(spec.reset) if missing and spec.reset else {}
    return {k: stored[k] if k in stored else fallback[k] for k in partitions}


@dataclass(frozen=True)
class Committed(_Spec):
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

    def lookup(self, context: LookupContext, partitions: list[TopicPartitionKey],
               role: str = "starting") -> dict[TopicPartitionKey, int]:
        return _stored_or_reset(self, context.committed, "the group has no committed offset",
                                context, partitions, role)

    def reads(self) -> Literal["group", "table"] | None:
        return "group"

    def __str__(self) -> str:
        return "committed" if self.reset is None else f"committed:{self.reset}"


@dataclass(frozen=True)
class FromTable(_Spec):
    """A starting spec: the stops that an application's commits recorded in the Iceberg or
    Delta table it writes (:mod:`airflow_provider_kafka_spark.sinks.tables`), so a run starts
    where the table's data ends and no consumer group is needed. The recorded offsets are read
    by the table sink's ``recorded_offsets(spark)`` and handed to
    ``resolve_offsets(..., table_offsets=...)`` (the context's ``table_offsets``).

    ``reset`` is used for partitions the application never wrote; ``None`` makes such
    partitions an error that names them.
    """

    reset: Literal["earliest", "latest"] | None = None

    def __post_init__(self) -> None:
        if self.reset not in (None, "earliest", "latest"):
            raise OffsetSpecError(
                f"FromTable(reset={self.reset!r}) is not valid; use None, 'earliest' or 'latest'."
            )

    def lookup(self, context: LookupContext, partitions: list[TopicPartitionKey],
               role: str = "starting") -> dict[TopicPartitionKey, int]:
        return _stored_or_reset(self, context.table_offsets,
                                "the table records no stop of the application", context,
                                partitions, role)

    def reads(self) -> Literal["group", "table"] | None:
        return "table"

    def __str__(self) -> str:
        return "table" if self.reset is None else f"table:{self.reset}"


@dataclass(frozen=True)
class Timestamp(_Spec):
    """The offset of the first record whose timestamp is >= ``millis`` (epoch milliseconds,
    UTC); the partition's latest offset when no such record exists.

    Kafka's own lookup (``ListOffsets`` by timestamp) answers it, so a ``[T1, T2)`` pair of
    timestamp specs covers exactly the records with ``T1 <= timestamp < T2`` in a partition
    whose timestamps do not decrease.
    """

    millis: int

    def __post_init__(self) -> None:
        if not _is_int_up_to(self.millis, MAX_TIMESTAMP_MILLIS):
            raise OffsetSpecError(
                f"Timestamp(millis={shown(self.millis)}) is not a time this package can use; "
                f"{_EPOCH_RANGE}."
            )

    @classmethod
    def from_datetime(cls, moment: datetime) -> Timestamp:
        """The spec for an aware datetime from 1970 to 9999 (UTC); a naive one is rejected as
        ambiguous."""
        if moment.tzinfo is None or moment.tzinfo.utcoffset(moment) is None:
            raise OffsetSpecError(
                f"datetime {moment.isoformat()} has no time zone, so it is ambiguous; "
                "pass an aware datetime (e.g. pendulum.datetime(..., tz='UTC'))."
            )
        delta = moment - _EPOCH
        millis = delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
        if not 0 <= millis <= MAX_TIMESTAMP_MILLIS:
            raise OffsetSpecError(
                f"time {moment.isoformat()} is out of range: a timestamp spec is at the earliest "
                "1970-01-01T00:00:00Z and at the latest 9999-12-31T23:59:59.999Z (UTC); pass a "
                "time in that range."
            )
        return cls(millis)

    def lookup(self, context: LookupContext, partitions: list[TopicPartitionKey],
               role: str = "starting") -> dict[TopicPartitionKey, int]:
        latest = context.cluster.offsets("latest")
        found = context.cluster.offsets(self.millis)
        # -1: no record at or after T (the broker also answers -1 past the LSO / HW).
        return {k: latest[k] if found[k] < 0 else min(found[k], latest[k]) for k in partitions}

    @property
    def datetime(self) -> datetime:
        """The instant as an aware UTC datetime."""
        return _EPOCH + timedelta(milliseconds=self.millis)

    def __str__(self) -> str:
        return "timestamp:" + self.datetime.isoformat(timespec="milliseconds").replace(
            "+00:00", "Z"
        )


@dataclass(frozen=True)
class SpecificOffsets(_Spec):
    """Explicit offsets per ``(topic, partition)``; ``default`` covers partitions not listed.

    Without a default, a subscribed partition that is not listed is an error.
    """

    offsets: Mapping[TopicPartitionKey, int]
    default: OffsetSpec | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.offsets, Mapping):
            raise OffsetSpecError(
                f"SpecificOffsets({shown(self.offsets)}): offsets must be a mapping of "
                "(topic, partition) to offset, e.g. {('orders', 0): 23}."
            )
        checked: dict[TopicPartitionKey, int] = {}
        for key, offset in self.offsets.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise OffsetSpecError(
                    f"SpecificOffsets key {shown(key)} is not a (topic, partition) pair; use "
                    "keys such as ('orders', 0)."
                )
            topic = check_topic_name(key[0], "explicit offsets")
            partition = check_partition(key[1], f"explicit offsets of topic {topic!r}")
            checked[(topic, partition)] = check_offset(offset, f"explicit offsets, {topic}/"
                                                       f"{partition}")
        object.__setattr__(self, "offsets", dict(sorted(checked.items())))
        if self.default is not None:
            object.__setattr__(self, "default", _parse_default(self.default))

    def __hash__(self) -> int:
        return hash((tuple(self.offsets.items()), self.default))

    def lookup(self, context: LookupContext, partitions: list[TopicPartitionKey],
               role: str = "starting") -> dict[TopicPartitionKey, int]:
        """The listed offsets, the default's elsewhere.

        Raises:
            OffsetResolutionError: a listed partition is not among ``partitions``, one of
                ``partitions`` is not listed and there is no default, or a listed offset is
                beyond the end of the log.
        """
        listed = self.offsets
        unknown = sorted(set(listed) - set(partitions))
        if unknown:
            raise OffsetResolutionError(
                f"{role} offsets name partitions that are not subscribed or do not exist: "
                f"{unknown[:50]}. List only partitions of the subscription ({len(partitions)} "
                "partition(s)), or subscribe to these partitions too."
            )
        unlisted = [k for k in partitions if k not in listed]
        if unlisted and self.default is None:
            raise OffsetResolutionError(
                f"{role} offsets do not list {len(unlisted)} subscribed partition(s): "
                f"{unlisted[:50]}. List them, or add a default such as \"*\": \"earliest\"."
            )
        defaults = (self.default.lookup(context, partitions, role)
                    if unlisted and self.default is not None else {})
        latest = context.cluster.offsets("latest")
        beyond = [f"{t}/{p}: {o} > latest {latest[(t, p)]}" for (t, p), o in listed.items()
                  if o > latest[(t, p)]]
        if beyond:
            raise OffsetResolutionError(
                f"{role} offsets are beyond the end of the log "
                f"({context.cluster.isolation_level}): {'; '.join(beyond[:50])}. Use offsets up "
                "to the end of the log (or 'latest'); under read_committed an open transaction "
                "holds the end back: wait for it, or resolve with "
                "isolation_level='read_uncommitted'."
            )
        return {k: listed[k] if k in listed else defaults[k] for k in partitions}

    def reads(self) -> Literal["group", "table"] | None:
        return None if self.default is None else self.default.reads()

    def __str__(self) -> str:
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in self.offsets.items():
            by_topic.setdefault(topic, {})[str(partition)] = offset
        as_json: dict[str, Any] = dict(by_topic)
        if self.default is not None:
            as_json["*"] = str(self.default)
        return json.dumps(as_json, sort_keys=True, separators=(",", ":"))


OffsetSpec = Earliest | Latest | Committed | FromTable | Timestamp | SpecificOffsets
"""Any one of the spec classes."""

_KEYWORDS: dict[str, OffsetSpec] = {
    "earliest": Earliest(),
    "latest": Latest(),
    "committed": Committed(),
    "committed:earliest": Committed("earliest"),
    "committed:latest": Committed("latest"),
    "table": FromTable(),
    "table:earliest": FromTable("earliest"),
    "table:latest": FromTable("latest"),
}


def parse_offset_spec(value: object) -> OffsetSpec:
    """Turn a spec object, spec string, aware datetime or offsets mapping into a spec.

    Strings: ``earliest``, ``latest``, ``committed``, ``committed:earliest``,
    ``committed:latest``, ``table``, ``table:earliest``, ``table:latest`` (starting specs),
    ``timestamp:<ISO-8601 with offset or Z>``, ``timestamp:<epoch ms>``,
    or a JSON object of explicit offsets ``{"topic": {"0": 23}, "*": "earliest"}``
    (``"*"`` is optional: the spec for partitions not listed).

    Raises:
        OffsetSpecError: the value is none of those, a time has no zone or is outside
            1970..9999, or an offset or partition is not a valid number.
    """
    if isinstance(value, Earliest | Latest | Committed | FromTable | Timestamp | SpecificOffsets):
        return value
    if isinstance(value, datetime):
        return Timestamp.from_datetime(value)
    if isinstance(value, Mapping):
        return _parse_offsets_mapping(value)
    if isinstance(value, bytes):
        raise OffsetSpecError(f"offset spec {shown(value)} is bytes; decode it to a str first "
                              "(value.decode('utf-8')). " + _SPEC_HELP)
    if not isinstance(value, str):
        raise OffsetSpecError(f"offset spec {shown(value)} ({type(value).__name__}) is not "
                              "valid. " + _SPEC_HELP)
    text = value.strip()
    keyword = _KEYWORDS.get(text.lower())
    if keyword is not None:
        return keyword
    if text.lower().startswith("timestamp:"):
        return _parse_timestamp(text[len("timestamp:"):].strip())
    if text.startswith("{"):
        parsed = load_json(text, f"explicit offsets {shown(text)}", _SPEC_HELP)
        if not isinstance(parsed, dict):
            raise OffsetSpecError(f"explicit offsets {shown(text)} must be a JSON object. "
                                  + _SPEC_HELP)
        return _parse_offsets_mapping(parsed)
    raise OffsetSpecError(f"unknown offset spec {shown(value)}. " + _SPEC_HELP)


def _parse_timestamp(text: str) -> Timestamp:
    if _ASCII_DIGITS.fullmatch(text):
        if len(text) > _MAX_DIGITS or int(text) > MAX_TIMESTAMP_MILLIS:
            raise OffsetSpecError(
                f"timestamp {shown(text)} is out of range; {_EPOCH_RANGE}. (A value in "
                "microseconds or nanoseconds is too large: divide it by 1000 or 1000000.)"
            )
        return Timestamp(int(text))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise OffsetSpecError(
            f"timestamp {shown(text)} is neither epoch millis (ASCII digits, e.g. "
            "'timestamp:1714521600000') nor an ISO-8601 time with a zone (e.g. "
            "'timestamp:2024-05-01T00:00:00Z'). " + _SPEC_HELP
        ) from None
    if moment.tzinfo is None:
        raise OffsetSpecError(
            f"timestamp {shown(text)} has no time zone, so it is ambiguous; "
            "add an offset such as 'Z' or '+02:00'."
        )
    return Timestamp.from_datetime(moment)


def _parse_offsets_mapping(mapping: Mapping[Any, Any]) -> SpecificOffsets:
    offsets: dict[TopicPartitionKey, int] = {}
    default: OffsetSpec | None = None
    for topic, per_partition in mapping.items():
        if topic == "*":
            default = _parse_default(per_partition)
            continue
        check_topic_name(topic, "explicit offsets")
        if not isinstance(per_partition, Mapping):
            raise OffsetSpecError(
                f"explicit offsets must map topic -> {{partition: offset}}, got {shown(topic)}: "
                f"{shown(per_partition)}. " + _SPEC_HELP
            )
        for partition, offset in per_partition.items():
            offsets[(topic, _partition_key(partition, topic))] = offset
    return SpecificOffsets(offsets, default=default)


def _partition_key(key: object, topic: str) -> int:
    """A partition of explicit offsets: an int, or its ASCII digits (JSON keys are strings)."""
    where = f"explicit offsets of topic {topic!r}"
    if not isinstance(key, str):
        return check_partition(key, where)
    if not _ASCII_DIGITS.fullmatch(key):
        raise OffsetSpecError(
            f"{where}: partition {shown(key)} is not a partition number; write partitions in "
            f'ASCII digits, e.g. {{"{topic}": {{"0": 23}}}}.'
        )
    return check_partition(int(key) if len(key) <= _MAX_DIGITS else key, where)


def _parse_default(value: object) -> OffsetSpec:
    """The ``"*"`` spec of explicit offsets: any spec but explicit offsets (checked before
    parsing, so a deeply nested ``{"*": {"*": ...}}`` cannot recurse)."""
    if isinstance(value, Mapping | SpecificOffsets) or (
            isinstance(value, str) and value.strip().startswith("{")):
        raise OffsetSpecError(
            f'the "*" default of explicit offsets {shown(value)} cannot itself be explicit; use '
            "'earliest', 'latest', 'committed', 'committed:earliest', 'committed:latest' or "
            "'timestamp:<time>'."
        )
    return parse_offset_spec(value)
