"""Bad transformations, formats and SQL fail the ingest task before anything is read or written:
the ingest operator executed directly (real broker ranges, real Spark) and inside a DAG run.

"Nothing read" is asserted by replacing ``read_kafka`` with a function that records its calls;
"no Spark job" by the status tracker's job ids, where the check needs no job at all.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.errors import (
    CorruptRecordError,
    KafkaSparkError,
    WriteConfigError,
)
from airflow_provider_kafka_spark.offsets import ConfigurationError, Subscription, resolve_offsets
from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.sinks import FileSink, KafkaSink
from tests.support.dag_data import T0
from tools.kafka_records import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def ranges(new_topic: Any, kafka_config: dict[str, Any]) -> dict[str, Any]:
    topic = new_topic(partitions=2)
    now = int(time.time() * 1000) - 60_000
    produce(kafka_config, topic, [(i % 2, b"k", f"v{i}".encode(), now + i) for i in range(6)])
    return resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest").to_dict()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The calls of ``read_kafka`` (which then fail the test's task: nothing must get there)."""
    import importlib

    # the module, not the function ingest that the package exports under the same name
    pipeline = importlib.import_module("airflow_provider_kafka_spark.spark.ingest")

    calls: list[Any] = []

    def read_kafka(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        raise AssertionError("read_kafka was called")

    monkeypatch.setattr(pipeline, "read_kafka", read_kafka)
    return calls


def jobs(spark: Any) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def a_list(df: Any) -> Any:
    return df.collect()


def unknown_column(df: Any) -> Any:
    return df.select("no_such_column")


CASES = [
    # (operator and FileSink arguments, message fragment, whether a Spark job may run: the
    # transform's own collect(), or the file sink's test write of no rows)
    ({"transform": a_list}, "transform='a_list' returned list, not a DataFrame", True),
    ({"transform": lambda df: None}, "returned NoneType, not a DataFrame", False),
    ({"transform": unknown_column}, "transform=unknown_column failed on an empty DataFrame", False),
    ({"format": "nope"}, "output format 'nope' is not a data source", False),
    ({"format": "avro"}, "spark-avro", False),
    ({"sql": "SELEC key FROM kafka"}, "is not valid Spark SQL", False),
    ({"sql": "SELECT no_such_column FROM kafka"}, "UNRESOLVED_COLUMN", False),
    ({"sql": "SELECT 1; SELECT 2"}, "is not valid Spark SQL", False),
    ({"sql": "DROP VIEW kafka"}, "is not one query Spark can run over the records", False),
    ({"format": "csv"}, "The CSV datasource doesn't support the column `headers`", True),
    ({"partition_by": ["no_such_column"]}, "Partition column `no_such_column` not found", True),
    ({"sql": "SELECT key, value AS KEY FROM kafka"},
     "ingest: sql='SELECT key, value AS KEY FROM kafka' returns the columns ['key', 'KEY'], "
     "which Spark cannot tell apart (Spark compares column names ignoring case); give each "
     "column its own name", False),
    ({"transform": lambda df: df.select("offset", "offset")},
     "returns the columns ['offset', 'offset'], which Spark cannot tell apart", False),
]


FILE_SINK_ARGUMENTS = ("format", "options", "partition_by")


@pytest.mark.parametrize(("kwargs", "message", "job"), CASES)
def test_a_bad_file_ingest_fails_before_the_read(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], reads: list[Any],
        tmp_path: Path, kwargs: dict[str, Any], message: str, job: bool) -> None:
    out = tmp_path / "day" / "out"
    ran = jobs(spark)
    sink = FileSink(str(out), **{k: v for k, v in kwargs.items() if k in FILE_SINK_ARGUMENTS})
    op = KafkaSparkIngestOperator(task_id="ingest", ranges=ranges, sink=sink,
                                  **{k: v for k, v in kwargs.items()
                                     if k not in FILE_SINK_ARGUMENTS})
    with pytest.raises(ConfigurationError) as info:
        op.execute({"run_id": "manual__1"})
    assert message in str(info.value)
    assert reads == []
    assert list(tmp_path.iterdir()) == []  # not even the parent folder
    if not job:
        assert jobs(spark) == ran


def test_a_bad_kafka_ingest_fails_before_the_read(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], reads: list[Any]) -> None:
    op = KafkaSparkIngestOperator(task_id="ingest", ranges=ranges, sink=KafkaSink("out"),
                                  transform=lambda df: df.select("offset", "value"))
    ran = jobs(spark)
    with pytest.raises(WriteConfigError, match=r"have the columns \['offset', 'value'\]: "
                                               r"\['offset'\] cannot be written"):
        op.execute({"run_id": "manual__1"})
    assert reads == [] and jobs(spark) == ran


def test_duplicate_columns_for_a_kafka_sink_fail_before_the_read(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], reads: list[Any]) -> None:
    op = KafkaSparkIngestOperator(task_id="ingest", ranges=ranges, sink=KafkaSink("out"),
                                  sql="SELECT value, value FROM kafka")
    ran = jobs(spark)
    with pytest.raises(ConfigurationError, match=r"returns the columns \['value', 'value'\], "
                                                 "which Spark cannot tell apart"):
        op.execute({"run_id": "manual__1"})
    assert reads == [] and jobs(spark) == ran


def test_an_undecodable_record_fails_the_ingest_with_where_it_is(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], tmp_path: Path) -> None:
    topic = ranges["ranges"][0]["topic"]
    with pytest.raises(KafkaSparkError) as caught:
        KafkaSparkIngestOperator(task_id="ingest", ranges=ranges,
                                 sink=FileSink(str(tmp_path / "o")),
                                 decode=Decoding(value_format="json", value_schema="id long"),
                                 ).execute({"run_id": "manual__1"})
    error = caught.value
    # The package's class, made Airflow's "do not retry" too (the same records fail again).
    assert isinstance(error, CorruptRecordError) and type(error).__name__ == \
        "CorruptRecordError", repr(error)
    assert isinstance(error, AirflowFailException)
    assert str(error) == (
        f"ingest: 6 record(s) could not be decoded; the first is {topic}/0 at offset 0: value "
        "is not JSON matching the schema id long. Nothing was written. Fix the producer or the "
        "reader schema, or pass on_corrupt='skip' or 'dead_letter'.")
    assert (error.topic, error.partition, error.offset) == (topic, 0, 0)
    assert list(tmp_path.iterdir()) == []


def test_a_previous_output_survives_a_bad_rerun(
        kafka_connection: None, spark: Any, ranges: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    KafkaSparkIngestOperator(task_id="ingest", ranges=ranges, sink=FileSink(str(out))) \
        .execute({"run_id": "manual__1"})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigurationError, match="The CSV datasource doesn't support"):
        KafkaSparkIngestOperator(task_id="ingest", ranges=ranges,
                                 sink=FileSink(str(out), format="csv")).execute({"run_id": "manual__2"})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize(
    ("field", "template", "message"),
    [
        ("sql", "SELEC key FROM kafka", "ingest: sql='SELEC key FROM kafka' is not valid Spark SQL"),
        ("sink.format", "{{ 'no' ~ 'pe' }}", "output format 'nope' is not a data source"),
    ],
)
def test_a_templated_mistake_fails_the_dag_run_before_the_read(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path,
        field: str, template: str, message: str) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"x", int(T0.timestamp() * 1000))])
    output = tmp_path / "adhoc"

    def set_template(dag: Any) -> None:  # field: the task's ("sql"), or its sink's ("sink.format")
        *owners, name = field.split(".")
        target = dag.get_task("ingest")
        for owner in owners:
            target = getattr(target, owner)
        setattr(target, name, template)

    outcome = run_dag("kafka_adhoc", logical_date=None, edit=set_template, conf={
        "topics": topic, "start": "earliest", "stop": "latest", "output_path": str(output)})
    assert outcome.task_states == {"resolve_offsets": "success", "ingest": "failed"}
    assert message in outcome.errors["ingest"]
    assert list(tmp_path.iterdir()) == []
