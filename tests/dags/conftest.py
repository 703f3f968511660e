"""Run the example DAGs with ``dag.test()`` against the real broker and the shared Spark session:
``run_dag`` (with ``airflow_db`` and ``kafka_connection``) comes from the plugin
``tests/support/dag_runs.py``; the fixtures here are the DAG tests' own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec


@pytest.fixture
def group_offsets(kafka_admin: Any) -> Callable[[str, str, int], dict[int, int]]:
    """``group_offsets(group, topic, partitions)``: the group's committed offsets by partition."""

    def committed(group_id: str, topic: str, partitions: int) -> dict[int, int]:
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(topic, p) for p in range(partitions)])
        result = kafka_admin.list_consumer_group_offsets([request])[group_id].result(timeout=30)
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    return committed


@pytest.fixture
def ledger_ready(kafka_admin: Any) -> None:
    """The write ledger topic exists and every partition has a leader. (A write that creates
    the ledger itself can fail right after with "Not leader for partition", reported to the
    ``spark/write`` owner; this test is about the DAG.)"""
    from airflow_provider_kafka_spark.spark.write.ledger import ensure_ledger_topic

    partitions = ensure_ledger_topic(kafka_admin, "_kafka_spark_ledger")
    request = {TopicPartition("_kafka_spark_ledger", p): OffsetSpec.latest()
               for p in range(partitions)}
    deadline = time.monotonic() + 30
    while True:
        try:
            for future in kafka_admin.list_offsets(request).values():
                future.result(timeout=10)
            return
        except KafkaException:
            assert time.monotonic() < deadline, "the ledger partitions got no leader in 30 s"
            time.sleep(0.2)
