"""Protobuf: message descriptors from registered schemas, their Spark type, and rows both ways.

A registered Protobuf schema reaches this module as confluent-kafka's serializer registers it
(a base64 ``FileDescriptorProto``, which the registry also returns for ``format=serialized``);
its imports of Google's well-known types resolve to the copies protobuf ships, and other imports
through the registry's references. The message of a schema is its first top-level message.

Mapping (Protobuf -> Spark, as Spark's own ``from_protobuf``):

===========================================  ==========================================
Protobuf                                     Spark
===========================================  ==========================================
bool, string, bytes                          boolean, string, binary
int32, sint32, sfixed32                      int
uint32, fixed32, int64, sint64, sfixed64     long
uint64, fixed64                              decimal(20, 0)
float, double                                float, double
enum                                         string (the value's name)
message                                      struct (null when not set)
repeated T                                   array<T>
map<K, V>                                    map<K, V>
oneof                                        its fields, each nullable (null unless set)
``optional`` scalar (proto3 presence)        nullable
``google.protobuf.Timestamp``                timestamp
``google.protobuf.Duration``                 interval day to second
``google.protobuf.*Value`` wrappers          the wrapped scalar, nullable
===========================================  ==========================================

A proto3 scalar without presence decodes to its default (0, "", false) when not set, as
Protobuf defines. A message type that contains itself is refused (Spark types cannot recurse).
Spark -> Protobuf (``write_kafka``'s derived schemas) numbers the fields 1.. in column order;
timestamps become ``google.protobuf.Timestamp``, nullable scalars ``optional``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from pyspark.sql import types as T

from airflow_provider_kafka_spark.errors import DecodeError

_WELL_KNOWN = {m.DESCRIPTOR.file.name: m.DESCRIPTOR.file
               for m in (timestamp_pb2.Timestamp, duration_pb2.Duration, wrappers_pb2.Int64Value)}
_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
_WRAPPERS = {"google.protobuf." + n for n in (
    "DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value", "UInt32Value",
    "BoolValue", "StringValue", "BytesValue")}
_F = FieldDescriptor
_SCALARS: dict[int, T.DataType] = {
    _F.TYPE_BOOL: T.BooleanType(), _F.TYPE_STRING: T.StringType(), _F.TYPE_BYTES: T.BinaryType(),
    _F.TYPE_INT32: T.IntegerType(), _F.TYPE_SINT32: T.IntegerType(), _F.TYPE_SFIXED32: T.IntegerType(),
    _F.TYPE_UINT32: T.LongType(), _F.TYPE_FIXED32: T.LongType(), _F.TYPE_INT64: T.LongType(),
    _F.TYPE_SINT64: T.LongType(), _F.TYPE_SFIXED64: T.LongType(),
    _F.TYPE_UINT64: T.DecimalType(20, 0), _F.TYPE_FIXED64: T.DecimalType(20, 0),
    _F.TYPE_FLOAT: T.FloatType(), _F.TYPE_DOUBLE: T.DoubleType(), _F.TYPE_ENUM: T.StringType(),
}


def message_class(schema_str: str, imports: dict[str, str] | None = None,
                  message: str | None = None) -> type[Message]:
    """The class of the message named ``message`` (default: the file's first) of a registered
    schema (base64 ``FileDescriptorProto``); ``imports`` maps each imported file name that is
    not a well-known type to its registered schema."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str, text: str | None) -> descriptor_pb2.FileDescriptorProto:
        proto = _file_proto(name, text)
        for dependency in proto.dependency:
            if dependency not in added:
                add(dependency, (imports or {}).get(dependency))
        pool.Add(proto)
        added.add(proto.name)
        return proto

    proto = add("", schema_str)
    if not proto.message_type:
        raise DecodeError("the Protobuf schema has no message; register one with a message.")
    package = f"{proto.package}." if proto.package else ""
    name = message or package + proto.message_type[0].name
    try:
        found = pool.FindMessageTypeByName(name)
    except KeyError:
        raise DecodeError(f"the Protobuf schema has no message {name!r}.") from None
    return message_factory.GetMessageClass(found)


def _file_proto(name: str, text: str | None) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    if text is None:
        if name not in _WELL_KNOWN:
            raise DecodeError(f"the Protobuf schema imports {name!r}, which is neither a "
                              "well-known type nor a registered reference.")
        _WELL_KNOWN[name].CopyToProto(proto)
        return proto
    try:
        proto.ParseFromString(base64.b64decode(text, validate=True))
    except Exception as exc:  # binascii.Error, protobuf's DecodeError
        raise DecodeError(f"a registered Protobuf schema is not a serialized FileDescriptor"
                          f"Proto ({exc}); register schemas with confluent-kafka's "
                          "ProtobufSerializer or a registry that answers format=serialized."
                          ) from None
    return proto


def spark_type(descriptor: Descriptor) -> T.StructType:
    """The Spark type of a message."""
    return _struct(descriptor, ())


def _struct(descriptor: Descriptor, seen: tuple[str, ...]) -> T.StructType:
    if descriptor.full_name in seen:
        raise DecodeError(f"the Protobuf message {descriptor.full_name} contains itself "
                          f"({' -> '.join((*seen, descriptor.full_name))}); Spark types "
                          "cannot recurse. Decode it as bytes.")
    return T.StructType([T.StructField(f.name, *_field(f, (*seen, descriptor.full_name)))
                       for f in descriptor.fields])


def _field(f: FieldDescriptor, seen: tuple[str, ...]) -> tuple[T.DataType, bool]:
    if _is_map(f):
        key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        value_type, value_null = _single(value, seen)
        return T.MapType(_single(key, seen)[0], value_type, value_null), False
    dtype, nullable = _single(f, seen)
    if f.is_repeated:
        return T.ArrayType(dtype, False), False
    return dtype, nullable


def _single(f: FieldDescriptor, seen: tuple[str, ...]) -> tuple[T.DataType, bool]:
    if f.type != _F.TYPE_MESSAGE:
        return _SCALARS[f.type], f.has_presence
    name = f.message_type.full_name
    if name == _TIMESTAMP:
        return T.TimestampType(), True
    if name == _DURATION:
        return T.DayTimeIntervalType(), True
    if name in _WRAPPERS:
        return _SCALARS[f.message_type.fields_by_name["value"].type], True
    return _struct(f.message_type, seen), True


def _is_map(f: FieldDescriptor) -> bool:
    return f.type == _F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry


def to_spark(message: Message) -> dict[str, Any]:
    """A decoded message as the row Arrow takes for :func:`spark_type` of its descriptor."""
    return {f.name: _value(message, f) for f in message.DESCRIPTOR.fields}


def _value(message: Message, f: FieldDescriptor) -> Any:
    if _is_map(f):
        value_field = f.message_type.fields_by_name["value"]
        return {k: _one(v, value_field) for k, v in getattr(message, f.name).items()}
    if f.is_repeated:
        return [_one(v, f) for v in getattr(message, f.name)]
    if f.has_presence and not message.HasField(f.name):
        return None
    return _one(getattr(message, f.name), f)


def _one(value: Any, f: FieldDescriptor) -> Any:
    if f.type == _F.TYPE_ENUM:
        found = f.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    if f.type in (_F.TYPE_UINT64, _F.TYPE_FIXED64):
        return decimal.Decimal(value)
    if f.type != _F.TYPE_MESSAGE:
        return value
    name = f.message_type.full_name
    if name == _TIMESTAMP:
        return value.ToDatetime(tzinfo=dt.UTC)
    if name == _DURATION:
        return value.ToTimedelta()
    if name in _WRAPPERS:
        return _one(value.value, f.message_type.fields_by_name["value"])
    return to_spark(value)


def from_spark(row: dict[str, Any], cls: type[Message]) -> Message:
    """A Spark row (from Arrow's ``to_pylist``) as a message of ``cls``."""
    message = cls()
    _fill(message, row)
    return message


def _fill(message: Message, row: dict[str, Any]) -> None:
    for f in message.DESCRIPTOR.fields:
        value = row.get(f.name)
        if value is None:
            continue
        if _is_map(f):
            target = getattr(message, f.name)
            value_field = f.message_type.fields_by_name["value"]
            items = value.items() if isinstance(value, dict) else value
            for k, v in items:
                if value_field.type == _F.TYPE_MESSAGE:
                    _set_message(target[k], v, value_field)
                else:
                    target[k] = _scalar(v, value_field)
        elif f.is_repeated:
            target = getattr(message, f.name)
            for v in value:
                if f.type == _F.TYPE_MESSAGE:
                    _set_message(target.add(), v, f)
                else:
                    target.append(_scalar(v, f))
        elif f.type == _F.TYPE_MESSAGE:
            _set_message(getattr(message, f.name), value, f)
        else:
            setattr(message, f.name, _scalar(value, f))


def _set_message(target: Message, value: Any, f: FieldDescriptor) -> None:
    name = f.message_type.full_name
    if name == _TIMESTAMP:
        target.FromDatetime(value if value.tzinfo else value.replace(tzinfo=dt.UTC))
    elif name == _DURATION:
        target.FromTimedelta(value)
    elif name in _WRAPPERS:
        target.value = _scalar(value, f.message_type.fields_by_name["value"])
    else:
        target.SetInParent()
        _fill(target, value)


def _scalar(value: Any, f: FieldDescriptor) -> Any:
    if f.type == _F.TYPE_ENUM:
        found = f.enum_type.values_by_name.get(value)
        if found is None:
            raise DecodeError(f"{value!r} is not a value of the enum {f.enum_type.full_name}.")
        return found.number
    if isinstance(value, decimal.Decimal):
        return int(value)
    return value


def schema_from_spark(struct: T.StructType, name: str) -> str:
    """A Protobuf schema (base64 ``FileDescriptorProto``, as registered by confluent-kafka)
    with one message ``name`` for rows of ``struct``."""
    proto = descriptor_pb2.FileDescriptorProto(name=f"{name}.proto", syntax="proto3")
    message = proto.message_type.add(name=name)
    imports: set[str] = set()
    _message(message, struct, imports)
    proto.dependency.extend(sorted(imports))
    return base64.b64encode(proto.SerializeToString()).decode("ascii")


def _message(message: descriptor_pb2.DescriptorProto, struct: T.StructType,
             imports: set[str]) -> None:
    for number, f in enumerate(struct.fields, start=1):
        field = message.field.add(name=f.name, number=number,
                                  label=_F.LABEL_OPTIONAL)
        dtype = f.dataType
        if isinstance(dtype, T.ArrayType):
            field.label = _F.LABEL_REPEATED
            dtype = dtype.elementType
        elif isinstance(dtype, T.MapType):
            entry = message.nested_type.add(name=f"{_camel(f.name)}Entry")
            entry.options.map_entry = True
            _typed(entry.field.add(name="key", number=1, label=_F.LABEL_OPTIONAL),
                   dtype.keyType, entry, "key", imports)
            _typed(entry.field.add(name="value", number=2, label=_F.LABEL_OPTIONAL),
                   dtype.valueType, entry, "value", imports)
            field.label = _F.LABEL_REPEATED
            field.type = _F.TYPE_MESSAGE
            field.type_name = entry.name
            continue
        _typed(field, dtype, message, f.name, imports)
        if f.nullable and field.type != _F.TYPE_MESSAGE and field.label != _F.LABEL_REPEATED:
            field.proto3_optional = True
            oneof = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_{f.name}")
            field.oneof_index = oneof


def _typed(field: descriptor_pb2.FieldDescriptorProto, dtype: T.DataType,
           parent: descriptor_pb2.DescriptorProto, name: str, imports: set[str]) -> None:
    scalars = {T.BooleanType: _F.TYPE_BOOL, T.StringType: _F.TYPE_STRING, T.BinaryType: _F.TYPE_BYTES,
               T.ByteType: _F.TYPE_INT32, T.ShortType: _F.TYPE_INT32, T.IntegerType: _F.TYPE_INT32,
               T.LongType: _F.TYPE_INT64, T.FloatType: _F.TYPE_FLOAT, T.DoubleType: _F.TYPE_DOUBLE}
    for cls, kind in scalars.items():
        if isinstance(dtype, cls):
            field.type = kind
            return
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        field.type, field.type_name = _F.TYPE_MESSAGE, f".{_TIMESTAMP}"
        imports.add(timestamp_pb2.Timestamp.DESCRIPTOR.file.name)
        return
    if isinstance(dtype, T.DayTimeIntervalType):
        field.type, field.type_name = _F.TYPE_MESSAGE, f".{_DURATION}"
        imports.add(duration_pb2.Duration.DESCRIPTOR.file.name)
        return
    if isinstance(dtype, T.StructType):
        nested = parent.nested_type.add(name=_camel(name))
        _message(nested, dtype, imports)
        field.type, field.type_name = _F.TYPE_MESSAGE, nested.name
        return
    raise DecodeError(f"the column {name} has the type {dtype.simpleString()}, which has no "
                      "Protobuf counterpart here (decimals and dates included); cast it, or "
                      "register the schema yourself.")


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) or "Field"
