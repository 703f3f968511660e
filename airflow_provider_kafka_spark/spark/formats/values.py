"""One walk over nested Spark values, shared by the formats that map Python values to and from
Spark rows field by field (Avro, JSON Schema)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import types as T

Leaf = Callable[[Any, T.DataType], Any]


def convert(value: Any, dtype: T.DataType, leaf: Leaf) -> Any:
    """``value`` of Spark type ``dtype`` with ``leaf(value, type)`` applied to every value that
    is not a struct, array or map; structs (dicts), arrays (lists) and maps (dicts, or lists of
    key-value pairs as Arrow gives them) keep their shape. ``None`` stays ``None`` at every
    level."""
    if value is None:
        return None
    if isinstance(dtype, T.StructType):
        return {f.name: convert(value.get(f.name), f.dataType, leaf) for f in dtype.fields}
    if isinstance(dtype, T.ArrayType):
        return [convert(v, dtype.elementType, leaf) for v in value]
    if isinstance(dtype, T.MapType):
        items = value.items() if isinstance(value, dict) else value
        return {k: convert(v, dtype.valueType, leaf) for k, v in items}
    return leaf(value, dtype)
