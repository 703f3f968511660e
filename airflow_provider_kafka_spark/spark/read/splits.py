"""Plan resolved offset ranges into Spark tasks: the one place that decides how a read is cut.

The rule, by records (the driver knows offsets, not bytes), deterministic (the same ranges and
size give the same splits, in the same order, so a retry or a re-run of a pinned slice writes
the same files and object names):

1. **Cut** (:func:`cut_ranges`, as Spark's ``KafkaOffsetRangeCalculator``): a range of more than
   ``max_records_per_split`` offsets becomes ``ceil(size / max_records_per_split)`` near-equal
   contiguous pieces; the pieces of a range cover it exactly, so no offset is read twice and
   none is skipped. Empty ranges give no piece.
2. **Group** (:func:`plan_splits`): the pieces, in (topic, partition, start) order, fill
   :class:`Split` s of at most ``max_records_per_split`` offsets each, at most one piece of a
   partition per split. A split is one Spark task: one consumer assigned to all its
   partitions at once (one fetch request carries them all), one landed file.

``read_kafka``'s default size is ``ceil(total / parallelism)``, at least
:data:`MIN_RECORDS_PER_SPLIT`: about one task per core however many partitions the ranges
cover (1,000 partitions of 1,000 records on 2 cores: 2 tasks), and small reads in one task.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets.ranges import PartitionRange
from airflow_provider_kafka_spark.offsets.specs import MAX_OFFSET, shown

# Below this many offsets a split is not worth a Spark task of its own.
MIN_RECORDS_PER_SPLIT = 50_000


def default_max_records_per_split(total: int, parallelism: int) -> int:
    """A split size that gives every core work even when one huge partition holds all the data.

    ``ceil(total / parallelism)``, but never below :data:`MIN_RECORDS_PER_SPLIT`, so small
    reads are not cut into tasks that cost more to schedule than to run.
    """
    if parallelism < 1:
        raise ConfigurationError(f"parallelism={parallelism} must be >= 1; check the session's "
                                 "spark.default.parallelism.")
    return max(math.ceil(total / parallelism), MIN_RECORDS_PER_SPLIT)


def check_max_records_per_split(value: object) -> int | None:
    """``value`` if it is None or a positive int (not a bool) of at most :data:`MAX_OFFSET`.

    Raises:
        ConfigurationError: anything else.
    """
    if value is None or (not isinstance(value, bool) and isinstance(value, int)
                         and 1 <= value <= MAX_OFFSET):
        return value
    raise ConfigurationError(
        f"max_records_per_split={shown(value)} is not valid; pass a positive int or None "
        "(None: one split per range)."
    )


@dataclass(frozen=True)
class Split:
    """One Spark task of a read: contiguous ``[start, stop)`` ranges of distinct partitions,
    read in this order by one consumer."""

    ranges: tuple[PartitionRange, ...]

    @property
    def size(self) -> int:
        """The offsets the split covers."""
        return sum(r.size for r in self.ranges)

    def name(self) -> str:
        """A name for what the split writes, the same for the same ranges:
        ``<topic>-<partition>-<start>-<stop>`` of a split of one range,
        ``<first range's>-n<ranges>-<digest of all of them>`` of several."""
        first = self.ranges[0]
        stem = f"{first.topic}-{first.partition}-{first.start}-{first.stop}"
        if len(self.ranges) == 1:
            return stem
        text = ";".join(f"{r.topic}/{r.partition}/{r.start}/{r.stop}" for r in self.ranges)
        return f"{stem}-n{len(self.ranges)}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def cut_ranges(
    ranges: Iterable[PartitionRange], max_records_per_split: int | None = None
) -> list[PartitionRange]:
    """Cut each range into ``ceil(size / max_records_per_split)`` near-equal contiguous pieces.

    With ``max_records_per_split=None`` every non-empty range is one piece. The result is
    sorted by (topic, partition, start).

    Raises:
        ConfigurationError: ``max_records_per_split`` is not a positive int or None.
    """
    check_max_records_per_split(max_records_per_split)
    pieces: list[PartitionRange] = []
    for r in ranges:
        if r.size == 0:
            continue
        parts = 1 if max_records_per_split is None else math.ceil(r.size / max_records_per_split)
        bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
        pieces.extend(
            PartitionRange(r.topic, r.partition, lo, hi) for lo, hi in pairwise(bounds)
        )
    return sorted(pieces)


def plan_splits(
    ranges: Iterable[PartitionRange], max_records_per_split: int | None = None
) -> list[Split]:
    """The splits of ``ranges``: :func:`cut_ranges`, then the pieces grouped in order into
    splits of at most ``max_records_per_split`` offsets, no two pieces of one partition in a
    split (see the module's rule). With ``max_records_per_split=None`` every non-empty range
    is a split of its own.

    Raises:
        ConfigurationError: ``max_records_per_split`` is not a positive int or None.
    """
    pieces = cut_ranges(ranges, max_records_per_split)
    if max_records_per_split is None:
        return [Split((piece,)) for piece in pieces]
    splits: list[Split] = []
    group: list[PartitionRange] = []
    size = 0
    for piece in pieces:
        if group and (size + piece.size > max_records_per_split
                      or (group[-1].topic, group[-1].partition) == (piece.topic, piece.partition)):
            splits.append(Split(tuple(group)))
            group, size = [], 0
        group.append(piece)
        size += piece.size
    if group:
        splits.append(Split(tuple(group)))
    return splits
