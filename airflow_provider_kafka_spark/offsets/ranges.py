"""Resolved offset ranges: plain data that travels through XCom so a retry reads the same slice."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_kafka_spark.offsets.config import check_isolation_level
from airflow_provider_kafka_spark.offsets.errors import OffsetSpecError

FORMAT_VERSION = 1


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
        where = f"{self.topic!r}/{self.partition!r}"
        if not isinstance(self.topic, str) or not self.topic:
            raise OffsetSpecError(f"range {where}: topic must be a non-empty string.")
        for name in ("partition", "start", "stop"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OffsetSpecError(f"range {where}: {name}={value!r} must be a non-negative int.")
        if self.start > self.stop:
            raise OffsetSpecError(
                f"range {where}: start {self.start} is after stop {self.stop}; "
                "a range needs start <= stop."
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
    interval but are not in the range.
    """

    ranges: tuple[PartitionRange, ...]
    starting: str = ""
    stopping: str = ""
    isolation_level: str = "read_committed"
    group_id: str | None = None
    resolved_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    lost: Mapping[tuple[str, int], int] = field(default_factory=dict)
    truncated: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ranges = tuple(sorted(self.ranges))
        keys = [(r.topic, r.partition) for r in ranges]
        if len(set(keys)) != len(keys):
            duplicates = sorted({k for k, n in Counter(keys).items() if n > 1})
            raise OffsetSpecError(f"ranges list partitions more than once: {duplicates}.")
        check_isolation_level(self.isolation_level)
        if self.resolved_at.tzinfo is None:
            raise OffsetSpecError("resolved_at must be an aware datetime.")
        object.__setattr__(self, "ranges", ranges)
        object.__setattr__(self, "lost", dict(sorted(self.lost.items())))
        object.__setattr__(self, "truncated", dict(sorted(self.truncated.items())))

    def __iter__(self) -> Iterator[PartitionRange]:
        return iter(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    def total(self) -> int:
        """Sum of ``stop - start``: an upper bound on the records in all ranges."""
        return sum(r.size for r in self.ranges)

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
        }

    def to_json(self) -> str:
        """The :meth:`to_dict` form as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any] | OffsetRanges) -> OffsetRanges:
        """Parse and validate the :meth:`to_json` / :meth:`to_dict` form.

        Raises:
            OffsetSpecError: unknown version, missing field, wrong type, negative offset,
                or start > stop.
        """
        if isinstance(data, OffsetRanges):
            return data
        if isinstance(data, str | bytes):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise OffsetSpecError(f"offset ranges are not valid JSON: {exc}.") from None
        if not isinstance(data, Mapping):
            raise OffsetSpecError(
                f"offset ranges must be a JSON object, got {type(data).__name__}."
            )
        version = data.get("version")
        if version != FORMAT_VERSION:
            raise OffsetSpecError(
                f"offset ranges have version {version!r}; this package reads version "
                f"{FORMAT_VERSION}. Resolve the offsets again with this package's version."
            )
        try:
            ranges = [
                PartitionRange(item["topic"], item["partition"], item["start"], item["stop"])
                for item in _list_field(data, "ranges")
            ]
            lost = {(i["topic"], i["partition"]): i["offsets"] for i in _list_field(data, "lost")}
            truncated = {(i["topic"], i["partition"]): i["open_transaction_offset"]
                         for i in _list_field(data, "truncated")}
            resolved_at = datetime.fromisoformat(data["resolved_at"])
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, OffsetSpecError):
                raise
            raise OffsetSpecError(f"offset ranges are malformed: {exc!r}.") from None
        for name in ("starting", "stopping", "isolation_level"):
            if not isinstance(data.get(name, ""), str):
                raise OffsetSpecError(f"offset ranges field {name!r} must be a string.")
        group_id = data.get("group_id")
        if group_id is not None and not isinstance(group_id, str):
            raise OffsetSpecError("offset ranges field 'group_id' must be a string or null.")
        return cls(
            tuple(ranges),
            starting=data.get("starting", ""),
            stopping=data.get("stopping", ""),
            isolation_level=data.get("isolation_level", "read_committed"),
            group_id=group_id,
            resolved_at=resolved_at,
            lost=lost,
            truncated=truncated,
        )


def _list_field(data: Mapping[str, Any], name: str) -> list[Any]:
    value = data.get(name, [])
    if not isinstance(value, list):
        raise OffsetSpecError(f"offset ranges field {name!r} must be a list.")
    return value
