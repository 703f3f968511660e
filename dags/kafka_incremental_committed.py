"""Incremental Kafka -> Parquet from a consumer group's committed offsets.

Each run first waits for the topics to exist (``KafkaPartitionsSensor``, deferrable), then
reads from where the group's last successful run stopped (``committed:earliest``:
partitions the group never committed, including partitions added since, start at the earliest
offset) up to the latest offset at resolution time, writes one folder of Parquet, and only then
commits the stop offsets. A failed run commits nothing, so the next run reads the same records
again: at-least-once across runs, never a gap.

The output folder is named after the moment the ranges were resolved (read from the resolve
task's XCom). The first resolution of each run is pinned, so a retry of ``ingest`` or a clear
of the whole run reads the same ranges and overwrites the same folder with the same records;
the re-run's commit leaves the group where newer runs moved it.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, CronTriggerTimetable, Param

from airflow_provider_kafka_spark.operators import (
    KafkaCommitOffsetsOperator,
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sensors import KafkaPartitionsSensor
from airflow_provider_kafka_spark.sinks import FileSink

# The default output folder's parent: $KAFKA_SPARK_OUTPUT_ROOT (scripts/airflow-local sets it to
# its run folder's output/), else /tmp. Override per run with the output_root Param.
OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")

with DAG(
    dag_id="kafka_incremental_committed",
    description="Every 15 minutes: committed offsets -> latest, Parquet, then commit",
    schedule=CronTriggerTimetable("*/15 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={
        "topics": Param("demo.events", type="string", minLength=1,
                        description="Topic name(s), comma-separated."),
        "output_root": Param(f"{OUTPUT_ROOT}/kafka_incremental_committed", type="string", minLength=1,
                             description="Folder (or s3a://, hdfs:// URL) of the batch folders."),
        "group_id": Param("kafka_incremental_committed", type="string", minLength=1,
                          description="Consumer group whose committed offsets start each run."),
    },
    tags=["kafka", "spark", "example"],
) as dag:
    wait_for_topics = KafkaPartitionsSensor(
        task_id="wait_for_topics",
        topics="{{ params.topics }}",
        deferrable=True,
        poke_interval=60,
        timeout=60 * 60,
    )
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
        start="committed:earliest",
        stop="latest",
        group_id="{{ params.group_id }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        # One folder per run, named by its pinned resolution time (without ':', which Hadoop
        # paths cannot hold in a key=value folder name), so a cleared run overwrites its own.
        sink=FileSink(
            "{{ params.output_root }}/resolved_at="
            "{{ ti.xcom_pull(task_ids='resolve_offsets')['resolved_at'] | replace(':', '') }}"),
    )
    commit_offsets = KafkaCommitOffsetsOperator(
        task_id="commit_offsets",
        ranges=resolve_offsets.output,
    )
    wait_for_topics >> resolve_offsets >> ingest >> commit_offsets
