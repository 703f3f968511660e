"""Operators: resolve offset ranges, ingest them with Spark, commit them after the sink."""

from airflow_provider_kafka_spark.operators.base import KafkaSparkBaseOperator
from airflow_provider_kafka_spark.operators.commit import KafkaCommitOffsetsOperator
from airflow_provider_kafka_spark.operators.ingest import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.operators.resolve import KafkaResolveOffsetsOperator

__all__ = [
    "KafkaCommitOffsetsOperator",
    "KafkaResolveOffsetsOperator",
    "KafkaSparkBaseOperator",
    "KafkaSparkIngestOperator",
]
