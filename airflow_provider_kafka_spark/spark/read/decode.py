"""Decode the binary ``key``/``value`` columns of a Kafka DataFrame into typed columns.

Formats: ``"bytes"`` (unchanged), ``"string"`` (UTF-8), ``"json"`` (a struct column of the given
DDL schema; select ``value.*`` to flatten it), and the Schema Registry formats ``"avro"``,
``"protobuf"`` and ``"json_schema"``: Confluent wire-format records (the schema id after a
magic byte, or in the ``__key_schema_id``/``__value_schema_id`` headers) decoded by
confluent-kafka's own deserializers on the executors into a struct column of the *reader
schema* (``Subject(name, version)``, or given inline). Records written with older compatible
writer schemas decode into the reader schema; see :mod:`~airflow_provider_kafka_spark.spark.
formats` for the type mapping.

A record is *corrupt* when a non-null key or value is not valid UTF-8, for ``"json"`` does not
parse into the schema, or for a registry format cannot be decoded (not wire format, an unknown
schema id, a writer schema the reader schema cannot resolve, a truncated payload). Null keys
and values (tombstones) decode to null and are not corrupt. A registry that cannot be reached
or refuses the client is never a corrupt record: the job fails with
:class:`~airflow_provider_kafka_spark.errors.SchemaRegistryError`.

Policies for corrupt records (``on_corrupt``):

``"fail"``
    The Spark job fails; the message names topic, partition and offset.
``"skip"``
    Corrupt records are dropped; pass an ``Observation`` to count them.
``"dead_letter"``
    Every record is kept. Corrupt ones have null decoded columns, their original bytes in
    ``raw_key``/``raw_value`` and the reason in ``decode_error`` (null for good records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from google.protobuf.message import Message
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from airflow_provider_kafka_spark.errors import DecodeError
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.options import DECODE_FORMATS as FORMATS
from airflow_provider_kafka_spark.options import ON_CORRUPT, REGISTRY_FORMATS
from airflow_provider_kafka_spark.spark.formats import (
    FieldCodec,
    Subject,
    decode_batches,
    decoded_columns,
    frozen_config,
    resolve_schema,
    spark_type_of,
)
from airflow_provider_kafka_spark.spark.schema import (
    check_kafka_frame,
    column_named,
    spark_compares,
)

Format = Literal["bytes", "string", "json", "avro", "protobuf", "json_schema"]
OnCorrupt = Literal["fail", "skip", "dead_letter"]
Schema = str | StructType | Subject | type[Message]
CORRUPT_RECORDS_METRIC = "corrupt_records"
DEAD_LETTER_COLUMNS = ("raw_key", "raw_value", "decode_error")
"""The columns ``on_corrupt="dead_letter"`` adds: the original bytes and the reason."""
_CORRUPT_FIELD = "_corrupt_record"


def decode_kafka(
    df: DataFrame,
    *,
    key_format: Format = "bytes",
    value_format: Format = "bytes",
    key_schema: Schema | None = None,
    value_schema: Schema | None = None,
    schema_registry: Mapping[str, Any] | None = None,
    on_corrupt: OnCorrupt = "fail",
    observation: Observation | None = None,
) -> DataFrame:
    """``df`` with ``key`` and ``value`` decoded in place; all other columns unchanged.

    Args:
        df: a DataFrame with binary ``key`` and ``value`` columns (``read_kafka`` output).
        key_format, value_format: ``"bytes"``, ``"string"``, ``"json"``, ``"avro"``,
            ``"protobuf"`` or ``"json_schema"``.
        key_schema, value_schema: for ``"json"``, a DDL string (``"id long, name string"``) or
            ``StructType``; for a registry format, the reader schema: ``Subject(name,
            version)`` (``version="latest"`` is fixed when the job starts) or inline (Avro or
            JSON Schema text; a generated Protobuf message class). Required for those formats
            and only allowed there.
        schema_registry: confluent-kafka's ``SchemaRegistryClient`` config (``url``,
            ``basic.auth.user.info``...); required for the registry formats.
        on_corrupt: ``"fail"``, ``"skip"`` or ``"dead_letter"`` (see the module docs).
        observation: when given, records the metric ``corrupt_records`` (how many corrupt
            records the job saw) once an action has run.

    Raises:
        DecodeError: ``df`` lacks read_kafka's columns, has columns Spark cannot tell apart
            or a column named like one decoding adds (``raw_key``, ``raw_value`` and
            ``decode_error`` with ``"dead_letter"``); a json schema with a top-level field
            ``_corrupt_record`` (any case; decoding adds it); an unknown format or policy, a
            missing/unneeded/invalid schema, or an ``observation`` that is not one.
        SchemaRegistryError: the registry could not answer the reader schema's lookup (and,
            when an action runs, a writer schema's).
    """
    df = check_kafka_frame(df, ("key", "value", "topic", "partition", "offset"),
                           caller="decode_kafka", error=DecodeError)
    if on_corrupt not in ON_CORRUPT:
        raise DecodeError(f"on_corrupt={shown(on_corrupt)} is not valid; use one of "
                          f"{ON_CORRUPT}.")
    if observation is not None and not isinstance(observation, Observation):
        raise DecodeError(f"observation={shown(observation)} is not an Observation; pass a "
                          "pyspark.sql.Observation (or None).")
    original = list(df.columns)
    if on_corrupt == "dead_letter":
        _check_unused(df, DEAD_LETTER_COLUMNS, "on_corrupt='dead_letter' adds it")
    codecs = tuple(registry_codec(field, fmt, schema, schema_registry)
                   for field, fmt, schema in (("key", key_format, key_schema),
                                              ("value", value_format, value_schema))
                   if fmt in REGISTRY_FORMATS)
    _check_unused(df, [c.name for c in decoded_columns(codecs)],
                  "the registry formats use it internally")
    if not codecs and schema_registry is not None:
        raise DecodeError("schema_registry is only used with the formats "
                          f"{REGISTRY_FORMATS}; remove it, or pass one of them.")
    key, key_bad, key_reason = _decoder("key", key_format, key_schema)
    value, value_bad, value_reason = _decoder("value", value_format, value_schema)
    if codecs:
        df = df.mapInArrow(decode_batches(codecs, "headers" in original),
                           StructType([*df.schema.fields, *decoded_columns(codecs)]))
    corrupt = key_bad | value_bad
    reason = F.when(key_bad, key_reason).when(value_bad, value_reason)
    if observation is not None:
        df = df.observe(observation, F.count_if(corrupt).alias(CORRUPT_RECORDS_METRIC))
    others = [F.col(_quoted(c)) for c in original if c not in ("key", "value")]
    if on_corrupt == "skip":
        return df.where(~corrupt).select(key, value, *others)
    if on_corrupt == "dead_letter":
        return df.select(
            F.when(~corrupt, key).alias("key"),
            F.when(~corrupt, value).alias("value"),
            *others,
            F.when(corrupt, F.col("key")).alias("raw_key"),
            F.when(corrupt, F.col("value")).alias("raw_value"),
            reason.alias("decode_error"),
        )
    message = F.concat(
        F.lit("corrupt record in "), F.col("topic"), F.lit("/"),
        F.col("partition").cast("string"), F.lit(" at offset "), F.col("offset").cast("string"),
        F.lit(": "), reason,
        F.lit(". Pass on_corrupt='skip' or 'dead_letter' to keep going."),
    )
    guard = F.when(corrupt, F.raise_error(message)).otherwise(F.lit(True))
    return df.where(guard).select(key, value, *others)


def settle_left_to_spark(marked: DataFrame, *, key_format: Format, value_format: Format,
                         key_schema: Schema | None = None, value_schema: Schema | None = None,
                         **_: Any) -> DataFrame:
    """``marked`` (the readers' marked records: ``decode_kafka``'s ``dead_letter`` output)
    with the records they left to Spark (``decode_error`` is
    :data:`~airflow_provider_kafka_spark.spark.read.marking.LEFT_TO_SPARK`, both fields'
    bytes in ``raw_key``/``raw_value``) decoded here as :func:`decode_kafka` decodes them,
    in the same pass. Formats ``bytes``, ``string`` and ``json`` only (``decode_kafka``'s
    other options are accepted and unused)."""
    from airflow_provider_kafka_spark.spark.read.marking import LEFT_TO_SPARK

    left = F.col("decode_error") == F.lit(LEFT_TO_SPARK)
    others = [c for c in marked.columns if c not in ("key", "value", *DEAD_LETTER_COLUMNS)]
    raw = marked.select(
        F.col("key").alias("_native_key"), F.col("value").alias("_native_value"),
        F.col("raw_key").alias("key"), F.col("raw_value").alias("value"),
        *[F.col(_quoted(c)) for c in others], F.col("decode_error"))
    key, key_bad, key_reason = _decoder("key", key_format, key_schema)
    value, value_bad, value_reason = _decoder("value", value_format, value_schema)
    bad = key_bad | value_bad
    return raw.select(
        F.when(left, F.when(~bad, key)).otherwise(F.col("_native_key")).alias("key"),
        F.when(left, F.when(~bad, value)).otherwise(F.col("_native_value")).alias("value"),
        *[F.col(_quoted(c)) for c in others],
        F.when(~left | bad, F.col("key")).alias("raw_key"),
        F.when(~left | bad, F.col("value")).alias("raw_value"),
        F.when(left, F.when(key_bad, key_reason).when(value_bad, value_reason))
        .otherwise(F.col("decode_error")).alias("decode_error"))


def _check_unused(df: DataFrame, added: Sequence[str], why: str) -> None:
    """A DecodeError when ``df`` has a column named like one of ``added``."""
    for name in added:
        taken = column_named(df, name)
        if taken is not None:
            raise DecodeError(
                f"decode_kafka cannot add the column {name!r} ({why}) to a DataFrame that "
                f"has the column {taken!r} ({spark_compares(df)}); rename or drop that "
                f"column first, e.g. df.withColumnRenamed({taken!r}, 'my_{name}').")


def _quoted(column: str) -> str:
    """``column`` as a Spark column reference to that exact name (dots and backticks too)."""
    return "`" + column.replace("`", "``") + "`"


def registry_codec(column: str, fmt: str, schema: Schema | None,
           registry: Mapping[str, Any] | None) -> FieldCodec:
    """The executors' decoder of a registry-format column, its reader schema fixed now."""
    if schema is None:
        raise DecodeError(
            f"{column}_format={fmt!r} needs {column}_schema, the reader schema: "
            f"Subject('<topic>-{column}') for the subject's latest version, "
            f"Subject('<topic>-{column}', 3) for a version, or the schema inline.")
    if isinstance(schema, StructType):
        raise DecodeError(f"{column}_schema for {fmt!r} is a Subject or the schema itself, not "
                          "a StructType (the Spark type comes from the reader schema).")
    config = frozen_config(registry, f"{column}_format={fmt!r}")
    resolved = resolve_schema(config, fmt, schema)
    return FieldCodec(column, resolved, config, spark_type_of(resolved).json())


def _decoder(column: str, fmt: str, schema: Schema | None) -> tuple[Column, Column, Column]:
    """(decoded column named ``column``, is-corrupt condition, reason) for one of key/value."""
    if fmt not in FORMATS:
        raise DecodeError(f"{column}_format={shown(fmt)} is not valid; use one of {FORMATS}.")
    if fmt in REGISTRY_FORMATS:
        error = F.col(f"_{column}_error")
        return F.col(f"_{column}_decoded").alias(column), error.isNotNull(), error
    if fmt != "json" and schema is not None:
        raise DecodeError(f"{column}_schema is only used with {column}_format='json' or a "
                          f"registry format {REGISTRY_FORMATS}; remove it, or pass one.")
    raw = F.col(column)
    if fmt == "bytes":
        return raw.alias(column), F.lit(False), F.lit(None)
    text = raw.cast("string")
    bad_utf8 = raw.isNotNull() & ~F.is_valid_utf8(text)
    if fmt == "string":
        return text.alias(column), bad_utf8, F.lit(f"{column} is not valid string")
    if isinstance(schema, (Subject, type)):
        raise DecodeError(f"{column}_schema for 'json' is a DDL string or StructType; a "
                          "Subject or message class is for the registry formats.")
    struct = json_struct(column, schema)
    _check_no_corrupt_field(column, struct)
    with_corrupt = StructType([*struct.fields, StructField(_CORRUPT_FIELD, StringType())])
    parsed = F.from_json(text, with_corrupt,
                         {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT_FIELD})
    bad = bad_utf8 | (raw.isNotNull() & (parsed.isNull() | parsed[_CORRUPT_FIELD].isNotNull()))
    reason = _reason(column, schema if isinstance(schema, str) else struct)
    return parsed.dropFields(_CORRUPT_FIELD).alias(column), bad, F.lit(reason)


def json_struct(column: str, schema: str | StructType | None) -> StructType:
    if schema is None:
        raise DecodeError(f"{column}_format='json' needs {column}_schema, e.g. "
                          "'id long, name string'.")
    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str):
        raise DecodeError(f"{column}_schema={shown(schema)} is not a schema; pass a DDL string "
                          "such as 'id long, name string' or a StructType.")
    try:
        parsed = StructType.fromDDL(schema)
    except Exception as exc:  # Spark's parser raises several exception types.
        raise DecodeError(f"{column}_schema {shown(schema)} is not a valid DDL schema: {exc} "
                          "Write it as 'id long, name string'.") from None
    if not isinstance(parsed, StructType):
        raise DecodeError(f"{column}_schema {shown(schema)} must describe columns, e.g. "
                          "'id long'.")
    return parsed


def _check_no_corrupt_field(column: str, struct: StructType) -> None:
    """A DecodeError when the json schema has a top-level field named like the one decoding
    adds to it (Spark's parse puts the text of a record that does not parse there)."""
    for field in struct.fieldNames():
        if field.lower() == _CORRUPT_FIELD:
            raise DecodeError(
                f"{column}_schema has the field {field!r}; decode_kafka adds "
                f"{_CORRUPT_FIELD!r} (compared ignoring case) to a json schema to find the "
                f"records that do not parse. Rename that field in the schema, or leave it "
                f"out; to read a JSON key of that name, decode {column} as 'string' and parse "
                "it with from_json yourself.")


def _reason(column: str, schema: str | StructType) -> str:
    shown = schema if isinstance(schema, str) else schema.simpleString()
    return f"{column} is not JSON matching the schema {shown}"
