"""Hourly Kafka -> Apache Iceberg, exactly once by the table's own state.

Every hour is one DAG run and one Iceberg snapshot:

1. ``create_table`` creates the table when it is missing (partitioned by the hour of the
   records' Kafka timestamp);
2. ``wait_for_interval`` waits (in the triggerer) until every partition holds a record at or
   after the interval's end, or has been idle for 10 minutes;
3. ``resolve_offsets`` starts each partition where this application's last commit to the
   table stopped (the ``table:earliest`` start spec: the offsets live in the table, atomically
   with the data; partitions never written start at the earliest offset) and stops at the
   interval's end; the ranges are pinned for the run;
4. ``ingest`` writes the run's rows in one snapshot recording the run and its ranges. A retry
   that finds the run's write in the table writes nothing; a cleared run replaces its rows.

No consumer group is needed. Runs tile by construction, so the DAG runs one at a time
(``max_active_runs=1``) and in order; to backfill hours out of order, resolve from the
interval's timestamps instead (the default when ``start`` is not given): the table still
holds each record once.

Spark needs Iceberg's runtime for its version: pyspark 4.1 with
``org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0`` (README, "Tables"). The catalog
below is a Hadoop catalog in ``$KAFKA_SPARK_ICEBERG_WAREHOUSE``; the jars come from
``$KAFKA_SPARK_TABLE_JARS`` (comma-separated; ``tools/tables_jars.py`` fetches them).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable, Param, task

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sensors import KafkaIntervalCompleteSensor
from airflow_provider_kafka_spark.sinks import IcebergSink

WAREHOUSE = os.environ.get("KAFKA_SPARK_ICEBERG_WAREHOUSE", "/tmp/kafka_spark_warehouse")
SPARK_CONF: dict[str, Any] = {
    "spark.jars": os.environ.get("KAFKA_SPARK_TABLE_JARS", ""),
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.lake.type": "hadoop",
    "spark.sql.catalog.lake.warehouse": WAREHOUSE,
}
APPLICATION = "kafka_hourly_to_iceberg.ingest"
# The table the ingest writes and the resolve task's "table" start reads: one value for both.
events = IcebergSink("{{ params.table }}", application=APPLICATION)

with DAG(
    dag_id="kafka_hourly_to_iceberg",
    description="Hourly Kafka -> Iceberg, one snapshot per run recording its offsets",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params={
        "topics": Param("demo.events", type="string", minLength=1,
                        description="Topic name(s), comma-separated."),
        "table": Param("lake.kafka.events_hourly", type="string", minLength=1,
                       description="The Iceberg table (catalog.namespace.table)."),
    },
    tags=["kafka", "spark", "iceberg", "example"],
) as dag:

    @task
    def create_table(params: dict[str, Any]) -> None:
        """The table, when missing: the records as read, partitioned by hour."""
        from airflow_provider_kafka_spark.hooks.spark import SparkHook

        spark = SparkHook(None, spark_conf=SPARK_CONF).get_conn()
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {params['table'].rsplit('.', 1)[0]}")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {params['table']} (topic STRING, `partition` INT, "
                  "`offset` BIGINT, `timestamp` TIMESTAMP, key STRING, value STRING) "
                  "USING iceberg PARTITIONED BY (hours(`timestamp`))")

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
        start="table:earliest",
        stop="timestamp:{{ data_interval_end.isoformat() }}",
        table=events,
        spark_conf=SPARK_CONF,
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sql="SELECT topic, `partition`, `offset`, `timestamp`, CAST(key AS STRING) AS key, "
            "CAST(value AS STRING) AS value FROM kafka",
        sink=events,
        spark_conf=SPARK_CONF,
    )
    create_table() >> wait_for_interval >> resolve_offsets >> ingest
