"""Sensors: partition discovery and interval completeness (poke mode or ``deferrable=True``)."""

from airflow_provider_kafka_spark.sensors.kafka import (
    KafkaIntervalCompleteSensor,
    KafkaPartitionsSensor,
)

__all__ = ["KafkaIntervalCompleteSensor", "KafkaPartitionsSensor"]
