"""The ingest operator's transformations and file options, executed directly (no DAG run):
``sql=`` over the ``kafka`` view, ``transform=``, ``partition_by``, another format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from tests.kafka_data import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def ranges(new_topic: Any, kafka_config: dict[str, Any]) -> dict[str, Any]:
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [(i % 2, f"k{i % 3}".encode(), f"v{i}".encode(), 1_000 + i)
                                  for i in range(12)])
    return resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest").to_dict()


def test_sql_over_the_kafka_view_partitioned_by_key(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], tmp_path: Path) -> None:
    op = KafkaSparkIngestOperator(
        task_id="ingest", ranges=ranges, output_path=str(tmp_path / "sql"), output_format="json",
        sql="SELECT CAST(key AS STRING) AS k, CAST(value AS STRING) AS v, `offset` FROM kafka",
        partition_by=["k"])
    stats = op.execute({"run_id": "manual__1"})
    assert stats["records"] == 12
    assert sorted(p.name for p in (tmp_path / "sql").iterdir() if p.is_dir()) == \
        ["k=k0", "k=k1", "k=k2"]
    written = spark.read.json(str(tmp_path / "sql")).collect()
    assert sorted(row["v"] for row in written) == sorted(f"v{i}" for i in range(12))


def test_transform_callable(kafka_connection: None, spark: Any, ranges: dict[str, Any],
                            tmp_path: Path) -> None:
    def only_even_partition(df: Any) -> Any:
        return df.where("partition = 0").select("offset", "value")

    stats = KafkaSparkIngestOperator(
        task_id="ingest", ranges=ranges, output_path=str(tmp_path / "t"),
        transform=only_even_partition).execute({"run_id": "manual__1"})
    assert stats["records"] == 12  # read; the transform keeps 6
    assert sorted(bytes(r["value"]) for r in spark.read.parquet(str(tmp_path / "t")).collect()) \
        == sorted(f"v{i}".encode() for i in range(0, 12, 2))
