"""A :class:`~airflow_provider_kafka_spark.shaping.Shape` applied to Arrow batches of the records
read (and decoded): :func:`shape_batch`, which the readers run on their batches when they land
the records, and :func:`shape_frame`, the same function over a DataFrame (one ``mapInArrow``
pass), so that the readers' files and Spark's writer land the same rows.

Partition values are written into folder names as Spark and Hive write them
(:func:`partition_path`): ``name=value``, special characters escaped as ``%XX``, a null as
``__HIVE_DEFAULT_PARTITION__``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.shaping import Derived, Shape, parse_column
from airflow_provider_kafka_spark.spark.schema import utc_arrow_schema

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The folder name of a null partition value (Spark's and Hive's)."""
_FORMATS = {"year": "%Y", "month": "%Y-%m", "day": "%Y-%m-%d", "hour": "%Y-%m-%d-%H"}
# The characters Spark escapes in a partition folder's name (ExternalCatalogUtils).
_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | frozenset(chr(c) for c in range(0x20))


def shape_batch(batch: pa.RecordBatch, shape: Shape) -> pa.RecordBatch:
    """The columns of ``shape`` of ``batch`` (the records read: Spark's Kafka columns, ``key``
    and ``value`` possibly decoded structs).

    Raises:
        ConfigurationError: a column of the shape that ``batch`` lacks, a field of a column
            that is not a struct, or a derived column's source of a type it cannot take.
    """
    names: list[str] = []
    arrays: list[pa.Array] = []
    for column in shape.columns:
        source, name = parse_column(column)  # type: ignore[misc]
        if source.endswith(".*"):
            struct = _column(batch, source[:-2])
            for index, child in enumerate(struct.type):
                names.append(child.name)
                arrays.append(pc.struct_field(struct, [index]))
        else:
            names.append(name)
            arrays.append(_value(batch, source))
    for name, derived in shape.derived.items():
        names.append(name)
        arrays.append(derive(_value(batch, derived.source.strip()), derived, name))
    return pa.RecordBatch.from_arrays(arrays, names=names)


def derive(values: pa.Array, derived: Derived, name: str) -> pa.Array:
    """``derived`` of ``values``: the text of the UTC year, month, day or hour of a timestamp
    (or of an integer since the epoch in ``derived.unit``), or the values themselves."""
    if derived.transform == "identity":
        return values
    kind = values.type
    if derived.unit is not None:
        if not pa.types.is_integer(kind):
            raise _bad(derived, name, kind, "an integer (unit=...)")
        values = pc.cast(values, pa.int64()).cast(pa.timestamp(derived.unit, tz="UTC"))
    elif pa.types.is_timestamp(kind):  # the same instant in UTC (one without a zone as UTC)
        values = values.cast(pa.timestamp(kind.unit, tz="UTC"))
    else:
        raise _bad(derived, name, kind, "a timestamp, or an integer with unit=")
    # Each distinct hour (day...) formatted once: the values floored to it, encoded, the few
    # distinct ones formatted, taken back per row (strftime per row cost ~1 us a record).
    floored = pc.floor_temporal(values, unit=derived.transform)
    encoded = pc.dictionary_encode(floored)
    texts = pc.strftime(encoded.dictionary, format=_FORMATS[derived.transform], locale="C")
    return texts.take(encoded.indices)


def shaped_schema(schema: pa.Schema, shape: Shape) -> pa.Schema:
    """The schema :func:`shape_batch` gives batches of ``schema``."""
    return shape_batch(pa.RecordBatch.from_pylist([], schema=schema), shape).schema


def shape_frame(df: Any, shape: Shape) -> Any:
    """``df`` (the records read, decoded or not) with :func:`shape_batch` applied, in one
    ``mapInArrow`` pass: the rows the readers would land."""
    from pyspark.sql.pandas.types import from_arrow_schema

    out = shaped_schema(utc_arrow_schema(df.schema), shape)

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield shape_batch(batch, shape)

    return df.mapInArrow(apply, from_arrow_schema(out))


@contextlib.contextmanager
def checked_shape(owner: str, shape: Shape) -> Iterator[None]:
    """Name ``owner`` and the shape in a :class:`ConfigurationError` raised inside (the shape
    checked against the records' columns before anything is read)."""
    try:
        yield
    except ConfigurationError as exc:
        raise ConfigurationError(f"{owner}: shape={shape.to_json()!r}: {exc} Nothing was "
                                 "read.") from None


def partition_path(names: list[str], values: list[Any]) -> str:
    """The folder of a partition, ``a=1/b=x``, as Spark writes it."""
    return "/".join(f"{_escaped(n)}={NULL_PARTITION if v is None else _escaped(_text(v))}"
                    for n, v in zip(names, values, strict=True))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _escaped(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    if name not in batch.schema.names:
        raise ConfigurationError(f"the shape's column {name!r} is not a column of the records "
                                 f"read ({', '.join(batch.schema.names)}); name one of them.")
    return batch.column(name)


def _value(batch: pa.RecordBatch, source: str) -> pa.Array:
    parent, _, child = source.partition(".")
    values = _column(batch, parent)
    if not child:
        return values
    if not pa.types.is_struct(values.type):
        raise ConfigurationError(f"the shape's column {source!r} takes a field of {parent!r}, "
                                 f"which is {values.type}, not decoded into fields; decode it "
                                 "(Decoding(value_format=...)) or name the column itself.")
    if values.type.get_field_index(child) < 0:
        raise ConfigurationError(f"the shape's column {source!r}: {parent!r} has no field "
                                 f"{child!r} (it has {', '.join(f.name for f in values.type)}).")
    return pc.struct_field(values, [values.type.get_field_index(child)])


def _bad(derived: Derived, name: str, kind: pa.DataType, expected: str) -> ConfigurationError:
    return ConfigurationError(f"the shape's derived column {name!r} takes the {derived.transform}"
                              f" of {derived.source!r}, which is {kind}; it needs {expected}.")
