"""Split resolved offset ranges into Spark input partitions.

One small job, as in Spark's ``KafkaOffsetRangeCalculator``: every split is a contiguous
``[start, stop)`` sub-range of one Kafka partition; the splits of a range cover it exactly,
so no offset is read twice and none is skipped. Empty ranges produce no split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import pairwise

from airflow_provider_kafka_spark.offsets.errors import OffsetSpecError
from airflow_provider_kafka_spark.offsets.ranges import PartitionRange

# Below this many offsets a split is not worth a Spark task of its own.
MIN_RECORDS_PER_SPLIT = 50_000


def default_max_records_per_split(total: int, parallelism: int) -> int:
    """A split size that gives every core work even when one huge partition holds all the data.

    ``ceil(total / parallelism)``, but never below :data:`MIN_RECORDS_PER_SPLIT`, so small
    reads are not cut into tasks that cost more to schedule than to run.
    """
    if parallelism < 1:
        raise OffsetSpecError(f"parallelism={parallelism} must be >= 1.")
    return max(math.ceil(total / parallelism), MIN_RECORDS_PER_SPLIT)


def plan_splits(
    ranges: Iterable[PartitionRange], max_records_per_split: int | None = None
) -> list[PartitionRange]:
    """Cut each range into ``ceil(size / max_records_per_split)`` near-equal contiguous splits.

    With ``max_records_per_split=None`` every non-empty range is one split. The result is
    sorted by (topic, partition, start).

    Raises:
        OffsetSpecError: ``max_records_per_split`` is not a positive int.
    """
    if max_records_per_split is not None and (
        isinstance(max_records_per_split, bool)
        or not isinstance(max_records_per_split, int)
        or max_records_per_split < 1
    ):
        raise OffsetSpecError(
            f"max_records_per_split={max_records_per_split!r} must be a positive int or None."
        )
    splits: list[PartitionRange] = []
    for r in ranges:
        if r.size == 0:
            continue
        parts = 1 if max_records_per_split is None else math.ceil(r.size / max_records_per_split)
        bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
        splits.extend(
            PartitionRange(r.topic, r.partition, lo, hi) for lo, hi in pairwise(bounds)
        )
    return sorted(splits)
