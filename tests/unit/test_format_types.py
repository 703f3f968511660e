"""The Schema Registry formats' type mappings (Avro, Protobuf, JSON Schema <-> Spark) and the
registry config checks: no broker, no Spark session, no registry."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_provider_kafka_spark.spark import DecodeError
from airflow_provider_kafka_spark.spark.formats import avro, json_schema, protobuf
from airflow_provider_kafka_spark.spark.formats.registry import (
    Subject,
    frozen_config,
    resolve_schema,
    url_of,
)

AVRO_ORDER = {
    "type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12,
                                    "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "since", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "OLD"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "double"]}},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"}]}},
        {"name": "previous", "type": ["null", "Address"], "default": None},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
    ]}


def test_avro_types_map_to_spark_as_spark_own_from_avro_does() -> None:
    address = StructType([StructField("city", StringType(), False)])
    assert avro.spark_type(json.dumps(AVRO_ORDER)) == StructType([
        StructField("id", LongType(), False),
        StructField("amount", DecimalType(12, 2), False),
        StructField("day", DateType(), False),
        StructField("at", TimestampType(), False),
        StructField("local", TimestampNTZType(), False),
        StructField("since", IntegerType(), False),
        StructField("ref", StringType(), False),
        StructField("status", StringType(), False),
        StructField("note", StringType(), True),
        StructField("tags", ArrayType(StringType(), False), False),
        StructField("attrs", MapType(StringType(), DoubleType(), True), False),
        StructField("address", address, False),
        StructField("previous", address, True),
        StructField("hash", BinaryType(), False),
    ])


def test_avro_values_become_what_arrow_takes() -> None:
    dtype = avro.spark_type(AVRO_ORDER)
    ref = uuid.UUID("12345678-1234-5678-1234-567812345678")
    value = {"id": 1, "amount": decimal.Decimal("1.50"), "day": dt.date(2026, 1, 2),
             "at": dt.datetime(2026, 1, 2, tzinfo=dt.UTC), "local": dt.datetime(2026, 1, 2),
             "since": dt.time(1, 2, 3, 4000), "ref": ref, "status": "NEW", "note": None,
             "tags": ["a"], "attrs": {"x": 1.0}, "address": {"city": "Ghent"},
             "previous": None, "hash": b"abcd"}
    converted = avro.to_spark(value, dtype)
    assert converted["since"] == 3723004 and converted["ref"] == str(ref)
    assert converted["address"] == {"city": "Ghent"}


def test_an_avro_union_of_two_types_is_refused_naming_the_field() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [
            {"name": "either", "type": ["null", "int", "string"]}]}}]}
    with pytest.raises(DecodeError, match=r"union \[\"null\", \"int\", \"string\"\] at "
                                          r"inner\.either has 2 non-null branches"):
        avro.spark_type(schema)


def test_a_spark_struct_derives_an_avro_schema_that_maps_back_to_it() -> None:
    struct = StructType([
        StructField("id", LongType(), False), StructField("name", StringType()),
        StructField("amount", DecimalType(10, 2)), StructField("at", TimestampType()),
        StructField("tags", ArrayType(StringType())),
        StructField("inner", StructType([StructField("a", IntegerType())]))])
    derived = json.loads(avro.schema_from_spark(struct, "orders_value"))
    assert derived["fields"][0] == {"name": "id", "type": "long"}
    assert derived["fields"][1] == {"name": "name", "type": ["null", "string"], "default": None}
    assert avro.spark_type(derived) == struct


def test_json_schema_types_map_to_spark() -> None:
    schema = {
        "type": "object", "required": ["id", "tags"], "definitions": {
            "Address": {"type": "object", "properties": {"city": {"type": "string"}}}},
        "properties": {
            "id": {"type": "integer"}, "price": {"type": ["number", "null"]},
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "status": {"enum": ["NEW", "OLD"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
            "address": {"$ref": "#/definitions/Address"},
            "previous": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Address"}]}}}
    address = StructType([StructField("city", StringType(), True)])
    assert json_schema.spark_type(schema) == StructType([
        StructField("id", LongType(), False), StructField("price", DoubleType(), True),
        StructField("at", TimestampType(), True), StructField("day", DateType(), True),
        StructField("status", StringType(), True),
        StructField("tags", ArrayType(StringType(), False), False),
        StructField("attrs", MapType(StringType(), LongType(), False), True),
        StructField("address", address, True), StructField("previous", address, True)])
    assert json_schema.to_spark({"at": "2026-01-02T03:04:05Z", "day": "2026-01-02"},
                                StructType([StructField("at", TimestampType()),
                                            StructField("day", DateType())])) == \
        {"at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "day": dt.date(2026, 1, 2)}


def test_json_schema_without_a_single_type_is_refused() -> None:
    with pytest.raises(DecodeError, match=r"type \['string', 'integer'\] at x has several"):
        json_schema.spark_type({"type": "object",
                                "properties": {"x": {"type": ["string", "integer"]}}})
    with pytest.raises(DecodeError, match="refers to 'other.json#/X'"):
        json_schema.spark_type({"$ref": "other.json#/X"})


def _message_with_everything() -> type:
    """A Protobuf message with the types the mapping names, built at run time."""
    file = descriptor_pb2.FileDescriptorProto(name="every.proto", package="shop",
                                              syntax="proto3")
    file.dependency.extend([timestamp_pb2.Timestamp.DESCRIPTOR.file.name,
                            wrappers_pb2.Int64Value.DESCRIPTOR.file.name,
                            "google/protobuf/duration.proto"])
    enum = file.enum_type.add(name="Status")
    enum.value.add(name="NEW", number=0)
    enum.value.add(name="OLD", number=1)
    message = file.message_type.add(name="Every")
    F = descriptor_pb2.FieldDescriptorProto
    entry = message.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    message.oneof_decl.add(name="choice")
    fields = [
        ("id", F.TYPE_INT64, ""), ("big", F.TYPE_UINT64, ""), ("small", F.TYPE_UINT32, ""),
        ("status", F.TYPE_ENUM, ".shop.Status"),
        ("at", F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
        ("took", F.TYPE_MESSAGE, ".google.protobuf.Duration"),
        ("maybe", F.TYPE_MESSAGE, ".google.protobuf.Int64Value"),
        ("by_card", F.TYPE_STRING, ""), ("by_cash", F.TYPE_BOOL, "")]
    for number, (name, kind, type_name) in enumerate(fields, start=1):
        field = message.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
        if type_name:
            field.type_name = type_name
        if name.startswith("by_"):
            field.oneof_index = 0
    message.field.add(name="tags", number=20, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    message.field.add(name="attrs", number=21, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".shop.Every.AttrsEntry")
    pool = descriptor_pool.DescriptorPool()
    for dependency in file.dependency:
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(dependency).CopyToProto(proto)
        pool.Add(proto)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Every"))


def test_protobuf_types_map_to_spark_as_spark_own_from_protobuf_does() -> None:
    cls = _message_with_everything()
    assert protobuf.spark_type(cls.DESCRIPTOR) == StructType([
        StructField("id", LongType(), False), StructField("big", DecimalType(20, 0), False),
        StructField("small", LongType(), False), StructField("status", StringType(), False),
        StructField("at", TimestampType(), True),
        StructField("took", DayTimeIntervalType(), True),
        StructField("maybe", LongType(), True), StructField("by_card", StringType(), True),
        StructField("by_cash", BooleanType(), True),
        StructField("tags", ArrayType(StringType(), False), False),
        StructField("attrs", MapType(StringType(), LongType(), False), False)])
    message = cls(id=1, big=2**64 - 1, status=1, by_cash=True, tags=["a"])
    message.at.FromDatetime(dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    message.took.FromTimedelta(dt.timedelta(seconds=90))
    message.attrs["k"] = 5
    assert protobuf.to_spark(cls.FromString(message.SerializeToString())) == {
        "id": 1, "big": decimal.Decimal(2**64 - 1), "small": 0, "status": "OLD",
        "at": dt.datetime(2026, 1, 2, tzinfo=dt.UTC), "took": dt.timedelta(seconds=90),
        "maybe": None, "by_card": None, "by_cash": True, "tags": ["a"], "attrs": {"k": 5}}


def test_a_protobuf_message_that_contains_itself_is_refused() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="tree.proto", syntax="proto3")
    node = file.message_type.add(name="Node")
    F = descriptor_pb2.FieldDescriptorProto
    node.field.add(name="child", number=1, type=F.TYPE_MESSAGE, type_name=".Node",
                   label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    with pytest.raises(DecodeError, match="Node contains itself"):
        protobuf.spark_type(pool.FindMessageTypeByName("Node"))


@pytest.mark.parametrize(("config", "match"), [
    (None, "needs schema_registry="),
    ({}, "needs schema_registry="),
    ({"url": "ftp://registry"}, "not a valid SchemaRegistryClient config: Invalid url"),
    ({"url": "http://r:8081", "no.such.key": 1}, "not a valid SchemaRegistryClient config"),
])
def test_a_bad_registry_config_is_a_clear_error(config: object, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        frozen_config(config, "value_format='avro'")  # type: ignore[arg-type]


def test_registry_credentials_never_reach_an_error_or_url() -> None:
    with pytest.raises(DecodeError) as raised:
        frozen_config({"basic.auth.user.info": "me:secret"}, "x")
    assert "secret" not in str(raised.value)
    assert url_of((("url", "http://me:secret@registry:8081"),)) == "http://registry:8081"


@pytest.mark.parametrize(("schema", "match"), [
    (Subject(""), "Subject name '' must be a non-empty string"),
    (Subject("s", 0), "Subject version 0 must be 'latest' or a version number"),
    ("{not json", "inline avro schema is not JSON"),
    (42, "an inline avro schema is JSON text"),
])
def test_a_bad_reader_schema_is_a_clear_error(schema: object, match: str) -> None:
    config = frozen_config({"url": "http://127.0.0.1:9"}, "x")
    with pytest.raises(DecodeError, match=match):
        resolve_schema(config, "avro", schema)  # type: ignore[arg-type]
