"""The output schema of a Kafka read: identical to Spark's built-in ``kafka`` source; the
check that a DataFrame handed to ``decode_kafka`` or ``summarize`` has it; and its Arrow form
(UTC timestamps) on every pyspark 4.x."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.pandas import types as arrow_types
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.options import shown

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)

_COLUMNS = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)


def kafka_schema(include_headers: bool = True) -> StructType:
    """``key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int`` and, with ``include_headers``,
    ``headers array<struct<key string, value binary>>``; every column nullable.

    ``timestampType`` follows the Java client: 0 = CreateTime, 1 = LogAppendTime,
    -1 = no timestamp.
    """
    fields = list(_COLUMNS.fields)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def check_kafka_frame(df: object, needed: Sequence[str], *, caller: str,
                      error: type[ConfigurationError] = ConfigurationError,
                      once: Collection[str] | None = None) -> DataFrame:
    """``df``, once it is a DataFrame with the ``needed`` columns of a Kafka read and Spark
    can tell its columns apart (those in ``once``, default all); no Spark job runs.

    Raises:
        ConfigurationError (``error``): naming ``caller``, the columns and what to pass.
    """
    if not isinstance(df, DataFrame) or not set(needed) <= set(df.columns):
        got = (f"a DataFrame with the columns {df.columns}" if isinstance(df, DataFrame)
               else shown(df))
        raise error(f"{caller} needs a DataFrame with the columns {list(needed)}, got {got}; "
                    "pass the DataFrame of read_kafka.")
    same = same_columns(df, once)
    if same:
        raise error(f"{caller} cannot tell the columns {same} of its DataFrame apart "
                    f"({spark_compares(df)}); give each column its own name (e.g. "
                    "df.toDF(*names), or .alias() in the select that made them) and pass it "
                    "again.")
    return df


def same_columns(df: DataFrame, among: Collection[str] | None = None) -> list[str]:
    """The first group of ``df``'s column names that Spark cannot tell apart (the same name, or
    the same but for case unless ``spark.sql.caseSensitive``), among the names ``among`` (by
    default all); ``[]`` when there is none."""
    sensitive = _case_sensitive(df)
    groups: dict[str, list[str]] = {}
    for name in df.columns:
        groups.setdefault(name if sensitive else name.lower(), []).append(name)
    wanted = None if among is None else {n if sensitive else n.lower() for n in among}
    for key, names in groups.items():
        if len(names) > 1 and (wanted is None or key in wanted):
            return names
    return []


def column_named(df: DataFrame, name: str) -> str | None:
    """The column of ``df`` that Spark takes for ``name`` (the same name, or the same but for
    case unless ``spark.sql.caseSensitive``), or None."""
    sensitive = _case_sensitive(df)
    for column in df.columns:
        if column == name or (not sensitive and column.lower() == name.lower()):
            return column
    return None


def spark_compares(df: DataFrame) -> str:
    """How Spark compares ``df``'s column names, for messages."""
    return ("Spark compares column names as written" if _case_sensitive(df)
            else "Spark compares column names ignoring case")


def _case_sensitive(df: DataFrame) -> bool:
    return str(df.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"


def utc_arrow_schema(schema: StructType) -> Any:
    """The Arrow schema of ``schema``, timestamps in UTC (pyspark 4.3 takes ``timezone=``,
    4.0-4.2 ``timestamp_utc=``)."""
    return _utc(arrow_types.to_arrow_schema, schema)


def utc_arrow_type(data_type: DataType) -> Any:
    """The Arrow type of ``data_type``, timestamps in UTC (as :func:`utc_arrow_schema`)."""
    return _utc(arrow_types.to_arrow_type, data_type)


def _utc(convert: Any, value: Any) -> Any:
    if "timezone" in inspect.signature(convert).parameters:
        return convert(value, timezone="UTC")
    return convert(value, timestamp_utc=True)
