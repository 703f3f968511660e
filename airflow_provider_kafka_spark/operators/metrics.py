"""The metrics this package's operators send through Airflow's ``Stats`` (StatsD, Datadog or
OpenTelemetry, as ``[metrics]`` configures; nothing when metrics are off).

=================================  =======  ==================================================
name (after ``[metrics] statsd_prefix``)  type     value
=================================  =======  ==================================================
``kafka_spark.lag``                gauge    resolve: offsets past the stops at resolution (all
                                            partitions: latest under the isolation level - stop)
``kafka_spark.records_read``       counter  ingest: records read
``kafka_spark.bytes_read``         counter  ingest: bytes of the keys and values read
``kafka_spark.lost_offsets``       counter  ingest: offsets skipped because Kafka had deleted them
``kafka_spark.records_written``    counter  ingest to a topic: records produced by this try
``kafka_spark.commit_success``     counter  commit: 1 per successful commit
``kafka_spark.commit_failure``     counter  commit: 1 per failed commit
=================================  =======  ==================================================

Every metric carries the tags ``dag_id`` and ``task_id`` (with StatsD, tags need
``[metrics] statsd_influxdb_enabled = True``, or Datadog / OpenTelemetry).
"""

from __future__ import annotations

from typing import Any

PREFIX = "kafka_spark"


def _stats() -> Any:
    try:
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # Airflow before 3.2
        from airflow.stats import Stats  # type: ignore[no-redef]
    return Stats


def count(task: Any, name: str, value: int) -> None:
    """Add ``value`` to the counter ``kafka_spark.<name>``, tagged with the task."""
    _stats().incr(f"{PREFIX}.{name}", value, tags=_tags(task))


def gauge(task: Any, name: str, value: float) -> None:
    """Set the gauge ``kafka_spark.<name>``, tagged with the task."""
    _stats().gauge(f"{PREFIX}.{name}", value, tags=_tags(task))


def _tags(task: Any) -> dict[str, str]:
    return {"dag_id": task.dag_id, "task_id": task.task_id}
