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
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_provider_kafka_spark.errors import DecodeError

_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "bytes": BinaryType(), "string": StringType(),
}
_LOGICAL: dict[str, DataType] = {
    "date": DateType(), "timestamp-millis": TimestampType(), "timestamp-micros": TimestampType(),
    "local-timestamp-millis": TimestampNTZType(), "local-timestamp-micros": TimestampNTZType(),
    "time-millis": IntegerType(), "time-micros": LongType(), "uuid": StringType(),
}


def spark_type(schema: str | dict[str, Any] | list[Any]) -> DataType:
    """The Spark type of an Avro schema (JSON text or parsed)."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return _spark(parsed, {}, "")


def _spark(schema: Any, named: dict[str, DataType], path: str) -> DataType:
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
        return DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind == "record":
        record = StructType()
        # A record may refer to itself only through a name; Spark types cannot recurse.
        named[_full_name(schema)] = named[schema["name"]] = record
        for f in schema["fields"]:
            record.add(StructField(f["name"], _spark(f["type"], named, f"{path}.{f['name']}"
                                                     .lstrip(".")), _nullable(f["type"])))
        return record
    if kind == "enum":
        named[_full_name(schema)] = named[schema["name"]] = StringType()
        return StringType()
    if kind == "fixed":
        named[_full_name(schema)] = named[schema["name"]] = BinaryType()
        return BinaryType()
    if kind == "array":
        items = schema["items"]
        return ArrayType(_spark(items, named, f"{path}[]"), _nullable(items))
    if kind == "map":
        values = schema["values"]
        return MapType(StringType(), _spark(values, named, f"{path}{{}}"), _nullable(values))
    return _spark(kind, named, path)


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema or schema == "null"


def _full_name(schema: dict[str, Any]) -> str:
    name = str(schema["name"])
    return f"{schema['namespace']}.{name}" if schema.get("namespace") and "." not in name \
        else name


def schema_from_spark(struct: StructType, name: str, namespace: str = "") -> str:
    """An Avro record schema (JSON text) for rows of ``struct``, named ``name``."""
    return json.dumps(_record(struct, name, namespace, set()))


def _record(struct: StructType, name: str, namespace: str, names: set[str]) -> dict[str, Any]:
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


def avro_type(dtype: DataType, name: str, names: set[str]) -> Any:
    """The Avro schema of a Spark type; records are named after ``name``, unique in ``names``."""
    if isinstance(dtype, StructType):
        return _record(dtype, name, "", names)
    if isinstance(dtype, ArrayType):
        items = avro_type(dtype.elementType, name, names)
        return {"type": "array", "items": ["null", items] if dtype.containsNull else items}
    if isinstance(dtype, MapType):
        if not isinstance(dtype.keyType, StringType):
            raise DecodeError(f"the column {name} is a map with {dtype.keyType.simpleString()} "
                              "keys; Avro maps have string keys. Cast the keys to string.")
        values = avro_type(dtype.valueType, name, names)
        return {"type": "map",
                "values": ["null", values] if dtype.valueContainsNull else values}
    if isinstance(dtype, DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": dtype.precision,
                "scale": dtype.scale}
    simple = {BooleanType: "boolean", ByteType: "int", ShortType: "int", IntegerType: "int",
              LongType: "long", FloatType: "float", DoubleType: "double",
              BinaryType: "bytes", StringType: "string"}
    for cls, avro in simple.items():
        if isinstance(dtype, cls):
            return avro
    if isinstance(dtype, DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(dtype, TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if isinstance(dtype, TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    raise DecodeError(f"the column {name} has the type {dtype.simpleString()}, which has no "
                      "Avro counterpart here; cast it (e.g. to string) or pass the schema.")


def to_spark(value: Any, dtype: DataType) -> Any:
    """A value fastavro decoded, as a Python value Arrow takes for ``dtype``."""
    if value is None:
        return None
    if isinstance(dtype, StructType):
        return {f.name: to_spark(value.get(f.name), f.dataType) for f in dtype.fields}
    if isinstance(dtype, ArrayType):
        return [to_spark(v, dtype.elementType) for v in value]
    if isinstance(dtype, MapType):
        return {k: to_spark(v, dtype.valueType) for k, v in value.items()}
    if isinstance(value, dt.time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 \
            + value.microsecond
        return micros // 1000 if isinstance(dtype, IntegerType) else micros
    if isinstance(dtype, StringType) and not isinstance(value, str):
        return str(value)  # uuid
    return value


def from_spark(value: Any, dtype: DataType) -> Any:
    """A Spark row value (from Arrow's ``to_pylist``) as fastavro encodes it for ``dtype``."""
    if value is None:
        return None
    if isinstance(dtype, StructType):
        return {f.name: from_spark(value.get(f.name), f.dataType) for f in dtype.fields}
    if isinstance(dtype, ArrayType):
        return [from_spark(v, dtype.elementType) for v in value]
    if isinstance(dtype, MapType):
        items = value.items() if isinstance(value, dict) else value
        return {k: from_spark(v, dtype.valueType) for k, v in items}
    if isinstance(dtype, TimestampType) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value
