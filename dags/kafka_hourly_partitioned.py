"""Hourly Kafka -> Parquet as Airflow 3.3 partitioned runs: one run per hour partition.

``CronPartitionTimetable("0 * * * *", run_offset=-1)`` makes one run per hour with a
``partition_key`` (``2026-03-10T09:00:00``) and a ``partition_date``; with ``run_offset=-1`` the
run made at 10:00 is the partition of 09:00, the hour that has just ended. A partitioned run
has no data interval:

1. ``resolve_offsets`` reads the run's partition as its slice of Kafka,
   ``timestamp:<partition_date>`` .. ``timestamp:<next tick>``, and pins the exact offset ranges
   (XCom and the pins topic), so a retry, clear or backfill reads the same records, and
   consecutive hours tile every partition through their boundary records;
2. ``ingest`` reads exactly those ranges with Spark and overwrites the hour's Parquet folder
   (``<output_root>/<YYYY-MM-DDTHH>``). Its outlet, the asset ``kafka_hourly_partitioned``,
   gets an event per run carrying the run's partition key (Airflow adds it): the daily
   rollup (``kafka_daily_rollup``) runs once all 24 hours of a day are in.

Backfill past hours by partition date (docs/airflow.md)::

    airflow backfill create --dag-id kafka_hourly_partitioned \\
        --from-date 2026-03-10T00:00:00+00:00 --to-date 2026-03-10T23:00:00+00:00 \\
        --max-active-runs 4 --reprocess-behavior completed
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset, CronPartitionTimetable, Param

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import FileSink

# The output folder's parent: $KAFKA_SPARK_OUTPUT_ROOT (scripts/airflow-local sets it to its
# run folder's output/), else /tmp. Override per run with the output_root Param.
OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")
# The hourly folders as one partitioned asset (kafka_daily_rollup.py names the same one).
HOURLY = Asset(name="kafka_hourly_partitioned",
               uri=f"file://{OUTPUT_ROOT}/kafka_hourly_partitioned")

with DAG(
    dag_id="kafka_hourly_partitioned",
    description="Hourly Kafka -> Parquet as partitioned runs; the partition is the slice",
    schedule=CronPartitionTimetable("0 * * * *", timezone="UTC", run_offset=-1),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params={
        "topics": Param("demo.events", type="string", minLength=1,
                        description="Topic name(s), comma-separated."),
        "output_root": Param(f"{OUTPUT_ROOT}/kafka_hourly_partitioned", type="string",
                             minLength=1,
                             description="Folder (or s3a://, hdfs:// URL) of the hourly folders."),
    },
    tags=["kafka", "spark", "example", "partitions"],
) as dag:
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sink=FileSink("{{ params.output_root }}/{{ partition_date.strftime('%Y-%m-%dT%H') }}"),
        outlets=[HOURLY],
    )
    resolve_offsets >> ingest
