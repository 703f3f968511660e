"""``kafka_hourly_to_iceberg`` with ``dag.test()`` against the real broker, Spark and an Iceberg
catalog: the ``table`` start spec tiles the hours by construction (no consumer group), each
record lands once, a re-run of a run writes nothing twice, and the output is announced as the
table's location (asset event, OpenLineage dataset)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.dag_data import T1, T2, arrange, ranges_of

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

APPLICATION = "kafka_hourly_to_iceberg.ingest"


def table_rows(spark: Any, table: str) -> Counter[tuple[int, int, str, str]]:
    return Counter((r["partition"], r["offset"], r["key"], r["value"])
                   for r in spark.table(table).collect())


def expected(*groups: list[tuple]) -> Counter[tuple[int, int, str, str]]:
    return Counter((p, o, k.decode(), v.decode()) for group in groups for p, o, k, v in group)


def test_hourly_runs_tile_through_the_table_and_a_rerun_writes_nothing_twice(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], table_spark: Any,
        warehouses: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SPARK_ICEBERG_WAREHOUSE", warehouses.lake.as_uri())
    topic = new_topic(partitions=3)
    data = arrange(kafka_config, topic)
    table = f"lake.kafka.hourly_{uuid.uuid4().hex[:8]}"
    conf = {"topics": topic, "table": table}

    first = run_dag("kafka_hourly_to_iceberg", logical_date=T1, conf=conf, run_after=T1)
    assert first.state == "success", first.errors
    # Partitions the application never wrote start at the earliest offset.
    assert ranges_of(first.xcom["resolve_offsets"]) == [
        (topic, 0, 0, 8), (topic, 1, 0, 4), (topic, 2, 0, 2)]
    assert first.xcom["resolve_offsets"]["starting"] == "table:earliest"
    assert first.xcom["resolve_offsets"]["group_id"] is None
    assert table_rows(table_spark, table) == expected(data["before"], data["I1"])
    output = first.xcom["ingest"]["output"]
    assert output["committed"] and output["records_written"] == 14
    assert output["application"] == APPLICATION and output["table"] == table

    second = run_dag("kafka_hourly_to_iceberg", logical_date=T2, conf=conf, run_after=T2)
    assert second.state == "success", second.errors
    # The next hour starts exactly where the table says the first one stopped.
    assert ranges_of(second.xcom["resolve_offsets"]) == [
        (topic, 0, 8, 10), (topic, 1, 4, 7), (topic, 2, 2, 2)]
    assert table_rows(table_spark, table) == expected(data["before"], data["I1"], data["I2"])

    # The whole run again: dag.test creates the run again with clear number 0 and the same
    # start (its logical date), so to the sink it is another try of the same run instance
    # (operators.ingest.run_generation): the pinned ranges, the table already holds the
    # write, nothing is written twice.
    snapshots = table_spark.sql(f"SELECT * FROM {table}.snapshots").count()
    again = run_dag("kafka_hourly_to_iceberg", logical_date=T2, conf=conf, run_after=T2)
    assert again.state == "success", again.errors
    assert again.xcom["ingest"]["output"]["skipped"] is True
    assert table_rows(table_spark, table) == expected(data["before"], data["I1"], data["I2"])
    assert table_spark.sql(f"SELECT * FROM {table}.snapshots").count() == snapshots

    # The output is the table's location: asset URI and OpenLineage dataset.
    location = output["location"]
    from airflow.dag_processing.dagbag import DagBag

    from airflow_provider_kafka_spark.naming import asset_uri
    from tests.support import airflow_env

    dag = DagBag(str(airflow_env.DAGS_FOLDER / "kafka_hourly_to_iceberg.py")).get_dag(
        "kafka_hourly_to_iceberg")
    ingest = dag.get_task("ingest")
    ingest.sink.table, ingest.ranges = table, first.xcom["resolve_offsets"]  # as rendered
    lineage = ingest.lineage(first.xcom["ingest"])
    assert location.startswith("file:")
    assert lineage.output == ("file", urlsplit(location).path)
    assert asset_uri(ingest.sink.dataset(location)) == f"file://{lineage.output[1]}"
