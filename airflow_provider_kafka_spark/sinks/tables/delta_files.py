"""The readers' Parquet files as delta-rs adds them to a Delta table (:class:`DeltaSink`'s
commit of a landed run): which columns Delta keeps statistics for, and Delta's ``stats`` JSON
from a file's footer (the one its reader reported)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.s3 import S3Settings

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

STATS_TYPES = ("string", "integer", "long", "timestamp")
"""The types of the readers' columns whose min and max Delta collects (not binary, nor the
nested ``headers``)."""


@dataclass(frozen=True)
class DeltaTarget:
    """Where and how delta-rs commits a run's landed files (found by ``landing_folder``)."""

    root: str  # the table's folder as the sink names its files
    uri: str  # the same for delta-rs (a local path, or s3://)
    s3: S3Settings | None  # the bucket's settings, for a table on S3
    configuration: Mapping[str, str]
    null_counted: frozenset[str]  # the columns whose nullCount the stats hold
    bounded: frozenset[str]  # ... and whose minValues/maxValues
    partition_columns: tuple[str, ...] = ()  # the table's, in its order


def indexed_columns(schema: StructType, configuration: Mapping[str, str]) -> frozenset[str] | str:
    """The top-level columns whose statistics Delta collects: those of
    ``delta.dataSkippingStatsColumns``, else the first ``delta.dataSkippingNumIndexedCols``
    (default 32; -1: all) leaf columns (a struct's fields count one each)."""
    from pyspark.sql.types import StructType

    named = configuration.get("delta.dataSkippingStatsColumns")
    if named is not None:
        return frozenset(n.strip().strip("`") for n in named.split(",") if n.strip())
    text = configuration.get("delta.dataSkippingNumIndexedCols", "32")
    try:
        count = int(text)
    except ValueError:
        return f"its delta.dataSkippingNumIndexedCols {text!r} is not a whole number"

    def leaves(kind: Any) -> int:
        return sum(leaves(f.dataType) for f in kind.fields) if isinstance(kind, StructType) \
            else 1

    indexed, seen = set(), 0
    for f in schema.fields:
        if count >= 0 and seen >= count:
            break
        if not isinstance(f.dataType, StructType):
            indexed.add(f.name)
        seen += leaves(f.dataType)
    return frozenset(indexed)


def delta_stats(footer: Any, null_counted: frozenset[str], bounded: frozenset[str]) -> str:
    """Delta's ``stats`` JSON of a Parquet file from its footer (pyarrow's ``FileMetaData``):
    ``numRecords``; ``nullCount`` of the top-level columns ``null_counted``, ``minValues`` and
    ``maxValues`` of ``bounded`` (timestamps as Delta writes them, ``...T12:00:00.123Z``: the
    min truncated to milliseconds, the max rounded up). A column some row group has no
    statistics for is left out (Delta then reads the file for any filter on it)."""
    names = [footer.schema.column(i).path for i in range(footer.num_columns)]
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    unknown: set[str] = set()
    for group in range(footer.num_row_groups):
        row_group = footer.row_group(group)
        for i, name in enumerate(names):
            if name not in null_counted:  # nested columns' paths hold a dot: never counted
                continue
            chunk = row_group.column(i)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count:
                unknown.add(name)
                continue
            nulls[name] = nulls.get(name, 0) + int(stats.null_count)
            if name not in bounded or stats.null_count == chunk.num_values:
                continue  # only nulls here: no bounds to take
            if not stats.has_min_max:
                unknown.add(name)
                continue
            low[name] = stats.min if name not in low else min(low[name], stats.min)
            high[name] = stats.max if name not in high else max(high[name], stats.max)
    order = {name: i for i, name in enumerate(names)}

    def shown(values: dict[str, Any], up: bool) -> dict[str, Any]:
        return {k: _stat_value(values[k], up) for k in sorted(values, key=order.__getitem__)
                if k not in unknown}

    return json.dumps({"numRecords": footer.num_rows, "minValues": shown(low, False),
                       "maxValues": shown(high, True),
                       "nullCount": {k: v for k, v in nulls.items() if k not in unknown}},
                      separators=(",", ":"))


def _stat_value(value: Any, up: bool) -> Any:
    """A statistic as Delta's JSON holds it: a timestamp in UTC to the millisecond (``up``:
    rounded up, else truncated), anything else as it is."""
    if not isinstance(value, datetime):
        return value
    value = (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    extra = value.microsecond % 1000
    if up and extra:
        value += timedelta(microseconds=1000 - extra)
    return f"{value:%Y-%m-%dT%H:%M:%S}.{value.microsecond // 1000:03d}Z"
