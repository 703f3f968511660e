"""JSON Schema: the reader schema's Spark type, and Spark rows to JSON Schemas and back.

Mapping (JSON Schema -> Spark):

========================================  ==============================================
JSON Schema                               Spark
========================================  ==============================================
``boolean``, ``integer``, ``number``      boolean, long, double
``string``                                string
``string`` + ``format: date-time``        timestamp (UTC; an offset-less text is UTC)
``string`` + ``format: date``             date
``string`` + ``format: decimal``          decimal(38, 18) (this package's writer uses it)
``string`` + ``contentEncoding: base64``  binary
``enum`` (of strings)                     string
``object`` with ``properties``            struct; a property is nullable unless it is
                                          ``required`` and its type excludes ``null``
``object`` with only                      map<string, ...>
``additionalProperties: {schema}``
``array`` with ``items``                  array
``["null", T]``, ``anyOf``/``oneOf``      T, nullable
of null and one schema
``$ref`` to ``#/definitions/..`` or       the referenced schema
``#/$defs/..``
========================================  ==============================================

Other combinations (a union of several non-null types, ``allOf``, tuples) are refused with a
:class:`DecodeError` naming the property. Spark -> JSON Schema (``write_kafka``'s derived
schemas) is the inverse; a non-nullable column is ``required``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from functools import partial
from typing import Any

from pyspark.sql import types as T

from airflow_provider_kafka_spark.errors import DecodeError
from airflow_provider_kafka_spark.spark.formats.values import convert

DECIMAL = T.DecimalType(38, 18)


def spark_type(schema: str | dict[str, Any]) -> T.DataType:
    """The Spark type of a JSON Schema (text or parsed)."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return _spark(parsed, parsed, "")[0]


def _spark(schema: Any, root: dict[str, Any], path: str) -> tuple[T.DataType, bool]:
    """(Spark type, may be null) of ``schema``."""
    where = path or "the top"
    if schema is True or schema == {}:
        raise DecodeError(f"the JSON Schema allows any value at {where}; give it a type.")
    if "$ref" in schema:
        return _spark(_resolve(schema["$ref"], root, where), root, path)
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            branches = [b for b in schema[keyword] if b.get("type") != "null"]
            if len(branches) != 1:
                raise DecodeError(f"the JSON Schema {keyword} at {where} has {len(branches)} "
                                  "non-null branches; only null and one schema are supported.")
            return _spark(branches[0], root, path)[0], \
                len(branches) < len(schema[keyword])
    kind = schema.get("type")
    nullable = False
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        if len(others) != 1:
            raise DecodeError(f"the JSON Schema type {kind} at {where} has several non-null "
                              "types; a Spark column has one.")
        nullable, kind = len(others) < len(kind), others[0]
    if kind is None and "enum" in schema:
        kind = "string"
    if kind == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if not properties and isinstance(extra, dict):
            values, values_null = _spark(extra, root, f"{path}{{}}")
            return T.MapType(T.StringType(), values, values_null), nullable
        required = set(schema.get("required", ()))
        struct = T.StructType()
        for name, sub in (properties or {}).items():
            dtype, may_be_null = _spark(sub, root, f"{path}.{name}".lstrip("."))
            struct.add(T.StructField(name, dtype, may_be_null or name not in required))
        return struct, nullable
    if kind == "array":
        if not isinstance(schema.get("items"), dict):
            raise DecodeError(f"the JSON Schema array at {where} needs one \"items\" schema.")
        items, items_null = _spark(schema["items"], root, f"{path}[]")
        return T.ArrayType(items, items_null), nullable
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date-time":
            return T.TimestampType(), nullable
        if fmt == "date":
            return T.DateType(), nullable
        if fmt == "decimal":
            return DECIMAL, nullable
        if schema.get("contentEncoding") == "base64":
            return T.BinaryType(), nullable
        return T.StringType(), nullable
    simple = {"boolean": T.BooleanType(), "integer": T.LongType(), "number": T.DoubleType()}
    if kind in simple:
        return simple[kind], nullable
    raise DecodeError(f"the JSON Schema at {where} has the type {kind!r}, which has no Spark "
                      "counterpart here.")


def _resolve(ref: str, root: dict[str, Any], where: str) -> Any:
    if not ref.startswith("#/"):
        raise DecodeError(f"the JSON Schema at {where} refers to {ref!r}; only references "
                          "inside the schema (#/definitions/..., #/$defs/...) are supported.")
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            raise DecodeError(f"the JSON Schema reference {ref!r} at {where} is not in it.")
        node = node[part]
    return node


def schema_from_spark(struct: T.StructType, title: str) -> str:
    """A JSON Schema (text) for rows of ``struct``, titled ``title``."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": title,
              **_object(struct)}
    return json.dumps(schema)


def _object(struct: T.StructType) -> dict[str, Any]:
    properties = {f.name: _json(f.dataType, f.nullable, f.name) for f in struct.fields}
    return {"type": "object", "properties": properties,
            "required": [f.name for f in struct.fields if not f.nullable],
            "additionalProperties": False}


def _json(dtype: T.DataType, nullable: bool, name: str) -> dict[str, Any]:
    schema = json_type(dtype, name)
    if nullable:
        return {"anyOf": [{"type": "null"}, schema]}
    return schema


_JSON_TYPES: tuple[tuple[tuple[type[T.DataType], ...], dict[str, str]], ...] = (
    ((T.ByteType, T.ShortType, T.IntegerType, T.LongType), {"type": "integer"}),
    ((T.FloatType, T.DoubleType), {"type": "number"}),
    ((T.BooleanType,), {"type": "boolean"}),
    ((T.StringType,), {"type": "string"}),
    ((T.BinaryType,), {"type": "string", "contentEncoding": "base64"}),
    ((T.DecimalType,), {"type": "string", "format": "decimal"}),
    ((T.TimestampType, T.TimestampNTZType), {"type": "string", "format": "date-time"}),
    ((T.DateType,), {"type": "string", "format": "date"}),
)
"""The JSON Schema of each Spark leaf type."""


def json_type(dtype: T.DataType, name: str) -> dict[str, Any]:
    """The JSON Schema of a Spark type (``name`` is the column, for errors)."""
    if isinstance(dtype, T.StructType):
        return _object(dtype)
    if isinstance(dtype, T.ArrayType):
        return {"type": "array", "items": _json(dtype.elementType, dtype.containsNull, name)}
    if isinstance(dtype, T.MapType):
        if not isinstance(dtype.keyType, T.StringType):
            raise DecodeError(f"the column {name} is a map with {dtype.keyType.simpleString()} "
                              "keys; JSON objects have string keys. Cast the keys to string.")
        return {"type": "object",
                "additionalProperties": _json(dtype.valueType, dtype.valueContainsNull, name)}
    for classes, schema in _JSON_TYPES:
        if isinstance(dtype, classes):
            return dict(schema)
    raise DecodeError(f"the column {name} has the type {dtype.simpleString()}, which has no "
                      "JSON Schema counterpart here; cast it (e.g. to string).")


def _to_spark_leaf(value: Any, dtype: T.DataType) -> Any:
    if isinstance(dtype, T.TimestampType):
        parsed = dt.datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    if isinstance(dtype, T.DateType):
        return dt.date.fromisoformat(value)
    if isinstance(dtype, T.DecimalType):
        return decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-dtype.scale))
    if isinstance(dtype, T.BinaryType):
        return base64.b64decode(value)
    if isinstance(dtype, T.DoubleType):
        return float(value)
    return value


to_spark = partial(convert, leaf=_to_spark_leaf)
"""A decoded JSON value as a Python value Arrow takes for ``dtype``."""


def _from_spark_leaf(value: Any, dtype: T.DataType) -> Any:
    if isinstance(dtype, T.TimestampType):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return stamp.isoformat()
    if isinstance(dtype, (T.TimestampNTZType, T.DateType)):
        return value.isoformat()
    if isinstance(dtype, T.DecimalType):
        return str(value)
    if isinstance(dtype, T.BinaryType):
        return base64.b64encode(value).decode("ascii")
    return value


from_spark = partial(convert, leaf=_from_spark_leaf)
"""A Spark row value (from Arrow's ``to_pylist``) as JSON for ``dtype``."""
