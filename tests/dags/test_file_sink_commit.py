"""The file sink's commit protocol, through the ingest operator with the real broker and Spark:
a failing re-run leaves the previous output exactly as it was, a successful one replaces it,
and nothing is left next to the output folder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.operators.ingest import MANIFEST_NAME
from airflow_provider_kafka_spark.sinks import FileSink
from tools.kafka_records import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def ranges(new_topic: Any, kafka_config: dict[str, Any]) -> dict[str, Any]:
    """12 records ``v0..v11`` over 2 partitions, resolved earliest .. latest."""
    topic = new_topic(partitions=2)
    now = int(time.time() * 1000) - 60_000
    produce(kafka_config, topic, [(i % 2, None, f"v{i}".encode(), now + i) for i in range(12)])
    return resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest").to_dict()


def as_text(df: Any) -> Any:
    """The values as strings, in a column ``v``."""
    return df.selectExpr("CAST(value AS STRING) AS v")


def upper_case(df: Any) -> Any:
    return df.selectExpr("upper(CAST(value AS STRING)) AS v")


def exploding_on_v7(df: Any) -> Any:
    """Raises inside a Python UDF, on one record only, while Spark writes."""
    from pyspark.sql import functions as F

    @F.udf("string", useArrow=False)  # says which UDF: no guess from the hints
    def check(value: bytes) -> str:
        if bytes(value) == b"v7":
            raise RuntimeError("the transform exploded on v7")
        return bytes(value).decode()

    return df.select(check("value").alias("v"))


def ingest(ranges: dict[str, Any], path: Path, transform: Any, run_id: str) -> dict[str, Any]:
    return KafkaSparkIngestOperator(task_id="ingest", ranges=ranges,
                                    sink=FileSink(str(path), format="json"),
                                    transform=transform).execute({"run_id": run_id})


def rows(spark: Any, path: Path) -> list[str]:
    return sorted(row["v"] for row in spark.read.json(str(path)).collect())


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_failing_rerun_leaves_the_previous_output_and_manifest_as_they_were(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = ingest(ranges, out, as_text, "run_1")
    assert first["records"] == 12
    assert rows(spark, out) == sorted(f"v{i}" for i in range(12))
    before = snapshot(out)
    assert json.loads(before[MANIFEST_NAME])["run_id"] == "run_1"

    with pytest.raises(Exception, match="the transform exploded on v7"):
        ingest(ranges, out, exploding_on_v7, "run_2")

    assert snapshot(out) == before  # every data file and the manifest, byte for byte
    assert rows(spark, out) == sorted(f"v{i}" for i in range(12))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left


def test_a_successful_rerun_replaces_the_output_and_leaves_nothing_aside(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    ingest(ranges, out, as_text, "run_1")
    old_files = set(snapshot(out))

    second = ingest(ranges, out, upper_case, "run_2")

    assert second["records"] == 12
    assert rows(spark, out) == sorted(f"V{i}" for i in range(12))
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["run_id"] == "run_2" and manifest["records"] == 12
    part_files = {name for name in snapshot(out) if name.startswith("part-")}
    assert part_files and not part_files & old_files  # only the new run's data files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert not [p for p in out.rglob("*") if "_temporary" in p.name or "staging" in p.name]


def test_a_failing_first_run_leaves_nothing(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(Exception, match="the transform exploded on v7"):
        ingest(ranges, tmp_path / "new" / "deeper" / "out", exploding_on_v7, "run_1")
    assert list(tmp_path.iterdir()) == []
