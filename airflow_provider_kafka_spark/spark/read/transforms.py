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
``bucket[N]``  integers, date, timestamp, string     ``(murmur3_x86_32(v) & 0x7fffffff) mod N``
                                                     of the value's bytes as the spec says (an
                                                     integer, a date's days, a timestamp's
                                                     microseconds as an 8-byte little-endian
                                                     long; a string's UTF-8)
=============  ====================================  ==========================================

A timestamp is taken at its UTC instant (one without a zone as it is written, as Iceberg's
``timestamp`` holds it). ``truncate`` of strings is not given here: a table partitioned by it
is written by Spark's writer.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_kafka_spark.errors import ConfigurationError

TIME_TRANSFORMS = ("year", "month", "day", "hour")
_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 24 * _MICROS_PER_HOUR
_TRUNCATE = re.compile(r"truncate\[([1-9][0-9]{0,9})\]")
_BUCKET = re.compile(r"bucket\[([1-9][0-9]{0,9})\]")
_MASK = 0xFFFFFFFF


def is_transform(text: object) -> bool:
    """Whether ``text`` names a transform :func:`partition_values` gives."""
    return isinstance(text, str) and (text in ("identity", *TIME_TRANSFORMS)
                                      or _TRUNCATE.fullmatch(text) is not None
                                      or _BUCKET.fullmatch(text) is not None)


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
    elif found := _BUCKET.fullmatch(transform):
        buckets = int(found.group(1))
        if pa.types.is_integer(kind) or pa.types.is_date32(kind) or pa.types.is_timestamp(kind):
            longs = (values.cast(pa.timestamp("us", tz=kind.tz)) if pa.types.is_timestamp(kind)
                     else values.cast(pa.int32()) if pa.types.is_date32(kind)
                     else values).cast(pa.int64())
            return _ints(longs, lambda v: (_murmur3_longs(v) & 0x7FFFFFFF) % buckets)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            encoded = pc.dictionary_encode(values.cast(pa.string()))
            hashed = [(_murmur3_bytes(t.encode()) & 0x7FFFFFFF) % buckets
                      for t in encoded.dictionary.to_pylist()]
            codes = encoded.indices
            return pa.array(hashed, pa.int64()).take(codes).cast(pa.string())
    raise _refused(transform, kind)


def _ints(values: pa.Array, apply: object, as_type: pa.DataType | None = None) -> pa.Array:
    """``apply`` (numpy, on int64) of the non-null ``values``; a string array (or ``as_type``),
    null where ``values`` are."""
    filled = pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    out = pa.array(apply(filled), mask=values.is_null().to_numpy(zero_copy_only=False))  # type: ignore[operator]
    return out.cast(as_type) if as_type is not None else out.cast(pa.string())


def _mix(h: Any, k: Any) -> Any:
    """One 4-byte block of murmur3_x86_32 (uint64 arrays holding 32-bit values)."""
    k = (k * 0xCC9E2D51) & _MASK
    k = ((k << 15) | (k >> 17)) & _MASK
    k = (k * 0x1B873593) & _MASK
    h = h ^ k
    h = ((h << 13) | (h >> 19)) & _MASK
    return (h * 5 + 0xE6546B64) & _MASK


def _final(h: Any, length: int) -> Any:
    h = h ^ length
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK
    return h ^ (h >> 16)


def _murmur3_longs(values: Any) -> Any:
    """murmur3_x86_32 (seed 0) of each int64 as 8 little-endian bytes, as a signed 32-bit
    value in an int64 array (Guava's ``hashLong``, which Iceberg's bucket uses)."""
    bits = values.astype(np.int64).view(np.uint64)
    h = np.zeros(len(bits), np.uint64)
    h = _mix(h, bits & _MASK)
    h = _final(_mix(h, bits >> 32), 8)
    return np.where(h >= 1 << 31, h.astype(np.int64) - (1 << 32), h.astype(np.int64))


def _murmur3_bytes(data: bytes) -> int:
    """murmur3_x86_32 (seed 0) of ``data``, a signed 32-bit value (Guava's ``hashBytes``)."""
    def scrambled(k: int) -> int:
        k = (k * 0xCC9E2D51) & _MASK
        k = ((k << 15) | (k >> 17)) & _MASK
        return (k * 0x1B873593) & _MASK

    h = 0
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        h ^= scrambled(int.from_bytes(data[i:i + 4], "little"))
        h = ((h << 13) | (h >> 19)) & _MASK
        h = (h * 5 + 0xE6546B64) & _MASK
    if whole < len(data):
        h ^= scrambled(int.from_bytes(data[whole:], "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def _refused(transform: str, kind: pa.DataType) -> ConfigurationError:
    return ConfigurationError(
        f"the partition transform {transform!r} of a {kind} column is not one the readers "
        "compute (identity of strings, integers, booleans and dates; year, month, day of "
        "timestamps and dates; hour of timestamps; truncate[W] of integers; bucket[N] of "
        "integers, dates, timestamps and strings); such a table is "
        "written by Spark's writer.")
