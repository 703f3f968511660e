"""Hourly Kafka -> Parquet, each hour started as soon as it is complete in Kafka.

Scheduled on data, not on the clock: the DAG's schedule is a Kafka interval asset
(``kafka_interval_asset``) whose watcher runs in the triggerer and announces each hour of
``demo.events`` once it is complete (every partition holds a record or transaction marker
stamped after the hour, below its last stable offset, or has been quiet for 10 minutes). Each
announcement is an asset event that starts one run:

1. ``resolve_offsets`` takes the hour from the announcement (``timestamp:<start>`` ..
   ``timestamp:<end>``), claims it for this task (a second announcement of the same hour, after
   a triggerer crash, starts a run that is skipped), resolves it to exact offsets and pins them
   (a retry or a clear reads exactly the same records);
2. ``ingest`` reads exactly those offsets with Spark and replaces the hour's Parquet folder
   (``<output_root>/<YYYYMMDDTHHMMSSZ>``, from the resolve task's XCom ``interval``);
3. ``commit_offsets`` commits the stop offsets to ``group_id`` after the sink succeeded.

Compared with ``kafka_hourly_ingest`` (a cron schedule, and a deferrable sensor that waits for
the hour), no run exists before its hour is complete and none waits; an hour that completed
while Airflow was down is announced when the triggerer is back, in order. The watcher starts
with the hour in progress when the DAG is first unpaused. See docs/asset-watcher.md.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_kafka_spark.assets import kafka_interval_asset
from airflow_provider_kafka_spark.operators import (
    KafkaCommitOffsetsOperator,
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import FileSink

TOPIC = "demo.events"
# host:port of the cluster, naming the asset (kafka://localhost:9092/demo.events?interval=PT1H);
# the watcher itself connects through the kafka_default connection.
SERVER = "localhost:9092"
# The default output folder's parent: $KAFKA_SPARK_OUTPUT_ROOT (scripts/airflow-local sets it to
# its run folder's output/), else /tmp. Override per run with the output_root Param.
OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")

DEMO_EVENTS_HOURLY = kafka_interval_asset(
    TOPIC,
    server=SERVER,
    every=timedelta(hours=1),
    idle_timeout=timedelta(minutes=10),
    poll_interval=60,
)

with DAG(
    dag_id="kafka_hourly_on_data",
    description="Each hour of Kafka -> Parquet as soon as the hour is complete (asset watcher)",
    schedule=[DEMO_EVENTS_HOURLY],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params={
        "output_root": Param(f"{OUTPUT_ROOT}/kafka_hourly_on_data", type="string", minLength=1,
                             description="Folder (or s3a://, hdfs:// URL) of the hourly folders."),
        "group_id": Param("kafka_hourly_on_data", type="string", minLength=1,
                          description="Consumer group the stop offsets are committed to."),
    },
    tags=["kafka", "spark", "example", "assets"],
) as dag:
    # The topics must be the ones the asset watches: the interval comes from its announcement.
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics=TOPIC,
        group_id="{{ params.group_id }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sink=FileSink("{{ params.output_root }}/"
                      "{{ ti.xcom_pull(task_ids='resolve_offsets', key='interval')['label'] }}"),
    )
    commit_offsets = KafkaCommitOffsetsOperator(
        task_id="commit_offsets",
        ranges=resolve_offsets.output,
    )
    resolve_offsets >> ingest >> commit_offsets
