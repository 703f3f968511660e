"""Iceberg's partition transforms over Arrow arrays, as the readers group rows into the files
of a partitioned Iceberg table (:class:`~airflow_provider_kafka_spark.spark.read.landing.
ParquetFolder`'s ``split_by``).

Each transform gives, per row, the partition value as the text Iceberg's
``Conversions.fromPartitionString`` reads for the transform's result type (what
``DataFiles.Builder.withPartitionValues`` takes), null for a null source value. The
definitions are the Iceberg table spec's ("Partition Transforms"), floored before the epoch:

=============  ====================================  ==========================================
transform      source types                          value (text)
=============  ====================================  ==========================================
``identity``   string, integers, boolean, date       the value (``true``/``false``; a date
                                                     ``YYYY-MM-DD``)
``year``       timestamp, date                       years from 1970 (``2026`` -> ``56``)
``month``      timestamp, date                       months from 1970-01
``day``        timestamp, date                       the date (the result type is ``date``)
``hour``       timestamp                             hours from 1970-01-01T00:00
``truncate[W]``  integers                            ``v - (v mod W)`` (mod floored: -1 ->
                                                     ``-W``)
=============  ====================================  ==========================================

A timestamp is taken at its UTC instant (one without a zone as it is written, as Iceberg's
``timestamp`` holds it). ``bucket[N]`` and ``truncate`` of strings are not given here: a table
partitioned by them is written by Spark's writer.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_kafka_spark.errors import ConfigurationError

TIME_TRANSFORMS = ("year", "month", "day", "hour")
_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 24 * _MICROS_PER_HOUR
_TRUNCATE = re.compile(r"truncate\[([1-9][0-9]{0,9})\]")


def is_transform(text: object) -> bool:
    """Whether ``text`` names a transform :func:`partition_values` gives."""
    return isinstance(text, str) and (text in ("identity", *TIME_TRANSFORMS)
                                      or _TRUNCATE.fullmatch(text) is not None)


def partition_values(values: pa.Array, transform: str) -> pa.Array:
    """The partition value text of each of ``values`` by Iceberg's ``transform`` (see the
    module's table); a string array, null where the value is null.

    Raises:
        ConfigurationError: a transform not in the table, or a source type it does not take.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kind = values.type
    if transform == "identity":
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return values.cast(pa.string())
        if pa.types.is_integer(kind) or pa.types.is_date32(kind):
            return values.cast(pa.string())
        if pa.types.is_boolean(kind):
            return pc.if_else(values, "true", "false")
    elif transform in TIME_TRANSFORMS and (pa.types.is_timestamp(kind)
                                           or pa.types.is_date32(kind)):
        if pa.types.is_date32(kind):
            if transform == "hour":
                raise _refused(transform, kind)
            days = values.cast(pa.int32())
        else:
            micros = values.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
            if transform == "hour":
                return _ints(micros, lambda v: v // _MICROS_PER_HOUR)
            days = _ints(micros, lambda v: v // _MICROS_PER_DAY, pa.int32())
        dates = days.cast(pa.date32())
        if transform == "day":
            return dates.cast(pa.string())
        years = pc.subtract(pc.year(dates), 1970)
        if transform == "year":
            return years.cast(pa.string())
        return pc.add(pc.multiply(years, 12), pc.subtract(pc.month(dates), 1)).cast(pa.string())
    elif (found := _TRUNCATE.fullmatch(transform)) and pa.types.is_integer(kind):
        width = int(found.group(1))
        return _ints(values.cast(pa.int64()), lambda v: v - np.mod(v, width))
    raise _refused(transform, kind)


def _ints(values: pa.Array, apply: object, as_type: pa.DataType | None = None) -> pa.Array:
    """``apply`` (numpy, on int64) of the non-null ``values``; a string array (or ``as_type``),
    null where ``values`` are."""
    filled = pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    out = pa.array(apply(filled), mask=values.is_null().to_numpy(zero_copy_only=False))  # type: ignore[operator]
    return out.cast(as_type) if as_type is not None else out.cast(pa.string())


def _refused(transform: str, kind: pa.DataType) -> ConfigurationError:
    return ConfigurationError(
        f"the partition transform {transform!r} of a {kind} column is not one the readers "
        "compute (identity of strings, integers, booleans and dates; year, month, day of "
        "timestamps and dates; hour of timestamps; truncate[W] of integers); such a table is "
        "written by Spark's writer.")
