"""Decode the binary ``key``/``value`` columns of a Kafka DataFrame into typed columns.

Formats: ``"bytes"`` (unchanged), ``"string"`` (UTF-8), ``"json"`` (a struct column of the given
DDL schema; select ``value.*`` to flatten it). A record is *corrupt* when a non-null key or
value is not valid UTF-8 or, for ``"json"``, does not parse into the schema. Null keys and
values (tombstones) decode to null and are not corrupt.

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

from typing import Literal

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.spark.errors import DecodeError

Format = Literal["bytes", "string", "json"]
OnCorrupt = Literal["fail", "skip", "dead_letter"]
FORMATS: tuple[str, ...] = ("bytes", "string", "json")
ON_CORRUPT: tuple[str, ...] = ("fail", "skip", "dead_letter")
CORRUPT_RECORDS_METRIC = "corrupt_records"
_CORRUPT_FIELD = "_corrupt_record"


def decode_kafka(
    df: DataFrame,
    *,
    key_format: Format = "bytes",
    value_format: Format = "bytes",
    key_schema: str | StructType | None = None,
    value_schema: str | StructType | None = None,
    on_corrupt: OnCorrupt = "fail",
    observation: Observation | None = None,
) -> DataFrame:
    """``df`` with ``key`` and ``value`` decoded in place; all other columns unchanged.

    Args:
        df: a DataFrame with binary ``key`` and ``value`` columns (``read_kafka`` output).
        key_format, value_format: ``"bytes"``, ``"string"`` or ``"json"``.
        key_schema, value_schema: a DDL string (``"id long, name string"``) or ``StructType``;
            required for ``"json"`` and only allowed there.
        on_corrupt: ``"fail"``, ``"skip"`` or ``"dead_letter"`` (see the module docs).
        observation: when given, records the metric ``corrupt_records`` (how many corrupt
            records the job saw) once an action has run.

    Raises:
        DecodeError: ``df`` lacks read_kafka's columns, an unknown format or policy, a
            missing/unneeded/invalid schema, or an ``observation`` that is not one.
    """
    needed = ("key", "value", "topic", "partition", "offset")
    if not isinstance(df, DataFrame) or not set(needed) <= set(df.columns):
        got = (f"a DataFrame with the columns {df.columns}" if isinstance(df, DataFrame)
               else shown(df))
        raise DecodeError(f"decode_kafka needs a DataFrame with the columns {list(needed)}, got "
                          f"{got}; pass the DataFrame of read_kafka.")
    if on_corrupt not in ON_CORRUPT:
        raise DecodeError(f"on_corrupt={shown(on_corrupt)} is not valid; use one of "
                          f"{ON_CORRUPT}.")
    if observation is not None and not isinstance(observation, Observation):
        raise DecodeError(f"observation={shown(observation)} is not an Observation; pass a "
                          "pyspark.sql.Observation (or None).")
    key, key_bad = _decoder("key", key_format, key_schema)
    value, value_bad = _decoder("value", value_format, value_schema)
    corrupt = key_bad | value_bad
    reason = (F.when(key_bad, F.lit(f"key is not valid {key_format}"))
              .when(value_bad, F.lit(_reason(value_format, value_schema))))
    if observation is not None:
        df = df.observe(observation, F.count_if(corrupt).alias(CORRUPT_RECORDS_METRIC))
    others = [F.col(f"`{c}`") for c in df.columns if c not in ("key", "value")]
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


def _decoder(column: str, fmt: str, schema: str | StructType | None) -> tuple[Column, Column]:
    """(decoded column named ``column``, is-corrupt condition) for one of key/value."""
    if fmt not in FORMATS:
        raise DecodeError(f"{column}_format={shown(fmt)} is not valid; use one of {FORMATS}.")
    if fmt != "json" and schema is not None:
        raise DecodeError(f"{column}_schema is only used with {column}_format='json'; remove "
                          f"it, or pass {column}_format='json'.")
    raw = F.col(column)
    if fmt == "bytes":
        return raw.alias(column), F.lit(False)
    text = raw.cast("string")
    bad_utf8 = raw.isNotNull() & ~F.is_valid_utf8(text)
    if fmt == "string":
        return text.alias(column), bad_utf8
    struct = _struct(column, schema)
    with_corrupt = StructType([*struct.fields, StructField(_CORRUPT_FIELD, StringType())])
    parsed = F.from_json(text, with_corrupt,
                         {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT_FIELD})
    bad = bad_utf8 | (raw.isNotNull() & (parsed.isNull() | parsed[_CORRUPT_FIELD].isNotNull()))
    return parsed.dropFields(_CORRUPT_FIELD).alias(column), bad


def _struct(column: str, schema: str | StructType | None) -> StructType:
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


def _reason(fmt: str, schema: str | StructType | None) -> str:
    if fmt == "json":
        shown = schema if isinstance(schema, str) else getattr(schema, "simpleString", str)()
        return f"value is not JSON matching the schema {shown}"
    return f"value is not valid {fmt}"
