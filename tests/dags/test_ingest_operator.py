"""The ingest operator's transformations and file options, executed directly (no DAG run):
``sql=`` over the ``kafka`` view, ``transform=``, ``partition_by``, another format."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.operators.ingest import MANIFEST_NAME
from airflow_provider_kafka_spark.sinks import FileSink
from tools.kafka_records import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _recent(i: int) -> int:
    """A timestamp the topic's retention keeps (old ones may be deleted any time)."""
    return int(time.time() * 1000) - 60_000 + i


@pytest.fixture
def ranges(new_topic: Any, kafka_config: dict[str, Any]) -> dict[str, Any]:
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [(i % 2, f"k{i % 3}".encode(), f"v{i}".encode(), _recent(i))
                                  for i in range(12)])
    return resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest").to_dict()


def test_sql_over_the_kafka_view_partitioned_by_key(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], tmp_path: Path) -> None:
    op = KafkaSparkIngestOperator(
        task_id="ingest", ranges=ranges,
        sink=FileSink(str(tmp_path / "sql"), format="json", partition_by=["k"]),
        sql="SELECT CAST(key AS STRING) AS k, CAST(value AS STRING) AS v, `offset` FROM kafka")
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
        task_id="ingest", ranges=ranges, sink=FileSink(str(tmp_path / "t")),
        transform=only_even_partition).execute({"run_id": "manual__1"})
    assert stats["records"] == 12  # read; the transform keeps 6
    assert sorted(bytes(r["value"]) for r in spark.read.parquet(str(tmp_path / "t")).collect()) \
        == sorted(f"v{i}".encode() for i in range(0, 12, 2))


def _delete_below(kafka_admin: Any, topic: str, partition: int, offset: int) -> None:
    """``delete_records``: the partition's log start offset becomes ``offset``."""
    tp = TopicPartition(topic, partition, offset)
    kafka_admin.delete_records([tp])[tp].result(30)


def test_skipped_data_loss_is_counted_in_the_xcom_the_manifest_and_the_log(
        kafka_connection: None, spark: Any, kafka_config: dict[str, Any], kafka_admin: Any,
        new_topic: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = new_topic(partitions=3)
    produce(kafka_config, topic, [(i % 3, None, f"v{i}".encode(), _recent(i)) for i in range(18)])
    _delete_below(kafka_admin, topic, 1, 1)  # lost at resolution: 1/0
    ranges = resolve_offsets(kafka_config, Subscription.topics(topic),
                             {topic: {"0": 0, "1": 0, "2": 0}}, "latest", on_data_loss="skip")
    assert ranges.lost == {(topic, 1): 1}
    _delete_below(kafka_admin, topic, 0, 2)  # lost after resolution: 0/0..1, 1/1..3
    _delete_below(kafka_admin, topic, 1, 4)

    stats = KafkaSparkIngestOperator(
        task_id="ingest", ranges=ranges.to_dict(), sink=FileSink(str(tmp_path / "out")),
        on_data_loss="skip").execute({"run_id": "manual__1"})

    assert stats["records"] == 4 + 2 + 6
    assert stats["lost"] == 2 + 4
    assert [(p["partition"], p["start"], p["stop"], p["records"], p["lost"])
            for p in stats["partitions"]] == [(0, 0, 6, 4, 2), (1, 1, 6, 2, 4), (2, 0, 6, 6, 0)]
    manifest = json.loads((tmp_path / "out" / MANIFEST_NAME).read_text())
    assert manifest["lost"] == 6
    assert [p["lost"] for p in manifest["partitions"]] == [2, 4, 0]
    log = capsys.readouterr().out  # the task log (Airflow's structlog writes to stdout)
    assert f"6 offset(s) deleted before they could be read were skipped " \
        f"(on_data_loss='skip'): {topic}/0: 2, {topic}/1: 4" in log
    assert stats["bytes"] == 10 + 6 + 15  # the values read: v6 v9 v12 v15 | v13 v16 | v2 .. v17
    assert [(p["bytes"], p["lag"]) for p in stats["partitions"]] == [(10, 0), (6, 0), (15, 0)]
    table = log.split("Wrote 12 record(s)")[1].splitlines()[1:6]
    assert table[0].split() == [
        "topic", "partition", "start", "stop", "records", "first_offset", "last_offset",
        "min_timestamp", "max_timestamp", "lag", "lost"]
    assert [line.split()[:7] + line.split()[-2:] for line in table[1:4]] == [
        [topic, "0", "0", "6", "4", "2", "5", "0", "2"],
        [topic, "1", "1", "6", "2", "4", "5", "0", "4"],
        [topic, "2", "0", "6", "6", "0", "5", "0", "0"]]
    assert table[4].startswith("total: 12 record(s), 31 byte(s) in ")
    assert " bytes/s), lag 0, lost 6" in table[4]  # (structlog appends the logger name)


def test_empty_ranges_report_the_loss_found_at_resolution(
        kafka_connection: None, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any,
        tmp_path: Path) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"v", _recent(0)), (0, None, b"v", _recent(1))])
    _delete_below(kafka_admin, topic, 0, 2)
    ranges = resolve_offsets(kafka_config, Subscription.topics(topic), {topic: {"0": 0}},
                             "latest", on_data_loss="skip")

    stats = KafkaSparkIngestOperator(
        task_id="ingest", ranges=ranges.to_dict(), sink=FileSink(str(tmp_path / "out")),
        on_data_loss="skip").execute({"run_id": "manual__1"})

    assert (stats["records"], stats["lost"]) == (0, 2)
    assert [(p["records"], p["lost"]) for p in stats["partitions"]] == [(0, 2)]
