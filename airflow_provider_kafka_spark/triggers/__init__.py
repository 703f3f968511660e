"""Triggers of the deferrable sensors."""

from airflow_provider_kafka_spark.triggers.kafka import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)

__all__ = ["KafkaIntervalCompleteTrigger", "KafkaPartitionsTrigger"]
