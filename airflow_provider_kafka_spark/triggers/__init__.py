"""Triggers: of the deferrable sensors, and the event trigger of Kafka interval assets."""

from airflow_provider_kafka_spark.triggers.intervals import KafkaIntervalEventTrigger
from airflow_provider_kafka_spark.triggers.kafka import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)

__all__ = ["KafkaIntervalCompleteTrigger", "KafkaIntervalEventTrigger", "KafkaPartitionsTrigger"]
