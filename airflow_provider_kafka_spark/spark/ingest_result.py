"""What an :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` returns: its statistics,
per partition and in total (:class:`IngestResult`; ``to_dict()`` is the ingest task's XCom and
the body of its manifest)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges

if TYPE_CHECKING:
    from airflow_provider_kafka_spark.spark.read.summary import PartitionSummary

__all__ = ["DecodeCounts", "IngestResult", "PartitionStats"]


@dataclass(frozen=True)
class DecodeCounts:
    """The records ``decode`` decoded, and the undecodable ones ``on_corrupt`` skipped or
    dead-lettered."""

    decoded: int
    skipped: int
    dead_lettered: int

    def to_dict(self) -> dict[str, int]:
        """``{"decoded", "skipped", "dead_lettered"}``."""
        return asdict(self)


@dataclass(frozen=True)
class PartitionStats:
    """What an ingest read of one range ``[start, stop)`` returned.

    ``bytes``: the keys' and values' size; ``lost``: offsets skipped because Kafka had deleted
    them (``on_data_loss="skip"``: at resolution, before and during the read); ``lag``: the
    partition's end at resolution minus ``stop`` (None for ranges resolved before lag was
    recorded). The offsets (inclusive) and timestamps (UTC) are None when nothing was read.
    """

    topic: str
    partition: int
    start: int
    stop: int
    records: int = 0
    bytes: int | None = 0
    lost: int = 0
    lag: int | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp: datetime | None = None
    max_timestamp: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: timestamps as ISO-8601 UTC strings."""
        entry = asdict(self)
        for name in ("min_timestamp", "max_timestamp"):
            entry[name] = _iso(entry[name])
        return entry


@dataclass(frozen=True)
class IngestResult:
    """The statistics of one :func:`ingest`; :meth:`to_dict` is the ingest task's XCom and the
    body of the manifest.

    ``records``, ``bytes`` and ``lost`` are the sums over ``partitions`` (one per range, in
    the ranges' order); ``lag`` the ranges' total lag; ``min_timestamp``/``max_timestamp``
    the records' extremes; ``output`` the sink's description of what it wrote (``sink.write``;
    ``sink.describe()`` when nothing was read); ``seconds`` the time from the start of the
    ingest to the end of the write, and the throughputs over it; ``decode`` the counts of
    decoding (None without ``decode``).
    """

    records: int
    bytes: int
    lost: int
    lag: int
    partitions: tuple[PartitionStats, ...]
    min_timestamp: datetime | None
    max_timestamp: datetime | None
    output: Mapping[str, Any]
    seconds: float
    records_per_second: float
    bytes_per_second: float
    decode: DecodeCounts | None = None

    @classmethod
    def of(cls, ranges: OffsetRanges, output: Mapping[str, Any], *,
           summaries: Sequence[PartitionSummary] = (),
           lost: Mapping[tuple[str, int], int] | None = None, seconds: float = 0.0,
           decode: DecodeCounts | None = None) -> IngestResult:
        """The result of reading ``ranges`` into ``output``: the per-partition ``summaries``
        (``summarize``; partitions without records may be absent) and ``lost`` counts
        (default: the ranges' own, those lost at resolution) in ``seconds``."""
        lost = ranges.lost if lost is None else lost
        by_key = {(s.topic, s.partition): s for s in summaries}
        partitions = []
        for r in ranges:
            stats = PartitionStats(r.topic, r.partition, r.start, r.stop,
                                   lost=lost.get((r.topic, r.partition), 0),
                                   lag=ranges.lag.get((r.topic, r.partition)))
            read = by_key.get((r.topic, r.partition))
            if read is not None:
                stats = PartitionStats(
                    r.topic, r.partition, r.start, r.stop, read.records, read.bytes,
                    stats.lost, stats.lag, read.first_offset, read.last_offset,
                    read.min_timestamp, read.max_timestamp)
            partitions.append(stats)
        records = sum(p.records for p in partitions)
        size = sum(p.bytes or 0 for p in partitions)
        timestamps = [t for p in partitions for t in (p.min_timestamp, p.max_timestamp) if t]
        return cls(
            records=records, bytes=size, lost=sum(lost.values()), lag=ranges.total_lag(),
            partitions=tuple(partitions), min_timestamp=min(timestamps, default=None),
            max_timestamp=max(timestamps, default=None), output=output,
            seconds=round(seconds, 3),
            records_per_second=round(records / seconds, 1) if seconds > 0 else 0.0,
            bytes_per_second=round(size / seconds, 1) if seconds > 0 else 0.0,
            decode=decode)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"records", "bytes", "lost", "lag", "partitions": [...],
        "min_timestamp", "max_timestamp", "output": {...}, "seconds", "records_per_second",
        "bytes_per_second"}`` and ``"decode": {...}`` when decoding; timestamps as ISO-8601
        UTC strings."""
        result: dict[str, Any] = {
            "records": self.records,
            "bytes": self.bytes,
            "lost": self.lost,
            "lag": self.lag,
            "partitions": [p.to_dict() for p in self.partitions],
            "min_timestamp": _iso(self.min_timestamp),
            "max_timestamp": _iso(self.max_timestamp),
            "output": copy.deepcopy(dict(self.output)),
            "seconds": self.seconds,
            "records_per_second": self.records_per_second,
            "bytes_per_second": self.bytes_per_second,
        }
        if self.decode is not None:
            result["decode"] = self.decode.to_dict()
        return result


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat()
