"""The output schema of a Kafka read: identical to Spark's built-in ``kafka`` source."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

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
