"""Hourly Kafka -> Parquet ingestion with real data intervals.

Every hour of data is one DAG run, ``[data_interval_start, data_interval_end)``:

1. ``wait_for_interval`` waits until every partition holds a record at or after the
   interval's end, or has been idle for 10 minutes (deferrable: it waits in the triggerer);
2. ``resolve_offsets`` turns the interval's two timestamps into exact offset ranges (XCom);
3. ``ingest`` reads exactly those ranges with Spark and overwrites the hour's Parquet folder
   (``<output_root>/<YYYY-MM-DDTHH>``) plus its manifest;
4. ``commit_offsets`` then commits the stop offsets to ``group_id`` (for lag monitoring); it
   runs only after the sink succeeded.

A retry of ``ingest`` reads the same ranges from XCom; clearing the whole run resolves again
and overwrites the same folder. A manual run gets the last complete hour; trigger it with
``{"start": ..., "stop": ...}`` in the run's conf to read other offsets.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from airflow_provider_kafka_spark.operators import (
    KafkaCommitOffsetsOperator,
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sensors import KafkaIntervalCompleteSensor
from airflow_provider_kafka_spark.sinks import FileSink

# The default output folder's parent: $KAFKA_SPARK_OUTPUT_ROOT (scripts/airflow-local sets it to
# its run folder's output/), else /tmp. Override per run with the output_root Param.
OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")

with DAG(
    dag_id="kafka_hourly_ingest",
    description="Hourly Kafka -> Parquet, one folder per data interval, offsets committed after",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params={
        "topics": Param("demo.events", type="string", minLength=1,
                        description="Topic name(s), comma-separated."),
        "output_root": Param(f"{OUTPUT_ROOT}/kafka_hourly_ingest", type="string", minLength=1,
                             description="Folder (or s3a://, hdfs:// URL) of the hourly folders."),
        "group_id": Param("kafka_hourly_ingest", type="string", minLength=1,
                          description="Consumer group the stop offsets are committed to."),
    },
    tags=["kafka", "spark", "example"],
) as dag:
    wait_for_interval = KafkaIntervalCompleteSensor(
        task_id="wait_for_interval",
        topics="{{ params.topics }}",
        idle_timeout=timedelta(minutes=10),
        deferrable=True,
        poke_interval=60,
        timeout=3 * 60 * 60,
    )
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
        group_id="{{ params.group_id }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sink=FileSink("{{ params.output_root }}/{{ data_interval_start.strftime('%Y-%m-%dT%H') }}"),
    )
    commit_offsets = KafkaCommitOffsetsOperator(
        task_id="commit_offsets",
        ranges=resolve_offsets.output,
    )
    wait_for_interval >> resolve_offsets >> ingest >> commit_offsets
