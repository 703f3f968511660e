"""Bounded, replayable Kafka batch ingestion on Apache Spark, for Apache Airflow."""

__version__ = "0.1.0"
