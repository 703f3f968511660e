"""Resolved offset ranges: plain data that travels through XCom so a retry reads the same slice."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_kafka_spark.errors import ConfigurationError, OffsetSpecError
from airflow_provider_kafka_spark.offsets.config import check_isolation_level
from airflow_provider_kafka_spark.offsets.specs import (
    MAX_OFFSET,
    MAX_PARTITION,
    check_offset,
    check_partition,
    check_topic_name,
    load_json,
    shown,
)
from airflow_provider_kafka_spark.options import is_topic_name

FORMAT_VERSION = 1
Key = tuple[str, int]
_AGAIN = ("Resolve the offsets again (resolve_offsets or the resolve operator), or pass the "
          "JSON that OffsetRanges.to_json() produced, unchanged.")


@dataclass(frozen=True, order=True)
class PartitionRange:
    """Offsets ``[start, stop)`` of one topic partition: ``start`` inclusive, ``stop`` exclusive.

    ``stop - start`` is an upper bound on the records: transaction markers, aborted records
    (under ``read_committed``) and compaction leave gaps.
    """

    topic: str
    partition: int
    start: int
    stop: int

    def __post_init__(self) -> None:
        if (type(self.partition) is int and type(self.start) is int and type(self.stop) is int
                and 0 <= self.partition <= MAX_PARTITION and 0 <= self.start <= self.stop
                <= MAX_OFFSET and isinstance(self.topic, str) and is_topic_name(self.topic)):
            return  # the common case, without building the messages below
        where = f"range {shown(self.topic)}/{shown(self.partition)}"
        check_topic_name(self.topic, where)
        check_partition(self.partition, where)
        check_offset(self.start, where, "start")
        check_offset(self.stop, where, "stop")
        if self.start > self.stop:
            raise OffsetSpecError(
                f"{where}: start {self.start} is after stop {self.stop}; a range needs "
                "start <= stop (an empty range has start == stop)."
            )

    @property
    def size(self) -> int:
        """``stop - start``: the most records the range can hold."""
        return self.stop - self.start


@dataclass(frozen=True)
class OffsetRanges:
    """One :class:`PartitionRange` per subscribed partition, sorted by (topic, partition).

    Iterating yields the ranges. The metadata says how they were resolved; ``lost`` maps
    ``(topic, partition)`` to offsets skipped because the data was already deleted
    (only with ``on_data_loss="skip"``); ``truncated`` maps ``(topic, partition)`` to the first
    offset of an open transaction that cut a ``timestamp:`` stop short (only with
    ``on_open_transaction="truncate"``): records from that offset on may belong to the
    interval but are not in the range; ``lag`` maps ``(topic, partition)`` to the partition's
    end at resolution (last stable offset or high watermark, per ``isolation_level``) minus
    the range's stop (ranges read from before lag was recorded have none).
    """

    ranges: tuple[PartitionRange, ...]
    starting: str = ""
    stopping: str = ""
    isolation_level: str = "read_committed"
    group_id: str | None = None
    resolved_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    lost: Mapping[tuple[str, int], int] = field(default_factory=dict)
    truncated: Mapping[tuple[str, int], int] = field(default_factory=dict)
    lag: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.ranges, str | bytes | Mapping) or not isinstance(self.ranges, Iterable) \
                or not all(isinstance(r, PartitionRange) for r in self.ranges):
            raise OffsetSpecError(
                f"OffsetRanges(ranges={shown(self.ranges)}): ranges must be a sequence of "
                "PartitionRange; to read the JSON or dict form, use OffsetRanges.from_json()."
            )
        ranges = tuple(sorted(self.ranges))
        keys = [(r.topic, r.partition) for r in ranges]
        if len(set(keys)) != len(keys):
            duplicates = sorted({k for k, n in Counter(keys).items() if n > 1})
            raise OffsetSpecError(f"ranges list partitions more than once: {shown(duplicates)}; "
                                  "give each (topic, partition) one range.")
        check_isolation_level(self.isolation_level)
        for name in ("starting", "stopping"):
            if not isinstance(getattr(self, name), str):
                raise OffsetSpecError(f"OffsetRanges {name}={shown(getattr(self, name))} must be "
                                      "a string: the text of the offset spec.")
        if self.group_id is not None and not isinstance(self.group_id, str):
            raise OffsetSpecError(f"OffsetRanges group_id={shown(self.group_id)} must be a "
                                  "string or None.")
        _check_resolved_at(self.resolved_at)
        object.__setattr__(self, "ranges", ranges)
        object.__setattr__(self, "lost", _checked_offsets(self.lost, "lost", _check_count))
        object.__setattr__(self, "truncated", _checked_offsets(self.truncated, "truncated",
                                                               _check_open_transaction))
        object.__setattr__(self, "lag", _checked_offsets(self.lag, "lag", _check_count))

    def __iter__(self) -> Iterator[PartitionRange]:
        return iter(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    def total(self) -> int:
        """Sum of ``stop - start``: an upper bound on the records in all ranges."""
        return sum(r.size for r in self.ranges)

    def total_lag(self) -> int:
        """Sum of ``lag``: offsets past the stops at resolution (0 when not recorded)."""
        return sum(self.lag.values())

    def is_empty(self) -> bool:
        """True when no range holds an offset."""
        return self.total() == 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``"version": 1``); what the resolve operator pushes to XCom."""
        return {
            "version": FORMAT_VERSION,
            "resolved_at": self.resolved_at.astimezone(UTC).isoformat(),
            "starting": self.starting,
            "stopping": self.stopping,
            "isolation_level": self.isolation_level,
            "group_id": self.group_id,
            "ranges": [
                {"topic": r.topic, "partition": r.partition, "start": r.start, "stop": r.stop}
                for r in self.ranges
            ],
            "lost": [
                {"topic": t, "partition": p, "offsets": n} for (t, p), n in self.lost.items()
            ],
            "truncated": [
                {"topic": t, "partition": p, "open_transaction_offset": o}
                for (t, p), o in self.truncated.items()
            ],
            "lag": [
                {"topic": t, "partition": p, "offsets": n} for (t, p), n in self.lag.items()
            ],
        }

    def to_json(self) -> str:
        """The :meth:`to_dict` form as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def identity(self) -> str:
        """What decides the records of this slice, as canonical JSON: the isolation level and
        each range's bounds, in order. Unlike :meth:`to_json` it leaves out when and how the
        ranges were resolved (``resolved_at``, the specs, ``group_id``, ``lag``, ``lost``,
        ``truncated``), so ranges resolved again to the same offsets have the same identity."""
        return json.dumps({"isolation_level": self.isolation_level,
                           "ranges": [[r.topic, r.partition, r.start, r.stop]
                                      for r in self.ranges]},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any] | OffsetRanges) -> OffsetRanges:
        """Parse and validate the :meth:`to_json` / :meth:`to_dict` form.

        Raises:
            OffsetSpecError: not JSON (or not UTF-8, or nested too deeply), an unknown
                version, a missing field, a wrong type, an offset, count or partition out of
                range, a partition listed twice, or start > stop.
        """
        if isinstance(data, OffsetRanges):
            return data
        if isinstance(data, str | bytes):
            data = load_json(data, "offset ranges", _AGAIN)
        try:
            return cls._from_document(data)
        except ConfigurationError as exc:  # OffsetSpecError, or a bad isolation level
            raise OffsetSpecError(f"{exc} {_AGAIN}") from None

    @classmethod
    def _from_document(cls, data: object) -> OffsetRanges:
        if not isinstance(data, Mapping):
            raise OffsetSpecError(
                f"offset ranges must be a JSON object, got {type(data).__name__}.")
        version = data.get("version")
        if type(version) is not int or version != FORMAT_VERSION:  # True == 1 in Python
            raise OffsetSpecError(
                f"offset ranges have version {shown(version)}; this package reads version "
                f"{FORMAT_VERSION}."
            )
        ranges = [PartitionRange(*_fields(item, f"offset ranges 'ranges' item {i}",
                                          ("topic", "partition", "start", "stop")))
                  for i, item in enumerate(_list_field(data, "ranges"))]
        if "resolved_at" not in data:
            raise OffsetSpecError("offset ranges have no field 'resolved_at'.")
        resolved_at = data["resolved_at"]
        try:
            moment = datetime.fromisoformat(resolved_at)
        except (TypeError, ValueError):
            raise OffsetSpecError(
                f"offset ranges field 'resolved_at'={shown(resolved_at)} is not an ISO-8601 "
                "time such as '2024-05-01T00:00:00+00:00'."
            ) from None
        return cls(
            tuple(ranges),
            starting=data.get("starting", ""),
            stopping=data.get("stopping", ""),
            isolation_level=data.get("isolation_level", "read_committed"),
            group_id=data.get("group_id"),
            resolved_at=moment,
            lost=_keyed_field(data, "lost", "offsets"),
            truncated=_keyed_field(data, "truncated", "open_transaction_offset"),
            lag=_keyed_field(data, "lag", "offsets"),
        )


def _check_resolved_at(resolved_at: object) -> None:
    if not isinstance(resolved_at, datetime) or resolved_at.utcoffset() is None:
        raise OffsetSpecError(f"OffsetRanges resolved_at={shown(resolved_at)} must be an aware "
                              "datetime, e.g. datetime.now(UTC).")
    try:
        resolved_at.astimezone(UTC)
    except OverflowError:
        raise OffsetSpecError(f"OffsetRanges resolved_at={resolved_at.isoformat()} is out of "
                              "range: it is after 9999-12-31 in UTC; pass a time such as "
                              "datetime.now(UTC).") from None


def _checked_offsets(values: object, name: str,
                     check_value: Callable[[object, str], int]) -> dict[Key, int]:
    """``lost`` or ``truncated``: ``{(topic, partition): int}``, sorted."""
    if not isinstance(values, Mapping):
        raise OffsetSpecError(f"OffsetRanges {name}={shown(values)} must be a mapping of "
                              "(topic, partition) to int.")
    checked: dict[Key, int] = {}
    for key, value in values.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise OffsetSpecError(f"OffsetRanges {name}: key {shown(key)} is not a "
                                  "(topic, partition) pair, e.g. ('orders', 0).")
        where = f"OffsetRanges {name} of {shown(key[0])}/{shown(key[1])}"
        topic = check_topic_name(key[0], where)
        checked[(topic, check_partition(key[1], where))] = check_value(value, where)
    return dict(sorted(checked.items()))


def _check_count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_OFFSET:
        raise OffsetSpecError(f"{where}: lost={shown(value)} is not a number of offsets; use a "
                              f"count from 0 to {MAX_OFFSET}.")
    return value


def _check_open_transaction(value: object, where: str) -> int:
    return check_offset(value, where, "open transaction offset")


def _list_field(data: Mapping[str, Any], name: str) -> list[Any]:
    value = data.get(name, [])
    if not isinstance(value, list):
        raise OffsetSpecError(f"offset ranges field {name!r} must be a list, got "
                              f"{type(value).__name__}.")
    return value


def _fields(item: object, where: str, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The values of ``names`` in one JSON list item, which must be an object having them."""
    if not isinstance(item, Mapping):
        raise OffsetSpecError(f"{where} must be an object with the fields {list(names)}, got "
                              f"{shown(item)}.")
    missing = [name for name in names if name not in item]
    if missing:
        raise OffsetSpecError(f"{where} has no field(s) {missing}; it needs {list(names)}.")
    return tuple(item[name] for name in names)


def _keyed_field(data: Mapping[str, Any], name: str, value_name: str) -> dict[Key, Any]:
    """A ``lost`` / ``truncated`` list as ``{(topic, partition): value}``; a partition listed
    twice is an error (one of the values would be dropped). :class:`OffsetRanges` checks the
    values."""
    result: dict[Key, Any] = {}
    for i, item in enumerate(_list_field(data, name)):
        where = f"offset ranges {name!r} item {i}"
        topic, partition, value = _fields(item, where, ("topic", "partition", value_name))
        key = (check_topic_name(topic, where), check_partition(partition, where))
        if key in result:
            raise OffsetSpecError(f"{where}: {topic}/{partition} is listed more than once.")
        result[key] = value
    return result
