"""Read a time window of Kafka topics into one folder as soon as the window is complete.

Trigger it (UI form, or ``airflow dags trigger kafka_window_when_complete --conf '{...}'``)
for a window ``[start, stop)`` that may still be filling up, on topics that may not even
exist yet:

1. ``wait_for_partitions`` waits until the topics have ``min_partitions`` partitions (topic
   creation, scale-out);
2. ``wait_for_window`` waits until every partition is complete up to ``stop``: a record or
   transaction marker stamped at or after ``stop`` is there (``read_committed``), or the
   partition has had no record for 10 minutes;
3. ``resolve_offsets`` turns ``[start, stop)`` into exact offsets, and ``ingest`` writes them
   to the folder ``output_path`` (an empty window writes nothing).

Both sensors are deferrable: while a run waits, the triggerer checks the cluster every 10 s
(one metadata request and one offsets request) and the run holds no worker slot, so many runs
can wait at once. Nothing is committed to any consumer group.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sensors import KafkaIntervalCompleteSensor, KafkaPartitionsSensor
from airflow_provider_kafka_spark.sinks import FileSink

with DAG(
    dag_id="kafka_window_when_complete",
    description="Wait (in the triggerer) until a time window of Kafka topics is complete, "
                "then read it into one folder",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    params={
        "topics": Param(type="string", minLength=1, pattern=r"^[A-Za-z0-9._\-, ]+$",
                        description="Topic name(s), comma-separated."),
        "min_partitions": Param(1, type="integer", minimum=1,
                                description="Wait until the topics have this many partitions."),
        "start": Param(type="string", minLength=1,
                       description="Starting offset spec (inclusive), e.g. "
                                   "'timestamp:2024-05-01T10:00:00Z' or 'earliest'."),
        "stop": Param(type="string", pattern=r"^timestamp:.+",
                      description="The window's end (exclusive), e.g. "
                                  "'timestamp:2024-05-01T11:00:00Z': the run waits until every "
                                  "partition is complete up to it."),
        "output_path": Param(type="string", minLength=1,
                             description="Folder to (over)write, e.g. /data/orders/window-10h."),
    },
    tags=["kafka", "spark", "example"],
) as dag:
    wait_for_partitions = KafkaPartitionsSensor(
        task_id="wait_for_partitions",
        topics="{{ params.topics }}",
        min_partitions="{{ params.min_partitions }}",
        deferrable=True,
        poke_interval=10,
        timeout=24 * 60 * 60,
    )
    wait_for_window = KafkaIntervalCompleteSensor(
        task_id="wait_for_window",
        topics="{{ params.topics }}",
        end="{{ params.stop }}",
        idle_timeout=timedelta(minutes=10),
        deferrable=True,
        poke_interval=10,
        timeout=24 * 60 * 60,
    )
    # start/stop: the run's Params (see KafkaResolveOffsetsOperator).
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sink=FileSink("{{ params.output_path }}"),
    )
    wait_for_partitions >> wait_for_window >> resolve_offsets >> ingest
