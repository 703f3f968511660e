"""Provider metadata read by Airflow's ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_provider_kafka_spark import __version__


def get_provider_info() -> dict[str, Any]:
    """Describe this package to Airflow (``airflow providers list``)."""
    return {
        "package-name": "airflow-provider-kafka-spark",
        "name": "Kafka on Spark (bounded ingestion)",
        "description": "Bounded, replayable Kafka batch ingestion on Apache Spark: "
        "offset ranges resolved per run, read by Spark, written exactly once.",
        "versions": [__version__],
    }
