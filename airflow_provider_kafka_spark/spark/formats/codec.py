"""Schema Registry formats on the executors: Arrow batches of Kafka records decoded with
confluent-kafka's deserializers, and rows encoded with its serializers.

A :class:`FieldCodec` is built on the driver (its schema fixed there) and shipped to the tasks;
each Python worker process builds its serializer or deserializer once per codec and its
registry client once per config (:func:`registry.registry_client`), so a schema is fetched
once per id per process, never per record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry.error import SchemaRegistryError as _ClientError
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql.types import DataType, StringType, StructField, StructType

from airflow_provider_kafka_spark.errors import SchemaRegistryError, WriteConfigError
from airflow_provider_kafka_spark.spark.formats import avro, fast, json_schema, protobuf
from airflow_provider_kafka_spark.spark.formats.registry import (
    UNKNOWN_SCHEMA,
    ResolvedSchema,
    is_transport_error,
    registry_client,
    unreachable,
    url_of,
)
from airflow_provider_kafka_spark.spark.schema import utc_arrow_type


@dataclass(frozen=True)
class FieldCodec:
    """How one of ``key``/``value`` is decoded or encoded: its format, schema and registry.

    Attributes:
        field: ``"key"`` or ``"value"``.
        schema: the reader schema (decode) or writer schema (encode), fixed on the driver.
        registry: the frozen ``SchemaRegistryClient`` config.
        spark_json: the Spark type of the decoded column (``DataType.json()``).
        serializer_conf: (encode) confluent-kafka serializer settings.
    """

    field: str
    schema: ResolvedSchema
    registry: tuple[tuple[str, Any], ...]
    spark_json: str
    serializer_conf: tuple[tuple[str, Any], ...] = ()

    @cached_property
    def spark_type(self) -> DataType:
        return StructType.fromJson({"type": "struct", "fields": [
            {"name": "x", "type": json.loads(self.spark_json), "nullable": True,
             "metadata": {}}]}).fields[0].dataType

    @property
    def message_field(self) -> Any:  # confluent-kafka's MessageField constants are str
        return MessageField.KEY if self.field == "key" else MessageField.VALUE


def spark_type_of(schema: ResolvedSchema) -> DataType:
    """The Spark type a record decoded with ``schema`` has."""
    if schema.format == "avro":
        return avro.spark_type(schema.schema_str)
    if schema.format == "json_schema":
        return json_schema.spark_type(schema.schema_str)
    return protobuf.spark_type(message_class_of(schema).DESCRIPTOR)


def message_class_of(schema: ResolvedSchema) -> Any:
    """The Protobuf message class of a resolved schema."""
    return protobuf.message_class(schema.schema_str, dict(schema.imports), schema.message)


class _Corrupt(Exception):
    """One record could not be decoded (the reason is the message)."""


_DECODERS: dict[FieldCodec, Callable[[bytes, SerializationContext], Any]] = {}
_ENCODERS: dict[FieldCodec, Callable[[Any, SerializationContext], bytes | None]] = {}


def _decoder(codec: FieldCodec) -> Callable[[bytes, SerializationContext], Any]:
    """The process's deserializer of ``codec``, returning Arrow-ready Python values."""
    found = _DECODERS.get(codec)
    if found is not None:
        return found
    client = registry_client(codec.registry)
    schema, dtype = codec.schema, codec.spark_type
    if schema.format == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        avro_deserializer = AvroDeserializer(client, schema.schema_str)

        def decode(data: bytes, ctx: SerializationContext) -> Any:
            return avro.to_spark(avro_deserializer(data, ctx), dtype)
    elif schema.format == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        json_deserializer = JSONDeserializer(schema.schema_str, schema_registry_client=client)

        def decode(data: bytes, ctx: SerializationContext) -> Any:
            return json_schema.to_spark(json_deserializer(data, ctx), dtype)
    else:
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

        proto_deserializer = ProtobufDeserializer(message_class_of(schema), {}, client)

        def decode(data: bytes, ctx: SerializationContext) -> Any:
            return protobuf.to_spark(proto_deserializer(data, ctx))
    _DECODERS[codec] = decode
    return decode


def decode_one(codec: FieldCodec, data: bytes | None, ctx: SerializationContext,
               where: str) -> Any:
    """One record's ``data`` decoded; :class:`_Corrupt` when it is not decodable, and
    :class:`SchemaRegistryError` when the registry cannot answer (never a corrupt record)."""
    if data is None:
        return None
    try:
        return _decoder(codec)(data, ctx)
    except _ClientError as exc:
        if exc.error_code == UNKNOWN_SCHEMA:
            raise _Corrupt(f"{codec.field}: the registry has no schema with this record's id "
                           f"({exc.error_message})") from None
        raise SchemaRegistryError(
            f"the Schema Registry at {url_of(codec.registry)} refused a schema lookup for "
            f"{where}: {exc}. Nothing was committed; re-run when it answers.") from None
    except Exception as exc:
        if is_transport_error(exc):
            raise unreachable(codec.registry, f"the schema of {where}", exc) from None
        raise _Corrupt(f"{codec.field} is not {codec.schema.format} of the reader schema: "
                       f"{type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def decoded_columns(codecs: tuple[FieldCodec, ...]) -> list[StructField]:
    """The columns :func:`decode_batches` adds: ``_<field>_decoded`` and ``_<field>_error``."""
    columns = []
    for codec in codecs:
        columns += [StructField(f"_{codec.field}_decoded", codec.spark_type),
                    StructField(f"_{codec.field}_error", StringType())]
    return columns


def decode_batches(codecs: tuple[FieldCodec, ...], headers: bool) -> \
        Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that appends :func:`decoded_columns` to each batch."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield _decode_batch(batch, codecs, headers)

    return run


def _decode_batch(batch: pa.RecordBatch, codecs: tuple[FieldCodec, ...],
                  headers: bool) -> pa.RecordBatch:
    columns, names = list(batch.columns), list(batch.schema.names)
    for codec in codecs:
        columns += decode_column(batch, codec, headers)
        names += [f"_{codec.field}_decoded", f"_{codec.field}_error"]
    return pa.RecordBatch.from_arrays(columns, names=names)


def decode_column(batch: pa.RecordBatch, codec: FieldCodec, headers: bool) -> list[pa.Array]:
    """``[decoded, error]``: the column ``codec.field`` of ``batch`` (the records read, with
    ``headers`` when ``headers``) decoded into ``utc_arrow_type(codec.spark_type)`` (null where
    a record is null or corrupt), and per record the reason it is corrupt (else null)."""
    native_decoded = _native_decode(batch, codec, headers)
    if native_decoded is not None:
        return native_decoded
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    header_lists = batch.column("headers").to_pylist() if headers else [None] * len(topics)
    raw = batch.column(codec.field).to_pylist()
    values: list[Any] = []
    errors: list[str | None] = []
    for i, data in enumerate(raw):
        where = f"{topics[i]}/{partitions[i]} at offset {offsets[i]}"
        record_headers = [(h["key"], h["value"]) for h in header_lists[i] or ()]
        ctx = SerializationContext(topics[i], codec.message_field, record_headers)
        try:
            values.append(decode_one(codec, data, ctx, where))
            errors.append(None)
        except _Corrupt as exc:
            values.append(None)
            errors.append(str(exc))
    arrow_type = utc_arrow_type(codec.spark_type)
    return [_arrow(values, errors, arrow_type, codec.field), pa.array(errors, pa.string())]


def _native_decode(batch: pa.RecordBatch, codec: FieldCodec,
                   headers: bool) -> list[pa.Array] | None:
    """``[decoded, error]`` columns of ``codec`` decoded by :mod:`.fast` (Avro), its left-over
    records by :func:`decode_one`; None when the codec is decoded by :func:`decode_one`
    alone."""
    if codec.schema.format != "avro":
        return None
    decoder = fast.native_avro(codec.field, codec.schema.schema_str, codec.spark_type,
                               codec.registry)
    if decoder is None:
        return None

    def where(i: int) -> str:
        return (f"{batch.column('topic')[i].as_py()}/{batch.column('partition')[i].as_py()} "
                f"at offset {batch.column('offset')[i].as_py()}")

    raw = batch.column(codec.field)
    decoded = decoder.decode(raw.cast(pa.binary()), where)
    errors = decoded.errors
    left = sorted({*decoded.fallback,
                   *fast.header_rows(batch.column("headers") if headers else None,
                                     codec.field)})
    if not left:
        return [decoded.values, pa.array(errors, pa.string())]
    header_lists = batch.column("headers") if headers else None
    values: list[Any] = []
    for i in left:
        record_headers = [(h["key"], h["value"]) for h in
                          (header_lists[i].as_py() if header_lists is not None else None) or ()]
        ctx = SerializationContext(batch.column("topic")[i].as_py(), codec.message_field,
                                   record_headers)
        try:
            values.append(decode_one(codec, raw[i].as_py(), ctx, where(i)))
            errors[i] = None
        except _Corrupt as exc:
            values.append(None)
            errors[i] = str(exc)
    slow_errors = [errors[i] for i in left]
    slow = _arrow(values, slow_errors, decoded.values.type, codec.field)
    for i, error in zip(left, slow_errors, strict=True):
        errors[i] = error
    # The rows left over take their values from `slow`; every other row from `decoded`.
    source = pa.chunked_array([decoded.values, slow]).combine_chunks()
    index = list(range(len(decoded.values)))
    for k, i in enumerate(left):
        index[i] = len(decoded.values) + k
    return [source.take(pa.array(index, pa.int64())), pa.array(errors, pa.string())]


def _arrow(values: list[Any], errors: list[str | None], arrow_type: pa.DataType,
           field: str) -> pa.Array:
    """``values`` as an Arrow array; a value that does not fit (a decimal too wide, a number
    out of range) is nulled and its record marked corrupt in ``errors``."""
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        for i, value in enumerate(values):
            try:
                pa.array([value], type=arrow_type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                values[i] = None
                errors[i] = f"{field} does not fit the reader schema's Spark type: {exc}"
        return pa.array(values, type=arrow_type)


def _encoder(codec: FieldCodec) -> Callable[[Any, SerializationContext], bytes | None]:
    """The process's serializer of ``codec``, taking a Spark row value."""
    found = _ENCODERS.get(codec)
    if found is not None:
        return found
    client = registry_client(codec.registry)
    schema, dtype, conf = codec.schema, codec.spark_type, dict(codec.serializer_conf)
    if schema.format == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        avro_serializer = AvroSerializer(client, schema.schema_str, conf=conf)

        def encode(value: Any, ctx: SerializationContext) -> bytes | None:
            return avro_serializer(avro.from_spark(value, dtype), ctx)
    elif schema.format == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        json_serializer = JSONSerializer(schema.schema_str, client, conf=conf)

        def encode(value: Any, ctx: SerializationContext) -> bytes | None:
            return json_serializer(json_schema.from_spark(value, dtype), ctx)
    else:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        cls = message_class_of(schema)
        proto_serializer = ProtobufSerializer(cls, client, conf=conf)

        def encode(value: Any, ctx: SerializationContext) -> bytes | None:
            return proto_serializer(protobuf.from_spark(value, cls), ctx)
    _ENCODERS[codec] = encode
    return encode


def _schema_name(schema: ResolvedSchema) -> str:
    if schema.subject is not None:
        return f"{schema.subject!r} v{schema.version} (id {schema.schema_id})"
    return f"id {schema.schema_id}" if schema.schema_id is not None else "given inline"


def encode_batches(codecs: tuple[FieldCodec, ...], topic: str | None) -> \
        Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that replaces each codec's column by its encoded bytes
    (a null stays null, a tombstone) and, when a serializer puts the schema id in headers,
    appends them to ``headers``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield _encode_batch(batch, codecs, topic)

    return run


def _encode_batch(batch: pa.RecordBatch, codecs: tuple[FieldCodec, ...],
                  topic: str | None) -> pa.RecordBatch:
    names = list(batch.schema.names)
    topics = batch.column("topic").to_pylist() if "topic" in names else [topic] * batch.num_rows
    header_lists = [list(h or ()) for h in batch.column("headers").to_pylist()] \
        if "headers" in names else [[] for _ in range(batch.num_rows)]
    columns = {name: batch.column(name) for name in names}
    for codec in codecs:
        encode = _encoder(codec)
        encoded: list[bytes | None] = []
        for i, value in enumerate(batch.column(codec.field).to_pylist()):
            if value is None:
                encoded.append(None)
                continue
            record_headers: list[Any] = []
            ctx = SerializationContext(str(topics[i] if topic is None else topic),
                                       codec.message_field, record_headers)
            try:
                encoded.append(encode(value, ctx))
            except _ClientError as exc:
                raise SchemaRegistryError(
                    f"the Schema Registry at {url_of(codec.registry)} refused the schema of "
                    f"the {codec.field} column: {exc}. Nothing was written.") from None
            except Exception as exc:
                if is_transport_error(exc):
                    raise unreachable(codec.registry, f"the schema of the {codec.field} column",
                                      exc) from None
                raise WriteConfigError(
                    f"a row's {codec.field} does not fit the {codec.schema.format} schema "
                    f"{_schema_name(codec.schema)}: {type(exc).__name__}: {_first_line(exc)}. "
                    "Fix the rows or the schema; nothing was written.") from None
            header_lists[i] += [{"key": k, "value": v} for k, v in record_headers]
        columns[codec.field] = pa.array(encoded, pa.binary())
    if any(header_lists):
        columns["headers"] = pa.array(header_lists, pa.list_(pa.struct(
            [("key", pa.string()), ("value", pa.binary())])))
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
