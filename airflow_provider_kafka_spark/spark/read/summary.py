"""Per-partition statistics of a Kafka DataFrame, for logs and XCom."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, StringType, TimestampNTZType, TimestampType

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.spark.schema import check_kafka_frame

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COLUMNS = ("topic", "partition", "offset", "timestamp")
_TYPES = (("topic", StringType, "a string"), ("partition", IntegralType, "an integer"),
          ("offset", IntegralType, "an integer"),
          ("timestamp", (TimestampType, TimestampNTZType), "a timestamp"))


@dataclass(frozen=True, order=True)
class PartitionSummary:
    """What a read returned for one topic partition.

    ``first_offset``/``last_offset`` are the smallest and largest offsets present (both
    inclusive; gaps are possible); the timestamps are the record timestamps' min and max (UTC);
    ``bytes`` is the size of the keys and values (headers not counted), or None when the
    DataFrame has no ``key``/``value`` columns.
    """

    topic: str
    partition: int
    records: int
    first_offset: int
    last_offset: int
    min_timestamp: datetime | None
    max_timestamp: datetime | None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: timestamps as ISO-8601 UTC strings."""
        def iso(ts: datetime | None) -> str | None:
            return None if ts is None else ts.isoformat()

        return {
            "topic": self.topic,
            "partition": self.partition,
            "records": self.records,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "min_timestamp": iso(self.min_timestamp),
            "max_timestamp": iso(self.max_timestamp),
            "bytes": self.bytes,
        }


def summarize(df: DataFrame) -> list[PartitionSummary]:
    """One :class:`PartitionSummary` per (topic, partition) present in ``df``, sorted.

    ``df`` needs the ``topic``, ``partition``, ``offset`` and ``timestamp`` columns of
    :func:`~airflow_provider_kafka_spark.spark.read_kafka`. Runs one aggregation job;
    partitions without records are absent. Timestamps come back in UTC whatever the session
    time zone (Spark returns naive datetimes in the driver's local time; they are converted).

    Raises:
        ConfigurationError: ``df`` is not a DataFrame with those columns, of those types, that
            Spark can tell apart from the DataFrame's other columns.
    """
    df = check_kafka_frame(df, _COLUMNS, caller="summarize", once=(*_COLUMNS, "key", "value"))
    for name, types, meaning in _TYPES:
        found = df.schema[name].dataType
        if not isinstance(found, types):
            raise ConfigurationError(
                f"summarize needs the column {name!r} as {meaning}, as read_kafka returns it; "
                f"got {found.simpleString()}. Pass the DataFrame of read_kafka, or cast the "
                "column back.")
    sized = {"key", "value"} <= set(df.columns)
    size = (F.coalesce(F.octet_length("key"), F.lit(0))
            + F.coalesce(F.octet_length("value"), F.lit(0))) if sized else F.lit(None)
    rows = (
        df.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.min(F.unix_micros("timestamp")).alias("min_us"),
            F.max(F.unix_micros("timestamp")).alias("max_us"),
            F.sum(size).cast("long").alias("bytes"),
        )
        .collect()
    )
    return sorted(
        PartitionSummary(
            topic=row["topic"],
            partition=row["partition"],
            records=row["records"],
            first_offset=row["first_offset"],
            last_offset=row["last_offset"],
            min_timestamp=_from_micros(row["min_us"]),
            max_timestamp=_from_micros(row["max_us"]),
            bytes=row["bytes"],
        )
        for row in rows
    )


def _from_micros(micros: int | None) -> datetime | None:
    if micros is None:
        return None
    return _EPOCH + timedelta(microseconds=micros)
