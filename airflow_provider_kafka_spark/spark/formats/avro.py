"""Avro: the reader schema's Spark type, and Spark rows to Avro schemas and back.

Mapping (Avro -> Spark, as Spark's own ``from_avro``):

================================  =========================================
Avro                              Spark
================================  =========================================
boolean, int, long                boolean, int, long
float, double                     float, double
bytes, fixed                      binary
string, enum, ``uuid``            string (an enum decodes to its symbol)
record                            struct (nested records nest)
array, map                        array, map<string, ...>
``["null", T]`` (either order)    T, nullable
``decimal(p, s)``                 decimal(p, s)
``date``                          date
``timestamp-millis/micros``       timestamp (UTC)
``local-timestamp-millis/micros`` timestamp_ntz
``time-millis`` / ``time-micros`` int (ms) / long (µs) since midnight
================================  =========================================

A union of two or more non-null types has no Spark counterpart: it is refused with a
:class:`DecodeError` naming the field. Spark -> Avro (for ``write_kafka``'s derived schemas) is
the inverse: a nullable column becomes ``["null", T]`` with ``"default": null``.
"""

from __future__ import annotations

import datetime as dt
import json
from functools import partial
from typing import Any

from pyspark.sql import types as T

from airflow_provider_kafka_spark.errors import DecodeError
from airflow_provider_kafka_spark.spark.formats.values import convert

_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
    "double": T.DoubleType(), "bytes": T.BinaryType(), "string": T.StringType(),
}
_LOGICAL: dict[str, T.DataType] = {
    "date": T.DateType(), "timestamp-millis": T.TimestampType(), "timestamp-micros": T.TimestampType(),
    "local-timestamp-millis": T.TimestampNTZType(), "local-timestamp-micros": T.TimestampNTZType(),
    "time-millis": T.IntegerType(), "time-micros": T.LongType(), "uuid": T.StringType(),
}


def spark_type(schema: str | dict[str, Any] | list[Any]) -> T.DataType:
    """The Spark type of an Avro schema (JSON text or parsed)."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return _spark(parsed, {}, "")


def _spark(schema: Any, named: dict[str, T.DataType], path: str) -> T.DataType:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in named:
            return named[schema]
        raise DecodeError(f"the Avro schema refers to the unknown type {schema!r} at "
                          f"{path or 'its top'}; register the named type before using it.")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise DecodeError(
                f"the Avro union {json.dumps(schema)} at {path or 'the top'} has "
                f"{len(branches)} non-null branches; Spark columns have one type, so only "
                "[\"null\", T] unions are supported. Split the field, or decode it as bytes.")
        return _spark(branches[0], named, path)
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return T.DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind == "record":
        record = T.StructType()
        # A record may refer to itself only through a name; Spark types cannot recurse.
        named[_full_name(schema)] = named[schema["name"]] = record
        for f in schema["fields"]:
            record.add(T.StructField(f["name"], _spark(f["type"], named, f"{path}.{f['name']}"
                                                     .lstrip(".")), _nullable(f["type"])))
        return record
    if kind == "enum":
        named[_full_name(schema)] = named[schema["name"]] = T.StringType()
        return T.StringType()
    if kind == "fixed":
        named[_full_name(schema)] = named[schema["name"]] = T.BinaryType()
        return T.BinaryType()
    if kind == "array":
        items = schema["items"]
        return T.ArrayType(_spark(items, named, f"{path}[]"), _nullable(items))
    if kind == "map":
        values = schema["values"]
        return T.MapType(T.StringType(), _spark(values, named, f"{path}{{}}"), _nullable(values))
    return _spark(kind, named, path)


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema or schema == "null"


def _full_name(schema: dict[str, Any]) -> str:
    name = str(schema["name"])
    return f"{schema['namespace']}.{name}" if schema.get("namespace") and "." not in name \
        else name


def schema_from_spark(struct: T.StructType, name: str, namespace: str = "") -> str:
    """An Avro record schema (JSON text) for rows of ``struct``, named ``name``."""
    return json.dumps(_record(struct, name, namespace, set()))


def _record(struct: T.StructType, name: str, namespace: str, names: set[str]) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "record", "name": _unique(name, names), "fields": []}
    if namespace:
        record["namespace"] = namespace
    for f in struct.fields:
        avro = avro_type(f.dataType, f"{record['name']}_{f.name}", names)
        field: dict[str, Any] = {"name": f.name, "type": avro}
        if f.nullable:
            field = {"name": f.name, "type": ["null", avro], "default": None}
        record["fields"].append(field)
    return record


def _unique(name: str, names: set[str]) -> str:
    candidate, n = name, 1
    while candidate in names:
        n += 1
        candidate = f"{name}{n}"
    names.add(candidate)
    return candidate


_AVRO_TYPES: tuple[tuple[type[T.DataType], Any], ...] = (
    (T.BooleanType, "boolean"), (T.ByteType, "int"), (T.ShortType, "int"), (T.IntegerType, "int"),
    (T.LongType, "long"), (T.FloatType, "float"), (T.DoubleType, "double"),
    (T.BinaryType, "bytes"), (T.StringType, "string"),
    (T.DateType, {"type": "int", "logicalType": "date"}),
    (T.TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
    (T.TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
)
"""The Avro schema of each Spark leaf type (decimals carry their precision and scale)."""


def avro_type(dtype: T.DataType, name: str, names: set[str]) -> Any:
    """The Avro schema of a Spark type; records are named after ``name``, unique in ``names``."""
    if isinstance(dtype, T.StructType):
        return _record(dtype, name, "", names)
    if isinstance(dtype, T.ArrayType):
        items = avro_type(dtype.elementType, name, names)
        return {"type": "array", "items": ["null", items] if dtype.containsNull else items}
    if isinstance(dtype, T.MapType):
        if not isinstance(dtype.keyType, T.StringType):
            raise DecodeError(f"the column {name} is a map with {dtype.keyType.simpleString()} "
                              "keys; Avro maps have string keys. Cast the keys to string.")
        values = avro_type(dtype.valueType, name, names)
        return {"type": "map",
                "values": ["null", values] if dtype.valueContainsNull else values}
    if isinstance(dtype, T.DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": dtype.precision,
                "scale": dtype.scale}
    for cls, avro in _AVRO_TYPES:
        if isinstance(dtype, cls):
            return dict(avro) if isinstance(avro, dict) else avro
    raise DecodeError(f"the column {name} has the type {dtype.simpleString()}, which has no "
                      "Avro counterpart here; cast it (e.g. to string) or pass the schema.")


def _to_spark_leaf(value: Any, dtype: T.DataType) -> Any:
    if isinstance(value, dt.time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 \
            + value.microsecond
        return micros // 1000 if isinstance(dtype, T.IntegerType) else micros
    if isinstance(dtype, T.StringType) and not isinstance(value, str):
        return str(value)  # uuid
    return value


to_spark = partial(convert, leaf=_to_spark_leaf)
"""A value fastavro decoded, as a Python value Arrow takes for ``dtype``."""


def _from_spark_leaf(value: Any, dtype: T.DataType) -> Any:
    if isinstance(dtype, T.TimestampType) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


from_spark = partial(convert, leaf=_from_spark_leaf)
"""A Spark row value (from Arrow's ``to_pylist``) as fastavro encodes it for ``dtype``."""
