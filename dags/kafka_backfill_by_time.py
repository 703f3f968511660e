"""Backfill Kafka -> Parquet by time: one hourly folder per data interval, for any past range.

Meant for Airflow's backfills (see docs/airflow.md)::

    airflow backfill create --dag-id kafka_backfill_by_time \\
        --from-date 2024-05-01T00:00:00+00:00 --to-date 2024-05-01T23:00:00+00:00 \\
        --max-active-runs 4 --reprocess-behavior completed

Each run reads exactly the records with ``data_interval_start <= timestamp <
data_interval_end`` (Kafka's timestamp index) into ``<output_root>/<YYYY-MM-DDTHH>``,
overwriting that folder. Consecutive intervals share their boundary timestamp, so their offset
ranges tile every partition without gap or overlap, and runs may go in parallel and in any
order. Nothing is committed: a backfill must not move a live consumer group.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import FileSink

# The default output folder's parent: $KAFKA_SPARK_OUTPUT_ROOT (scripts/airflow-local sets it to
# its run folder's output/), else /tmp. Override per run with the output_root Param.
OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")

with DAG(
    dag_id="kafka_backfill_by_time",
    description="Hourly folders of Parquet for past intervals; run with airflow backfill create",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={
        "topics": Param("demo.events", type="string", minLength=1,
                        description="Topic name(s), comma-separated."),
        "output_root": Param(f"{OUTPUT_ROOT}/kafka_backfill_by_time", type="string", minLength=1,
                             description="Folder (or s3a://, hdfs:// URL) of the hourly folders."),
    },
    tags=["kafka", "spark", "example"],
) as dag:
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sink=FileSink("{{ params.output_root }}/{{ data_interval_start.strftime('%Y-%m-%dT%H') }}"),
    )
    resolve_offsets >> ingest
