"""Split resolved offset ranges into Spark input partitions.

One small job, as in Spark's ``KafkaOffsetRangeCalculator``: every split is a contiguous
``[start, stop)`` sub-range of one Kafka partition; the splits of a range cover it exactly,
so no offset is read twice and none is skipped. Empty ranges produce no split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
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


def plan_splits(
    ranges: Iterable[PartitionRange], max_records_per_split: int | None = None
) -> list[PartitionRange]:
    """Cut each range into ``ceil(size / max_records_per_split)`` near-equal contiguous splits.

    With ``max_records_per_split=None`` every non-empty range is one split. The result is
    sorted by (topic, partition, start).

    Raises:
        ConfigurationError: ``max_records_per_split`` is not a positive int or None.
    """
    check_max_records_per_split(max_records_per_split)
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
