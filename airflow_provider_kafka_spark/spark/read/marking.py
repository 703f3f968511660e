"""Decoding in the readers: each Arrow batch a reader reads is decoded in the reader's own
task into what ``decode_kafka(..., on_corrupt="dead_letter")`` gives through Spark (the
*marked* records: ``key`` and ``value`` decoded, the Kafka columns, ``raw_key``,
``raw_value`` and ``decode_error``), so the records never go through Spark rows to be decoded.

:class:`ReaderDecoding` is built on the driver (``ingest``'s
:meth:`~airflow_provider_kafka_spark.spark.decoded.SliceDecoding.in_readers`), its registry
schemas fixed there, and travels to the tasks as a read option. Per field:

=================  ========================================================================
``bytes``          unchanged; never corrupt
``string``         UTF-8 text; corrupt when not valid UTF-8 (Spark's ``is_valid_utf8``)
``json``           :func:`~airflow_provider_kafka_spark.spark.formats.json_arrow.native_json`
                   (pyarrow's JSON reader, Spark's ``from_json`` semantics); a schema it
                   cannot decode exactly keeps the whole decoding in Spark, and a record it
                   leaves to Spark raises :class:`LeftToSpark` (a landing then reports it and
                   ``ingest`` decodes the slice through Spark instead)
``avro``           arrow-avro (:mod:`~airflow_provider_kafka_spark.spark.formats.fast`), the
                   records it leaves by confluent-kafka's deserializer
``json_schema``,   confluent-kafka's deserializers, per record, in the reader's task (as the
``protobuf``       Spark path does in its ``mapInArrow``)
=================  ========================================================================

The values, corrupt records and reasons are those of the Spark path (tests per format:
``tests/formats/test_marking.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from airflow_provider_kafka_spark.spark.formats.codec import FieldCodec, decode_column
from airflow_provider_kafka_spark.spark.formats.fast import exact_cast
from airflow_provider_kafka_spark.spark.formats.registry import ResolvedSchema
from airflow_provider_kafka_spark.spark.schema import utc_arrow_schema

MARK_COLUMNS = ("raw_key", "raw_value", "decode_error")
"""The columns a marked batch has after the Kafka columns (``decode_kafka``'s
``DEAD_LETTER_COLUMNS``)."""
LEFT_TO_SPARK = "\x00left to Spark's from_json"
"""``decode_error`` of a record the readers left to Spark (``settle_in_spark``)."""
DEAD_LETTER_SOURCES = ("topic", "partition", "offset", "timestamp", "headers")
"""The Kafka columns a dead letter keeps, after its ``key`` and ``value`` as read."""


class LeftToSpark(Exception):
    """A batch holds records only Spark's path decodes exactly (``json_arrow``'s fallback:
    a ``string`` field given a fraction, which Spark prints with the JVM's
    ``Double.toString``)."""

    def __init__(self, field: str, rows: int) -> None:
        super().__init__(f"{rows} record(s) whose {field} only Spark's from_json decodes "
                         "exactly (a string field given a fraction)")
        self.rows = rows


@dataclass(frozen=True)
class FieldDecoder:
    """How the readers decode one of ``key``/``value``.

    :param field: ``"key"`` or ``"value"``.
    :param format: ``bytes``, ``string``, ``json`` or a registry format.
    :param json_struct: (``json``) the schema, as ``StructType.json()``.
    :param json_text: (``json``) the schema as a corrupt record's reason shows it.
    :param codec: (registry formats) the codec, its reader schema fixed on the driver.
    """

    field: str
    format: str
    json_struct: str | None = None
    json_text: str | None = None
    codec: FieldCodec | None = None

    def decode(self, batch: pa.RecordBatch,
               headers: bool) -> tuple[pa.Array, pa.Array | None, list[int]]:
        """The field of ``batch`` decoded; per record the reason it is corrupt (None: no
        record can be); the rows only Spark's path decodes exactly (JSON's fallback), null in
        the values."""
        raw = batch.column(self.field)
        if self.format == "bytes":
            return raw, None, []
        if self.format == "string":
            return (*_utf8(raw, self.field), [])
        if self.format == "json":
            from airflow_provider_kafka_spark.spark.formats.json_arrow import native_json

            decoder = native_json(self.field, self._struct, self.json_text)
            assert decoder is not None  # in_readers built this only for a native schema
            decoded = decoder.decode(raw)
            return decoded.values, pa.array(decoded.errors, pa.string()), decoded.fallback
        assert self.codec is not None
        values, errors = decode_column(batch, self.codec, headers)
        return values, errors, []

    @cached_property
    def _struct(self) -> StructType:
        assert self.json_struct is not None
        return StructType.fromJson(json.loads(self.json_struct))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_json` reads it back)."""
        codec = None if self.codec is None else {
            "schema": asdict(self.codec.schema), "registry": [list(kv) for kv in
                                                              self.codec.registry],
            "spark_json": self.codec.spark_json}
        return {"field": self.field, "format": self.format, "json_struct": self.json_struct,
                "json_text": self.json_text, "codec": codec}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FieldDecoder:
        """The decoder :meth:`to_json` wrote."""
        codec = data.get("codec")
        if codec is not None:
            schema = dict(codec["schema"])
            schema["imports"] = tuple(tuple(i) for i in schema.get("imports") or ())
            codec = FieldCodec(data["field"], ResolvedSchema(**schema),
                               tuple((str(k), v) for k, v in codec["registry"]),
                               codec["spark_json"])
        return cls(data["field"], data["format"], data.get("json_struct"),
                   data.get("json_text"), codec)


def _utf8(raw: pa.Array, field: str) -> tuple[pa.Array, pa.Array | None]:
    """``raw`` as text; a value that is not valid UTF-8 is null and corrupt (the reason the
    Spark path gives)."""
    try:
        return raw.cast(pa.string()), None
    except pa.ArrowInvalid:
        pass
    values: list[str | None] = []
    errors: list[str | None] = []
    for data in raw.to_pylist():
        try:
            values.append(None if data is None else data.decode("utf-8"))
            errors.append(None)
        except UnicodeDecodeError:
            values.append(None)
            errors.append(f"{field} is not valid string")
    return pa.array(values, pa.string()), pa.array(errors, pa.string())


@dataclass(frozen=True)
class ReaderDecoding:
    """What the readers decode (``key`` and ``value``) and the Spark schema of what they give:
    ``marked_schema``, ``decode_kafka(..., on_corrupt="dead_letter")``'s output schema of the
    read (as ``StructType.json()``). A record only Spark decodes exactly raises
    :class:`LeftToSpark`; with ``settle_in_spark`` it is marked instead (:data:`LEFT_TO_SPARK`
    in ``decode_error``, both fields' bytes kept) for
    :func:`~airflow_provider_kafka_spark.spark.read.decode.settle_left_to_spark` to decode in
    Spark."""

    key: FieldDecoder
    value: FieldDecoder
    marked_schema: str
    settle_in_spark: bool = False

    @property
    def leaves_to_spark(self) -> bool:
        """Whether a batch may hold records only Spark decodes exactly (a field decoded as
        JSON)."""
        return "json" in (self.key.format, self.value.format)

    @cached_property
    def spark_schema(self) -> StructType:
        """The marked records' Spark schema."""
        return StructType.fromJson(json.loads(self.marked_schema))

    @cached_property
    def _arrow_schema(self) -> pa.Schema:
        return utc_arrow_schema(self.spark_schema)

    def mark(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (the records read) decoded and marked: a corrupt record has null ``key``
        and ``value``, its bytes in ``raw_key``/``raw_value`` and the reason in
        ``decode_error`` (the key's when both are corrupt); a good one the reverse."""
        headers = "headers" in batch.schema.names
        key, key_errors, key_left = self.key.decode(batch, headers)
        value, value_errors, value_left = self.value.decode(batch, headers)
        n = batch.num_rows
        errors = [e for e in (key_errors, value_errors) if e is not None]
        reason = (pa.nulls(n, pa.string()) if not errors else errors[0] if len(errors) == 1
                  else pc.coalesce(*errors))
        left = sorted({*key_left, *value_left})
        if left:
            if not self.settle_in_spark:
                raise LeftToSpark("key" if key_left else "value", len(left))
            marks = np.zeros(n, dtype=bool)
            marks[left] = True
            reason = pc.if_else(pa.array(marks), pa.scalar(LEFT_TO_SPARK, pa.string()), reason)
        bad = reason.is_valid().to_numpy(zero_copy_only=False)
        if bad.any():
            rows = np.arange(n, dtype=np.int64)
            good_rows = pa.array(rows, mask=bad)
            bad_rows = pa.array(rows, mask=~bad)
            key, value = key.take(good_rows), value.take(good_rows)
            raw_key = batch.column("key").take(bad_rows)
            raw_value = batch.column("value").take(bad_rows)
        else:
            raw_key = raw_value = pa.nulls(n, pa.binary())
        schema = self._arrow_schema
        columns = [key, value]
        columns += [batch.column(name) for name in batch.schema.names
                    if name not in ("key", "value")]
        columns += [raw_key, raw_value, reason]
        return pa.RecordBatch.from_arrays(
            [c if c.type == f.type else exact_cast(c, f.type) for c, f in zip(columns, schema,
                                                                              strict=True)],
            schema=schema)

    def to_json(self) -> str:
        """The read option's text (:meth:`from_json` reads it back)."""
        return json.dumps({"key": self.key.to_json(), "value": self.value.to_json(),
                           "marked_schema": self.marked_schema,
                           "settle_in_spark": self.settle_in_spark})

    @classmethod
    def from_json(cls, text: str) -> ReaderDecoding:
        """The decoding :meth:`to_json` wrote."""
        data = json.loads(text)
        return cls(FieldDecoder.from_json(data["key"]), FieldDecoder.from_json(data["value"]),
                   data["marked_schema"], bool(data.get("settle_in_spark")))


def dead_letters(marked: pa.RecordBatch) -> pa.RecordBatch:
    """The dead letters of the corrupt records of ``marked`` (all of them corrupt): ``key``
    and ``value`` as read, the Kafka columns of :data:`DEAD_LETTER_SOURCES`, the reason in
    ``error``: the columns the Spark path writes to a sink's dead-letter output."""
    names = marked.schema.names
    columns = [marked.column("raw_key"), marked.column("raw_value")]
    kept = [c for c in DEAD_LETTER_SOURCES if c in names]
    columns += [marked.column(c) for c in kept]
    columns.append(marked.column("decode_error"))
    return pa.RecordBatch.from_arrays(columns, names=["key", "value", *kept, "error"])
