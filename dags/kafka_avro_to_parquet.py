"""Hourly Avro topic -> Parquet, decoded through a Schema Registry, with a dead-letter folder.

Each hour's records (``[data_interval_start, data_interval_end)``, resolved to exact offsets)
are decoded with the subject ``<topic>-value``'s latest schema (fixed when the task starts;
older compatible writer schemas decode into it) and written as Parquet columns to
``<output_root>/<YYYY-MM-DDTHH>``. Records that cannot be decoded (not Avro, an unknown schema
id) are not lost and do not stop the run: they go, as read and with the reason, topic,
partition, offset and timestamp, to ``<that folder>/_dead_letter`` (Parquet; read it with
``spark.read.parquet("<folder>/_dead_letter/*.parquet")``), published together with the output
and counted in its manifest and the task's XCom (``decode``). A registry that cannot be reached
fails the task instead (retried), never dead-letters good records.

Connections: ``kafka_default`` (the brokers) and ``schema_registry_default`` (the registry: host,
port, schema http/https, login/password or an extra with ``bearer.auth.*``).
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.hooks import SchemaRegistryConnection
from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import FileSink

OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")

with DAG(
    dag_id="kafka_avro_to_parquet",
    description="Hourly Avro (Schema Registry) -> Parquet columns, undecodable records to a "
                "dead-letter folder",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params={
        "topic": Param("demo.orders.avro", type="string", minLength=1,
                       description="The Avro topic; its subject is <topic>-value."),
        "output_root": Param(f"{OUTPUT_ROOT}/kafka_avro_to_parquet", type="string",
                             minLength=1, description="Folder of the hourly folders."),
    },
    tags=["kafka", "spark", "avro", "example"],
) as dag:
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topic }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sink=FileSink("{{ params.output_root }}/{{ data_interval_start.strftime('%Y-%m-%dT%H') }}"),
        decode=Decoding(
            key_format="string",
            value_format="avro",
            schema_registry=SchemaRegistryConnection("schema_registry_default"),
            on_corrupt="dead_letter",
        ),
        # One column per Avro field, plus where each record came from.
        sql="SELECT key, value.*, topic, `partition`, `offset`, timestamp FROM kafka",
    )
    resolve_offsets >> ingest
