"""Errors of the Spark layer; all derive from ``offsets.KafkaSparkError``."""

from __future__ import annotations

from airflow_provider_kafka_spark.offsets.errors import KafkaSparkError


class KafkaReadError(KafkaSparkError):
    """A split could not be read: no progress within ``poll_timeout``, or a non-retriable
    Kafka error (unknown topic, authorization, fatal client error)."""


class SparkKafkaSourceMissingError(KafkaSparkError):
    """``engine="spark-kafka"`` was asked for but Spark's ``kafka`` source is not on the
    classpath."""


class DecodeError(KafkaSparkError, ValueError):
    """Invalid decoding options (unknown format, missing or unparsable schema)."""
