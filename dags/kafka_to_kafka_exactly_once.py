"""Kafka -> Spark transform -> Kafka, exactly once, from a consumer group's committed offsets.

1. ``resolve_offsets``: from the group's committed offsets (``committed:earliest``) to the
   latest offsets of the input topics;
2. ``transform_and_write``: reads exactly those ranges, adds a ``source`` header
   (``<topic>/<partition>/<offset>`` of the input record) and writes the output topic through
   ``KafkaSink(topic, delivery_guarantee="exactly_once")``: each Spark partition is one Kafka
   transaction, recorded in a ledger under a write id that is stable for the run and its
   ranges, so a retried task skips what an earlier attempt committed and ``read_committed``
   consumers see every record once;
3. ``commit_offsets``: commits the input group's offsets only after the write succeeded.

Clearing the whole run resolves again from the committed offsets; if an earlier attempt had
committed some transactions, the new ranges are a new write (records of those transactions
can then appear twice), so prefer retrying ``transform_and_write`` alone.
The output topic must exist (create it with the partitions you want).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pendulum
from airflow.sdk import DAG, CronTriggerTimetable, Param

from airflow_provider_kafka_spark.operators import (
    KafkaCommitOffsetsOperator,
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import KafkaSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def with_source_header(records: DataFrame) -> DataFrame:
    """Keep key, value and timestamp; the headers become one ``source`` header naming the
    input record (``topic/partition/offset``)."""
    from pyspark.sql import functions as F

    source = F.concat_ws("/", "topic", F.col("partition").cast("string"),
                         F.col("offset").cast("string"))
    header = F.struct(F.lit("source").alias("key"), source.cast("binary").alias("value"))
    return records.select("key", "value", "timestamp", F.array(header).alias("headers"))


with DAG(
    dag_id="kafka_to_kafka_exactly_once",
    description="Committed offsets -> latest, transformed, written exactly once, then committed",
    schedule=CronTriggerTimetable("*/15 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={
        "topics": Param("demo.events", type="string", minLength=1,
                        description="Input topic name(s), comma-separated."),
        "output_topic": Param("demo.events.enriched", type="string", minLength=1,
                              description="Output topic (must exist)."),
        "group_id": Param("kafka_to_kafka_exactly_once", type="string", minLength=1,
                          description="Consumer group of the input offsets."),
    },
    tags=["kafka", "spark", "example"],
) as dag:
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
        start="committed:earliest",
        stop="latest",
        group_id="{{ params.group_id }}",
    )
    transform_and_write = KafkaSparkIngestOperator(
        task_id="transform_and_write",
        ranges=resolve_offsets.output,
        transform=with_source_header,
        sink=KafkaSink("{{ params.output_topic }}", delivery_guarantee="exactly_once"),
    )
    commit_offsets = KafkaCommitOffsetsOperator(
        task_id="commit_offsets",
        ranges=resolve_offsets.output,
    )
    resolve_offsets >> transform_and_write >> commit_offsets
