"""Bounded Kafka reads on Spark. No Airflow import: usable from any PySpark job::

    from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
    from airflow_provider_kafka_spark.spark import read_kafka, spark_session

    config = {"bootstrap.servers": "127.0.0.1:9092"}
    ranges = resolve_offsets(config, Subscription.topics(["orders"]), "earliest", "latest")
    df = read_kafka(spark_session(), ranges, config)

    # or read, decode, transform and write a sink in one call, with statistics:
    result = ingest(spark_session(), ranges, config, FileSink("/data/orders/2024-05-01T00"))
"""

import importlib
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.errors import (
    CorruptRecordError,
    DecodeError,
    DeliveryError,
    InputTruncatedError,
    KafkaReadError,
    KafkaWriteError,
    LedgerError,
    ProducerFencedError,
    SchemaRegistryError,
    SparkKafkaJarsError,
    SparkKafkaSourceMissingError,
    TransactionError,
    TransactionInitTimeoutError,
    WriteConfigError,
    kafka_errors,
)

if TYPE_CHECKING:
    from airflow_provider_kafka_spark.spark.formats import Subject
    from airflow_provider_kafka_spark.spark.ingest import SinkProtocol, ingest
    from airflow_provider_kafka_spark.spark.ingest_result import DecodeCounts, IngestResult, PartitionStats
    from airflow_provider_kafka_spark.spark.intake import (
        Intake,
        LandedParquet,
        RowsWithSplitEnds,
        SinkInput,
        SparkRows,
    )
    from airflow_provider_kafka_spark.spark.read.datasource import (
        FORMAT_NAME,
        KafkaBoundedDataSource,
        read_split,
    )
    from airflow_provider_kafka_spark.spark.read.decode import decode_kafka
    from airflow_provider_kafka_spark.spark.read.reader import LostOffsets, read_kafka
    from airflow_provider_kafka_spark.spark.read.splits import plan_splits
    from airflow_provider_kafka_spark.spark.read.summary import PartitionSummary, summarize
    from airflow_provider_kafka_spark.spark.schema import kafka_schema
    from airflow_provider_kafka_spark.spark.session import (
        fetch_spark_kafka_jars,
        spark_kafka_package,
        spark_session,
    )
    from airflow_provider_kafka_spark.spark.write.writer import WriteResult, write_kafka

_LAZY: dict[str, str] = {
    "DecodeCounts": "airflow_provider_kafka_spark.spark.ingest_result",
    "FORMAT_NAME": "airflow_provider_kafka_spark.spark.read.datasource",
    "IngestResult": "airflow_provider_kafka_spark.spark.ingest_result",
    "Intake": "airflow_provider_kafka_spark.spark.intake",
    "KafkaBoundedDataSource": "airflow_provider_kafka_spark.spark.read.datasource",
    "LandedParquet": "airflow_provider_kafka_spark.spark.intake",
    "LostOffsets": "airflow_provider_kafka_spark.spark.read.reader",
    "PartitionStats": "airflow_provider_kafka_spark.spark.ingest_result",
    "PartitionSummary": "airflow_provider_kafka_spark.spark.read.summary",
    "RowsWithSplitEnds": "airflow_provider_kafka_spark.spark.intake",
    "SinkInput": "airflow_provider_kafka_spark.spark.intake",
    "SinkProtocol": "airflow_provider_kafka_spark.spark.ingest",
    "SparkRows": "airflow_provider_kafka_spark.spark.intake",
    "Subject": "airflow_provider_kafka_spark.spark.formats",
    "WriteResult": "airflow_provider_kafka_spark.spark.write.writer",
    "decode_kafka": "airflow_provider_kafka_spark.spark.read.decode",
    "fetch_spark_kafka_jars": "airflow_provider_kafka_spark.spark.session",
    "ingest": "airflow_provider_kafka_spark.spark.ingest",
    "kafka_schema": "airflow_provider_kafka_spark.spark.schema",
    "plan_splits": "airflow_provider_kafka_spark.spark.read.splits",
    "read_kafka": "airflow_provider_kafka_spark.spark.read.reader",
    "read_split": "airflow_provider_kafka_spark.spark.read.datasource",
    "spark_kafka_package": "airflow_provider_kafka_spark.spark.session",
    "spark_session": "airflow_provider_kafka_spark.spark.session",
    "summarize": "airflow_provider_kafka_spark.spark.read.summary",
    "write_kafka": "airflow_provider_kafka_spark.spark.write.writer",
}
"""Where each Spark-side name lives. They are imported on first use (PEP 562), not with the
package: a Spark worker that unpickles the data source's reader imports
``spark.read.datasource`` and so this package, and must not pay for pyspark's SQL functions,
the Schema Registry client and the writer it does not use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "FORMAT_NAME",
    "CorruptRecordError",
    "DecodeCounts",
    "DecodeError",
    "Decoding",
    "DeliveryError",
    "IngestResult",
    "InputTruncatedError",
    "KafkaBoundedDataSource",
    "KafkaReadError",
    "KafkaWriteError",
    "LedgerError",
    "Intake",
    "LandedParquet",
    "LostOffsets",
    "PartitionStats",
    "PartitionSummary",
    "ProducerFencedError",
    "RowsWithSplitEnds",
    "SchemaRegistryError",
    "SinkInput",
    "SinkProtocol",
    "SparkRows",
    "SparkKafkaJarsError",
    "SparkKafkaSourceMissingError",
    "Subject",
    "TransactionError",
    "TransactionInitTimeoutError",
    "WriteConfigError",
    "WriteResult",
    "decode_kafka",
    "fetch_spark_kafka_jars",
    "ingest",
    "kafka_errors",
    "kafka_schema",
    "plan_splits",
    "read_kafka",
    "read_split",
    "spark_kafka_package",
    "spark_session",
    "summarize",
    "write_kafka",
]
