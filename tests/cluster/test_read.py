"""read_kafka on the standalone cluster (a submitted application) and over Spark Connect
(the server's executors on the same workers): exactly the committed records, with committed
and aborted transactions and plain records in the input, for both engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.spark import read_kafka
from tests.support.cluster import all_ranges, run_job, transactional_input
from tools.spark_cluster import Cluster

ENGINES = ["python", "spark-kafka"]


@pytest.fixture
def committed_input(kafka_config: dict[str, Any], kafka_admin: Any,
                    new_topic: Any) -> tuple[str, set[tuple[int, str, str]]]:
    topic = new_topic(partitions=2)
    return topic, transactional_input(kafka_config, kafka_admin, topic, partitions=2)


def test_read_on_the_standalone_cluster(spark_cluster: Cluster, spark_kafka_jars: list[Path],
                                        kafka_config: dict[str, Any], committed_input: Any,
                                        tmp_path: Path) -> None:
    topic, expected = committed_input
    ranges = all_ranges(kafka_config, topic)
    result = run_job(spark_cluster, "read", {
        "ranges": ranges.to_json(), "kafka_config": kafka_config, "engines": ENGINES,
        "max_records_per_split": 100}, tmp_path, jars=spark_kafka_jars)

    assert len(expected) == 440
    assert [run["engine"] for run in result["runs"]] == ENGINES
    for run in result["runs"]:
        records = [(p, o, bytes.fromhex(k).decode(), bytes.fromhex(v).decode())
                   for p, o, k, v in run["records"]]
        assert {(p, k, v) for p, _, k, v in records} == expected, run["engine"]
        assert len(records) == len(expected), run["engine"]  # no record twice
        # the last record is the last offset of each range (nothing cut off at the end)
        assert {p: max(o for q, o, _, _ in records if q == p) for p in (0, 1)} == {
            r.partition: r.stop - 1 for r in ranges}, run["engine"]
    assert result["removed_executors"] == [] and result["failed_tasks"] == []


@pytest.mark.parametrize("engine", ENGINES)
def test_read_over_spark_connect(engine: str, connect_spark: Any, kafka_config: dict[str, Any],
                                 committed_input: Any) -> None:
    topic, expected = committed_input
    df = read_kafka(connect_spark, all_ranges(kafka_config, topic), kafka_config, engine=engine,
                    max_records_per_split=100)
    rows = df.selectExpr("partition", "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v",
                         "spark_partition_id() AS split").collect()

    assert {(r["partition"], r["k"], r["v"]) for r in rows} == expected
    assert len(rows) == len(expected)
    assert len({r["split"] for r in rows}) > 2  # cut into several tasks
