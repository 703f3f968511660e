"""``write_kafka``'s Schema Registry formats: the writer schemas fixed (and registered) on the
driver, and the ``key``/``value`` columns encoded on the executors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka.schema_registry import Schema
from google.protobuf.message import Message
from pyspark.sql.types import BinaryType, StructField, StructType

from airflow_provider_kafka_spark.errors import DecodeError, WriteConfigError
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.options import REGISTRY_FORMATS
from airflow_provider_kafka_spark.spark.formats import avro, json_schema, protobuf
from airflow_provider_kafka_spark.spark.formats.codec import FieldCodec, encode_batches
from airflow_provider_kafka_spark.spark.formats.registry import (
    SCHEMA_TYPES,
    ResolvedSchema,
    Subject,
    frozen_config,
    registry_call,
    registry_client,
    resolve_schema,
)
from airflow_provider_kafka_spark.spark.schema import HEADERS_TYPE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SUBJECT_NAME_STRATEGIES: tuple[str, ...] = ("topic", "record", "topic_record")
SCHEMA_ID_LOCATIONS: tuple[str, ...] = ("payload", "headers")


@dataclass(frozen=True)
class FixedSubject:
    """confluent-kafka's ``subject.name.strategy``, answering the subject the driver chose."""

    name: str

    def __call__(self, ctx: Any, record_name: Any) -> str:
        return self.name


def encode_columns(
    df: DataFrame,
    *,
    topic: str | None,
    key_format: str,
    value_format: str,
    key_schema: Any,
    value_schema: Any,
    schema_registry: Mapping[str, Any] | None,
    auto_register_schemas: bool,
    subject_name_strategy: str,
    schema_id_location: str,
) -> tuple[DataFrame, tuple[FieldCodec, ...]]:
    """``df`` with its registry-format ``key``/``value`` columns encoded to Confluent wire
    format (lazily, on the executors), and the codecs used; ``(df, ())`` when neither column
    uses a registry format. Registers the writer schemas when ``auto_register_schemas``."""
    for name, fmt in (("key_format", key_format), ("value_format", value_format)):
        if fmt != "bytes" and fmt not in REGISTRY_FORMATS:
            raise WriteConfigError(f"{name}={shown(fmt)} is not valid; use 'bytes' (a binary "
                                   f"or string column, written as is) or one of "
                                   f"{REGISTRY_FORMATS}.")
    fields = {f.name: f.dataType for f in df.schema.fields}
    wanted = [(field, fmt, schema) for field, fmt, schema in
              (("key", key_format, key_schema), ("value", value_format, value_schema))
              if fmt in REGISTRY_FORMATS]
    for field, fmt, schema in (("key", key_format, key_schema),
                               ("value", value_format, value_schema)):
        if fmt == "bytes" and schema is not None:
            raise WriteConfigError(f"{field}_schema is only used with a registry "
                                   f"{field}_format {REGISTRY_FORMATS}; remove it.")
    if not wanted:
        if schema_registry is not None:
            raise WriteConfigError("schema_registry is only used with key_format/value_format "
                                   f"in {REGISTRY_FORMATS}; remove it, or pass one.")
        return df, ()
    for name, value, choices in (
            ("subject_name_strategy", subject_name_strategy, SUBJECT_NAME_STRATEGIES),
            ("schema_id_location", schema_id_location, SCHEMA_ID_LOCATIONS)):
        if value not in choices:
            raise WriteConfigError(f"{name}={shown(value)} is not valid; use one of {choices}.")
    if not isinstance(auto_register_schemas, bool):
        raise WriteConfigError(f"auto_register_schemas={shown(auto_register_schemas)} must "
                               "be True or False.")
    try:
        config = frozen_config(schema_registry, "write_kafka with a registry format")
        planned = [_plan(df, field, fmt, schema, fields, topic, config, subject_name_strategy)
                   for field, fmt, schema in wanted]
    except DecodeError as exc:
        raise WriteConfigError(str(exc)) from None
    codecs = tuple(_register(config, field, resolved, subject, dtype_json, auto_register_schemas,
                             schema_id_location)
                   for field, resolved, subject, dtype_json in planned)
    out = StructType([StructField(f.name, BinaryType()) if f.name in {c.field for c in codecs}
                      else f for f in df.schema.fields])
    if schema_id_location == "headers" and "headers" not in fields:
        out = out.add(StructField("headers", HEADERS_TYPE))
    return df.mapInArrow(encode_batches(codecs, topic), out), codecs


def _plan(df: DataFrame, field: str, fmt: str, schema: Any, fields: Mapping[str, Any],
          topic: str | None, config: tuple[tuple[str, Any], ...],
          strategy: str) -> tuple[str, ResolvedSchema, str, str]:
    """(field, writer schema, subject, the column's Spark type as JSON)."""
    if field not in fields:
        raise WriteConfigError(f"{field}_format={fmt!r} needs a {field!r} column.")
    dtype = fields[field]
    if schema is None:
        resolved = ResolvedSchema(fmt, _derived(fmt, dtype, field, topic))
    elif isinstance(schema, (str, Subject)) or (isinstance(schema, type)
                                               and issubclass(schema, Message)):
        resolved = resolve_schema(config, fmt, schema)
    else:
        raise WriteConfigError(f"{field}_schema={shown(schema)} is not a schema: pass "
                               "Subject(name, version), the schema inline, or None to derive "
                               f"it from the {field!r} column.")
    if isinstance(schema, Subject):
        return field, resolved, schema.name, dtype.json()
    record = _record_name(resolved)
    if strategy == "record":
        return field, resolved, record, dtype.json()
    if topic is None:
        raise WriteConfigError(
            f"subject_name_strategy={strategy!r} needs topic= (the subject is named after the "
            f"topic); pass topic=, {field}_schema=Subject(name), or "
            "subject_name_strategy='record'.")
    subject = f"{topic}-{field}" if strategy == "topic" else f"{topic}-{record}"
    return field, resolved, subject, dtype.json()


def _derived(fmt: str, dtype: Any, field: str, topic: str | None) -> str:
    name = "".join(c if c.isalnum() else "_" for c in f"{topic or 'kafka'}_{field}")
    if fmt == "avro":
        if isinstance(dtype, StructType):
            return avro.schema_from_spark(dtype, name)
        return json.dumps(avro.avro_type(dtype, name, set()))
    if fmt == "json_schema":
        if isinstance(dtype, StructType):
            return json_schema.schema_from_spark(dtype, name)
        return json.dumps(json_schema.json_type(dtype, field))
    if not isinstance(dtype, StructType):
        raise WriteConfigError(f"{field}_format='protobuf' needs a struct {field!r} column (a "
                               f"message), not {dtype.simpleString()}; wrap it with struct().")
    return protobuf.schema_from_spark(dtype, name[:1].upper() + name[1:])


def _record_name(schema: ResolvedSchema) -> str:
    if schema.format == "avro":
        parsed = json.loads(schema.schema_str)
        if isinstance(parsed, dict) and parsed.get("name"):
            namespace = parsed.get("namespace")
            return f"{namespace}.{parsed['name']}" if namespace else str(parsed["name"])
    elif schema.format == "json_schema":
        title = json.loads(schema.schema_str).get("title")
        if title:
            return str(title)
    else:
        from airflow_provider_kafka_spark.spark.formats.codec import message_class_of

        return str(message_class_of(schema).DESCRIPTOR.full_name)
    raise WriteConfigError(f"subject_name_strategy 'record' needs a named {schema.format} "
                           "schema (an Avro record's name, a JSON Schema's title).")


def _register(config: tuple[tuple[str, Any], ...], field: str, resolved: ResolvedSchema,
              subject: str, dtype_json: str, auto_register: bool,
              schema_id_location: str) -> FieldCodec:
    """The codec of ``field``, its schema's id looked up (or registered) under ``subject``."""
    client = registry_client(config)
    schema = Schema(resolved.schema_str, SCHEMA_TYPES[resolved.format])
    if resolved.imports:
        raise WriteConfigError(f"the {field} schema imports {[n for n, _ in resolved.imports]}; "
                               "register it with its references and pass Subject(name).")
    if resolved.subject == subject and resolved.schema_id is not None:
        schema_id = resolved.schema_id
    elif auto_register:
        schema_id = registry_call(config, f"registering the {field} schema under {subject!r}",
                                  lambda: client.register_schema(subject, schema))
    else:
        found = registry_call(
            config, f"the {field} schema under {subject!r} (auto_register_schemas=False)",
            lambda: client.lookup_schema(subject, schema))
        schema_id = int(found.schema_id or 0)
    conf: dict[str, Any] = {"auto.register.schemas": False, "use.schema.id": schema_id,
                            "subject.name.strategy": FixedSubject(subject)}
    if schema_id_location == "headers":
        from confluent_kafka.schema_registry import header_schema_id_serializer

        conf["schema.id.serializer"] = header_schema_id_serializer
    return FieldCodec(field, ResolvedSchema(resolved.format, resolved.schema_str, (), schema_id,
                                            subject, resolved.version, resolved.message),
                      config, dtype_json, tuple(sorted(conf.items())))
