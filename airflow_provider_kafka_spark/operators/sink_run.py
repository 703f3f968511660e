"""The run as an ingest's sink sees it (:class:`~airflow_provider_kafka_spark.sinks.RunInfo`):
the task, the run (its partition), its generation, and since when its write can have begun."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from airflow_provider_kafka_spark.offsets import OffsetRanges
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.sinks import RunInfo


class IngestTask(Protocol):
    """What :func:`run_info` reads of the ingest operator."""

    dag_id: str
    task_id: str

    @property
    def kafka_config(self) -> KafkaConfig: ...


def run_info(task: IngestTask, context: Any, ranges: OffsetRanges) -> RunInfo:
    """What the sink of this try takes its defaults from: the task, the run, its generation,
    when its write began at the earliest, the input cluster and the Airflow ids."""
    ti = context.get("ti")
    map_index = getattr(ti, "map_index", -1)
    return RunInfo(
        dag_id=task.dag_id, task_id=task.task_id, run_id=str(context["run_id"]), ranges=ranges,
        map_index=map_index if isinstance(map_index, int) else -1,
        generation=run_generation(context.get("dag_run")),
        ledger_since=ledger_since(context, ranges), kafka_config=lambda: task.kafka_config,
        properties={"dag-id": task.dag_id, "task-id": task.task_id,
                    "run-id": str(context["run_id"]),
                    "try-number": str(getattr(ti, "try_number", None))},
        partition_key=context.get("partition_key") or None)


def run_generation(dag_run: Any) -> int | str:
    """The generation of a table write by ``dag_run``: the same for every try of one instance
    of the run, another when Airflow clears the run (its clear number grows and its start is
    reset) or deletes it and creates it again under the same run id (its clear number is 0
    again, its start is new): ``<clear number>-<start, UTC, to the microsecond>``, e.g.
    ``1-20261125T215713123456Z``; just the clear number when the run has no start."""
    clear_number = int(getattr(dag_run, "clear_number", 0) or 0)
    started = getattr(dag_run, "start_date", None)
    if started is None:
        return clear_number
    return f"{clear_number}-{started.astimezone(UTC):%Y%m%dT%H%M%S%fZ}"


def ledger_since(context: Any, ranges: OffsetRanges) -> datetime | None:
    """When the run's first write with the default write id (which names the ranges) can have
    begun at the earliest: when its ranges were first resolved (a pin keeps that time for every
    try and clear, and for a run created again under its id), the run's ``run_after`` (a
    ``re_resolve`` that found the same ranges again), or a partitioned run's
    ``partition_date`` (an earlier run of the partition, reprocessed as a new run), whichever
    is earliest. The Kafka sink reads the write's ledger from there, not from its start."""
    run_after = getattr(context.get("dag_run"), "run_after", None)
    moments = [m for m in (ranges.resolved_at, run_after, context.get("partition_date"))
               if isinstance(m, datetime) and m.utcoffset() is not None]
    return min(moments) if moments else None
