"""Kafka values decoded natively into Arrow columns (issue 53): Avro in the Schema Registry
wire format, by the ``_native`` module's :class:`AvroDecoder` instead of per record in Python.

The decoded column is cast to ``utc_arrow_type(spark_type)``, the same Spark type and values
as today's paths give (:func:`codec.decode_one`, confluent-kafka's ``AvroDeserializer``; Spark's
``from_json``). Where the native decoder could not give the same, today's path stays:

Avro, today's path for a whole codec when
    * the reader schema has a ``uuid`` logical type (confluent-kafka's deserializer makes a
      ``UUID`` of the text, normalizing its case and refusing text that is not a UUID;
      arrow-avro reads it as 16 bytes),
    * arrow-avro cannot read the reader schema, or its Arrow type does not cast to the Spark
      type's;

Avro, today's path for some records:
    * records whose schema id is in the ``__key_schema_id``/``__value_schema_id`` headers
      (the payload then has no wire-format prefix),
    * records whose writer schema has references to other subjects, is not Avro, or that
      arrow-avro cannot resolve against the reader schema (those are corrupt on today's path
      too, with fastavro's reason).

JSON (a DDL schema) is decoded natively by :mod:`.json_arrow` (``native_json``): pyarrow's
C++ JSON reader, and a parser following Jackson's grammar and Spark's conversions for the
records the reader refuses or would read otherwise, give ``from_json``'s values and corrupt
records exactly (``spark/read/decode.py``); a string field given a fraction is left to
Spark's path (``fallback``: its text is the JVM's ``Double.toString``), and a schema with
timestamps, dates, decimals, binary or maps stays Spark's ``from_json``. arrow-json (Rust),
the first candidate, differed from ``from_json`` where a value has another JSON type than the
field (an integer field given a fraction is truncated where Spark finds it corrupt, a string
field given a number is corrupt where Spark keeps its JSON text, a timestamp field given a
number is read in the column's unit where Spark reads seconds).

Unknown schema ids are fetched from the registry once per process (the client caches them)
and the batch is decoded again; an id the registry does not have makes its records corrupt
with the same reason as today's path; a registry that cannot answer is a
:class:`~airflow_provider_kafka_spark.errors.SchemaRegistryError`, never a corrupt record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka.schema_registry.error import SchemaRegistryError as _ClientError
from pyspark.sql import types as T

from airflow_provider_kafka_spark.errors import SchemaRegistryError
from airflow_provider_kafka_spark.spark import native
from airflow_provider_kafka_spark.spark.formats.registry import (
    UNKNOWN_SCHEMA,
    is_transport_error,
    registry_client,
    unreachable,
    url_of,
)
from airflow_provider_kafka_spark.spark.schema import utc_arrow_type

Where = Callable[[int], str]
"""``where(row)``: the row's ``topic/partition at offset N``, for error messages."""


@dataclass(frozen=True)
class Decoded:
    """One column decoded natively.

    Attributes:
        values: the decoded column, of ``utc_arrow_type(spark_type)``; null where a record
            is null, corrupt or in ``fallback``.
        errors: per row, the reason a record is corrupt, else None.
        fallback: the rows left to today's path (see the module's docs).
    """

    values: pa.Array
    errors: list[str | None]
    fallback: list[int] = field(default_factory=list)


def _nullable(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with every nested field nullable."""
    if pa.types.is_struct(arrow_type):
        return pa.struct([pa.field(f.name, _nullable(f.type)) for f in arrow_type])
    if pa.types.is_map(arrow_type):
        return pa.map_(_nullable(arrow_type.key_type), _nullable(arrow_type.item_type))
    if pa.types.is_list(arrow_type):
        return pa.list_(_nullable(arrow_type.value_type))
    return arrow_type


def _retyped(array: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """``array`` (of ``_nullable(arrow_type)``, no offset) as ``arrow_type``: the same buffers
    under the field nullability Spark's type declares. A non-nullable child may hold nulls
    only under a null parent (arrow-avro writes them there; ``pa.array`` writes zeros)."""
    if pa.types.is_struct(arrow_type):
        children = [_retyped(array.field(i), f.type) for i, f in enumerate(arrow_type)]
    elif pa.types.is_map(arrow_type):
        children = [_retyped(array.values, pa.struct([
            pa.field("key", arrow_type.key_type, nullable=False),
            pa.field("value", arrow_type.item_type, arrow_type.item_field.nullable)]))]
    elif pa.types.is_list(arrow_type):
        children = [_retyped(array.values, arrow_type.value_type)]
    else:
        return array
    own = array.buffers()[:array.type.num_buffers]  # buffers() lists the children's too
    return pa.Array.from_buffers(arrow_type, len(array), own, array.null_count, array.offset,
                                 children)


def exact_cast(column: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """``column`` (a native decoder's) cast to ``arrow_type`` exactly, field nullability
    included."""
    return _retyped(column.cast(_nullable(arrow_type)), arrow_type)


def _has_uuid(schema: Any) -> bool:
    if isinstance(schema, dict):
        return schema.get("logicalType") == "uuid" or any(_has_uuid(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_uuid(v) for v in schema)
    return False


class NativeAvro:
    """The process's native decoder of one Avro codec: the reader schema fixed, writer schemas
    added by id as records bring them (fetched once from the registry)."""

    def __init__(self, field_name: str, reader_schema: str, spark_type: T.DataType,
                 registry: tuple[tuple[str, Any], ...]) -> None:
        self.field = field_name
        self.registry = registry
        self.arrow_type = utc_arrow_type(spark_type)
        self.decoder = native.AvroDecoder(reader_schema)
        self.missing: dict[int, str] = {}  # ids the registry does not have: the reason
        pa.array([], self.decoder.arrow_type).cast(self.arrow_type)  # raises if it cannot

    def decode(self, values: pa.Array, where: Where) -> Decoded:
        """``values`` (binary) decoded; unknown ids are fetched once and the batch decoded
        again."""
        column, corrupt, unknown, unsupported = self.decoder.decode(values)
        new = {schema_id: row for row, schema_id in reversed(unknown)
               if schema_id not in self.missing}
        if new:
            for schema_id, row in new.items():
                self._fetch(schema_id, where(row))
            column, corrupt, unknown, unsupported = self.decoder.decode(values)
        errors: list[str | None] = [None] * len(values)
        for row, reason in corrupt:
            errors[row] = f"{self.field} is not avro of the reader schema: {reason}"
        for row, schema_id in unknown:
            errors[row] = self.missing[schema_id]
        return Decoded(exact_cast(column, self.arrow_type), errors, list(unsupported))

    def _fetch(self, schema_id: int, where: str) -> None:
        client = registry_client(self.registry)
        try:
            schema = client.get_schema(schema_id)
        except _ClientError as exc:
            if exc.error_code == UNKNOWN_SCHEMA:
                self.missing[schema_id] = (
                    f"{self.field}: the registry has no schema with this record's id "
                    f"({exc.error_message})")
                return
            raise SchemaRegistryError(
                f"the Schema Registry at {url_of(self.registry)} refused a schema lookup for "
                f"{where}: {exc}. Nothing was committed; re-run when it answers.") from None
        except Exception as exc:
            if is_transport_error(exc):
                raise unreachable(self.registry, f"the schema of {where}", exc) from None
            raise
        if (schema.schema_type or "AVRO") != "AVRO" or schema.references:
            # Today's path resolves references and refuses other types; the id's records go
            # there.
            self.decoder.add_writer_schema(schema_id, "{\"type\": \"unsupported\"}")
            return
        self.decoder.add_writer_schema(schema_id, str(schema.schema_str))


_AVRO: dict[tuple[str, str, str, tuple[tuple[str, Any], ...]], NativeAvro | None] = {}


def native_avro(field_name: str, reader_schema: str, spark_type: T.DataType,
                registry: tuple[tuple[str, Any], ...]) -> NativeAvro | None:
    """The process's native decoder of an Avro codec, or None when today's path must decode
    it (see the module's docs)."""
    key = (field_name, reader_schema, spark_type.json(), registry)
    if key not in _AVRO:
        found: NativeAvro | None = None
        if not _has_uuid(json.loads(reader_schema)):
            try:
                found = NativeAvro(field_name, reader_schema, spark_type, registry)
            except (ValueError, pa.ArrowException):
                found = None
        _AVRO[key] = found
    return _AVRO[key]


def header_rows(headers: pa.Array | None, field_name: str) -> list[int]:
    """The rows whose headers carry the schema id of ``field_name`` (``__value_schema_id``
    or ``__key_schema_id``): their payload has no wire-format prefix."""
    if headers is None or len(headers) == 0:
        return []
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    keys = pc.list_flatten(headers).field("key")
    hits = pc.equal(keys, f"__{field_name}_schema_id").fill_null(False)
    if not pc.any(hits).as_py():
        return []
    parents = pc.list_parent_indices(headers)
    return sorted(set(pc.filter(parents, hits).to_pylist()))
