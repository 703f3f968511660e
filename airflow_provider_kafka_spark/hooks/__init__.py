"""Airflow hooks: a Kafka connection -> librdkafka config; a Spark connection -> SparkSession;
a Schema Registry connection -> the registry client's config; an AWS connection -> the S3
settings of a file sink."""

from airflow_provider_kafka_spark.hooks.aws import AwsConnection
from airflow_provider_kafka_spark.hooks.kafka import KafkaConnection, KafkaHook
from airflow_provider_kafka_spark.hooks.schema_registry import (
    SchemaRegistryConnection,
    SchemaRegistryHook,
)
from airflow_provider_kafka_spark.hooks.spark import SparkHook

__all__ = ["AwsConnection", "KafkaConnection", "KafkaHook", "SchemaRegistryConnection",
           "SchemaRegistryHook", "SparkHook"]
