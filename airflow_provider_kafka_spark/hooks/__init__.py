"""Airflow hooks: a Kafka connection -> librdkafka config; a Spark connection -> SparkSession."""

from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.hooks.spark import SparkHook

__all__ = ["KafkaHook", "SparkHook"]
