"""Hostile arguments of every operator, sensor and trigger, without a broker or Spark.

Each one is a ``ConfigurationError`` (exactly that class, not a subclass such as
``OffsetSpecError``) whose message starts with the task (or trigger) and the argument with its
value, and says what to pass. Literal arguments fail when the operator is built, i.e. when the
DAG file is parsed; templated ones once rendered, at the start of ``execute``, before any
cluster call (no connection is configured here, so reaching the cluster would fail otherwise).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    OffsetRanges,
    OffsetSpecError,
    PartitionRange,
)
from airflow_provider_kafka_spark.operators import (
    KafkaCommitOffsetsOperator,
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sensors import (
    KafkaIntervalCompleteSensor,
    KafkaPartitionsSensor,
)
from airflow_provider_kafka_spark.triggers import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)

RANGES = OffsetRanges((PartitionRange("a", 0, 0, 5),), group_id="g").to_dict()
FILES = {"task_id": "ingest", "ranges": RANGES, "output_path": "/data/out"}
TOPIC = {"task_id": "ingest", "ranges": RANGES, "output_topic": "out"}
RESOLVE = {"task_id": "resolve", "topics": "orders"}
COMMIT = {"task_id": "commit", "ranges": RANGES}
PARTITIONS = {"task_id": "discover", "topics": "orders"}
INTERVAL = {"task_id": "complete", "topics": "orders"}


def configuration_error(build: Any, kwargs: dict[str, Any], name: str, fragment: str) -> str:
    """Build, expect exactly a ConfigurationError naming the owner and ``name=``."""
    with pytest.raises(ConfigurationError) as info:
        build(**kwargs)
    message = str(info.value)
    assert type(info.value) is ConfigurationError, message
    owner = kwargs.get("task_id", build.__name__)
    assert message.startswith(f"{owner}: {name}="), message
    assert fragment in message, message
    return message


POSITIVE_INT = "pass a positive int"
SECONDS = "pass a positive number of seconds or a timedelta"
BOOL = "pass True or False"

INGEST_CASES = [
    (FILES, "max_records_per_split", 0, POSITIVE_INT),
    (FILES, "max_records_per_split", -1, POSITIVE_INT),
    (FILES, "max_records_per_split", 1.5, "is not a whole number"),
    (FILES, "max_records_per_split", True, "is a bool, not a number"),
    (FILES, "max_records_per_split", "100", POSITIVE_INT),
    (FILES, "include_headers", "yes", BOOL),
    (FILES, "include_headers", 1, BOOL),
    (FILES, "include_headers", None, BOOL),
    (FILES, "engine", "spark", "pass one of 'python', 'spark-kafka'"),
    (FILES, "engine", None, "pass one of 'python', 'spark-kafka'"),
    (FILES, "on_data_loss", "ignore", "pass one of 'fail', 'skip'"),
    (TOPIC, "delivery_guarantee", "exactly-once",
     "pass one of 'none', 'at_least_once', 'exactly_once'"),
    (TOPIC, "delivery_guarantee", True, "pass one of 'none'"),
    (FILES, "delivery_guarantee", "at_least_once", "applies only to the sink output_topic="),
    (FILES, "output_format", "", "pass a Spark data source name"),
    (FILES, "output_format", "par quet", "pass a Spark data source name"),
    (FILES, "output_format", 3, "pass a Spark data source name"),
    (TOPIC, "output_format", "json", "applies only to the sink output_path="),
    (FILES, "output_options", ["compression"], "pass a dict of Spark writer options"),
    (FILES, "output_options", {"compression": ["zstd"]}, "pass option values as str"),
    (TOPIC, "output_options", {"compression": "zstd"}, "applies only to the sink output_path="),
    (FILES, "partition_by", "k", "a list even for one column"),
    (FILES, "partition_by", ["k", ""], "pass a list of column names"),
    (TOPIC, "partition_by", ["k"], "applies only to the sink output_path="),
    (FILES, "output_path", "", "is empty"),
    (FILES, "output_path", " ", "is empty"),
    (TOPIC, "output_topic", "", "is empty"),
    (TOPIC, "output_topic", "bad topic!", "1 to 249 letters, digits, '.', '_' or '-'"),
    (TOPIC, "output_topic", 42, "is not a string"),
    (FILES, "write_id", "w", "applies only to the sink output_topic="),
    (TOPIC, "write_id", " ", "is empty"),
    (FILES, "output_kafka_conn_id", "other", "applies only to the sink output_topic="),
    (TOPIC, "output_kafka_conn_id", "", "pass an Airflow connection id"),
    (TOPIC, "transactional_id_prefix", "", "pass a prefix unique to this application"),
    (FILES, "transform", "SELECT 1", "pass a function taking and returning a pyspark DataFrame"),
    (FILES, "sql", "", "pass a Spark SQL query over the view 'kafka'"),
    (FILES, "spark_conn_id", "", "pass an Airflow connection id"),
    (FILES, "spark_conf", ["spark.a=1"], "pass a dict of Spark conf"),
    (FILES, "kafka_conn_id", "", "pass an Airflow connection id"),
    (FILES, "progress_every", -1, SECONDS),
    (FILES, "progress_every", "30", "is not a number"),
    (FILES, "progress_every", False, "is a bool, not a number"),
    (FILES, "progress_every", float("inf"), "is not a positive, finite duration"),
]


@pytest.mark.parametrize(("value", "kept"), [(30, 30.0), (0.5, 0.5), (timedelta(minutes=1), 60.0),
                                             (0, None), (None, None)])
def test_ingest_keeps_progress_every_as_seconds_or_none(value: Any, kept: float | None) -> None:
    assert KafkaSparkIngestOperator(**FILES, progress_every=value).progress_every == kept
    assert KafkaSparkIngestOperator(**FILES).progress_every == 30.0


@pytest.mark.parametrize(("base", "name", "value", "fragment"), INGEST_CASES)
def test_ingest_rejects_a_bad_literal_when_built(base: dict[str, Any], name: str, value: Any,
                                                 fragment: str) -> None:
    message = configuration_error(KafkaSparkIngestOperator, {**base, name: value}, name, fragment)
    assert repr(value)[:50] in message


RESOLVE_CASES = [
    ("timeout", 0, SECONDS),
    ("timeout", -1, SECONDS),
    ("timeout", None, SECONDS),
    ("timeout", True, "is a bool, not a number"),
    ("timeout", "30", "is not a number"),
    ("timeout", float("nan"), "is not a positive, finite duration"),
    ("re_resolve", "false", BOOL),
    ("isolation_level", "dirty", "pass one of 'read_committed', 'read_uncommitted'"),
    ("on_data_loss", "ignore", "pass one of 'fail', 'skip'"),
    ("on_open_transaction", "wait", "pass one of 'fail', 'truncate'"),
    ("pins_topic", "", "is empty"),
    ("pins_topic", "pins topic", "is not a legal topic name"),
    ("group_id", "", "is empty"),
    ("group_id", 7, "is not a string"),
    ("kafka_conn_id", None, "pass an Airflow connection id"),
]


@pytest.mark.parametrize(("name", "value", "fragment"), RESOLVE_CASES)
def test_resolve_rejects_a_bad_literal_when_built(name: str, value: Any, fragment: str) -> None:
    configuration_error(KafkaResolveOffsetsOperator, {**RESOLVE, name: value}, name, fragment)


COMMIT_CASES = [
    ("timeout", 0, SECONDS),
    ("timeout", -5, SECONDS),
    ("timeout", None, SECONDS),
    ("timeout", False, "is a bool, not a number"),
    ("allow_rewind", "false", BOOL),
    ("allow_rewind", 1, BOOL),
    ("allow_rewind", None, BOOL),
    ("group_id", "", "is empty"),
]


@pytest.mark.parametrize(("name", "value", "fragment"), COMMIT_CASES)
def test_commit_rejects_a_bad_literal_when_built(name: str, value: Any, fragment: str) -> None:
    configuration_error(KafkaCommitOffsetsOperator, {**COMMIT, name: value}, name, fragment)


SENSOR_CASES = [
    (KafkaPartitionsSensor, PARTITIONS, "min_partitions", 0, POSITIVE_INT),
    (KafkaPartitionsSensor, PARTITIONS, "min_partitions", -1, POSITIVE_INT),
    (KafkaPartitionsSensor, PARTITIONS, "min_partitions", 1.5, "is not a whole number"),
    (KafkaPartitionsSensor, PARTITIONS, "min_partitions", True, "is a bool, not a number"),
    (KafkaPartitionsSensor, PARTITIONS, "min_partitions", "three", POSITIVE_INT),
    (KafkaPartitionsSensor, PARTITIONS, "min_partitions", None, POSITIVE_INT),
    (KafkaIntervalCompleteSensor, INTERVAL, "idle_timeout", -1, SECONDS),
    (KafkaIntervalCompleteSensor, INTERVAL, "idle_timeout", 0, SECONDS),
    (KafkaIntervalCompleteSensor, INTERVAL, "idle_timeout", timedelta(seconds=-5), SECONDS),
    (KafkaIntervalCompleteSensor, INTERVAL, "idle_timeout", True, "is a bool, not a number"),
    (KafkaIntervalCompleteSensor, INTERVAL, "idle_timeout", "300", "is not a number"),
    (KafkaIntervalCompleteSensor, INTERVAL, "end", "yesterday",
     "pass an aware datetime, an ISO-8601 time with zone"),
    (KafkaIntervalCompleteSensor, INTERVAL, "end", 17, "pass an aware datetime"),
    (KafkaPartitionsSensor, PARTITIONS, "poke_interval", 0, SECONDS),
    (KafkaPartitionsSensor, PARTITIONS, "poke_interval", -1, SECONDS),
    (KafkaPartitionsSensor, PARTITIONS, "poke_interval", True, "is a bool, not a number"),
    (KafkaIntervalCompleteSensor, INTERVAL, "poke_interval", "5", "is not a number"),
    (KafkaIntervalCompleteSensor, INTERVAL, "timeout", 0, SECONDS),
    (KafkaIntervalCompleteSensor, INTERVAL, "timeout", -60, SECONDS),
    (KafkaPartitionsSensor, PARTITIONS, "timeout", timedelta(0), SECONDS),
    (KafkaPartitionsSensor, PARTITIONS, "max_wait", -1, SECONDS),
    (KafkaPartitionsSensor, PARTITIONS, "deferrable", "yes", BOOL),
    (KafkaIntervalCompleteSensor, INTERVAL, "kafka_conn_id", "", "pass an Airflow connection id"),
]


@pytest.mark.parametrize(("build", "base", "name", "value", "fragment"), SENSOR_CASES)
def test_sensors_reject_a_bad_literal_when_built(build: Any, base: dict[str, Any], name: str,
                                                 value: Any, fragment: str) -> None:
    configuration_error(build, {**base, name: value}, name, fragment)


TRIGGER_CASES = [
    (KafkaPartitionsTrigger, {"min_partitions": 0}, "min_partitions", POSITIVE_INT),
    (KafkaPartitionsTrigger, {"min_partitions": True}, "min_partitions", "is a bool"),
    (KafkaPartitionsTrigger, {"min_partitions": "x"}, "min_partitions", POSITIVE_INT),
    (KafkaPartitionsTrigger, {"poll_interval": 0}, "poll_interval", SECONDS),
    (KafkaPartitionsTrigger, {"poll_interval": -2}, "poll_interval", SECONDS),
    (KafkaPartitionsTrigger, {"poll_interval": True}, "poll_interval", "is a bool"),
    (KafkaPartitionsTrigger, {"poll_interval": "5"}, "poll_interval", "is not a number"),
    (KafkaPartitionsTrigger, {"kafka_conn_id": ""}, "kafka_conn_id", "connection id"),
    (KafkaIntervalCompleteTrigger, {"end_ms": 1, "idle_timeout": -1}, "idle_timeout", SECONDS),
    (KafkaIntervalCompleteTrigger, {"end_ms": 1, "idle_timeout": 0}, "idle_timeout", SECONDS),
    (KafkaIntervalCompleteTrigger, {"end_ms": 1, "idle_timeout": False}, "idle_timeout",
     "is a bool"),
    (KafkaIntervalCompleteTrigger, {"end_ms": "soon"}, "end_ms", "pass the end as epoch millis"),
    (KafkaIntervalCompleteTrigger, {"end_ms": True}, "end_ms", "pass the end as epoch millis"),
    (KafkaIntervalCompleteTrigger, {"end_ms": -1}, "end_ms", "pass the end as epoch millis"),
]


@pytest.mark.parametrize(("build", "kwargs", "name", "fragment"), TRIGGER_CASES)
def test_triggers_reject_bad_arguments(build: Any, kwargs: dict[str, Any], name: str,
                                       fragment: str) -> None:
    configuration_error(build, {"topics": "orders", **kwargs}, name, fragment)


def test_good_literals_and_unrendered_templates_pass_when_built() -> None:
    KafkaSparkIngestOperator(**FILES, max_records_per_split=10, include_headers=False,
                             engine="spark-kafka", on_data_loss="skip", output_format="json",
                             output_options={"compression": "gzip", "x": 1},
                             partition_by=("k",))
    KafkaSparkIngestOperator(**TOPIC, delivery_guarantee="AT_LEAST_ONCE", write_id="w",
                             transactional_id_prefix="p", output_kafka_conn_id="other")
    KafkaSparkIngestOperator(task_id="i", ranges="{{ ti.xcom_pull('resolve') }}",
                             output_path="{{ params.out }}", output_format="{{ params.f }}",
                             sql="{{ params.sql }}")
    KafkaSparkIngestOperator(task_id="i", ranges=RANGES, output_topic="{{ params.topic }}",
                             write_id="{{ run_id }}")
    KafkaResolveOffsetsOperator(**RESOLVE, timeout=timedelta(seconds=5).total_seconds(),
                                start="{{ params.start }}", stop="latest", group_id=None)
    KafkaResolveOffsetsOperator(task_id="r", topics="{{ params.topics }}", start="earliest")
    KafkaCommitOffsetsOperator(**COMMIT, timeout=0.5, allow_rewind=True, group_id="{{ x }}")
    KafkaPartitionsSensor(**PARTITIONS, min_partitions="{{ params.n }}", poke_interval=0.1,
                          timeout=timedelta(minutes=1))
    KafkaPartitionsSensor(**PARTITIONS, min_partitions="3")
    KafkaIntervalCompleteSensor(**INTERVAL, end="{{ data_interval_end }}", idle_timeout=1e-3)
    KafkaIntervalCompleteSensor(**INTERVAL, end="2024-05-01T00:00:00Z",
                                idle_timeout=timedelta(minutes=5))
    KafkaIntervalCompleteTrigger(topics="a", end_ms=1_714_557_600_000, idle_timeout=None)


def test_bad_specs_and_subscriptions_are_offset_spec_errors_when_built() -> None:
    with pytest.raises(OffsetSpecError, match=r"^resolve: start: unknown offset spec 'yesterday'"):
        KafkaResolveOffsetsOperator(**RESOLVE, start="yesterday")
    with pytest.raises(OffsetSpecError, match=r"^resolve: topics must be a non-empty list"):
        KafkaResolveOffsetsOperator(task_id="resolve", topics=[])
    with pytest.raises(OffsetSpecError, match=r"^discover: topic_pattern '\(' is not a valid regex"):
        KafkaPartitionsSensor(task_id="discover", topic_pattern="(")
    with pytest.raises(OffsetSpecError, match=r"^complete: partition \['a', 'x'\] must be"):
        KafkaIntervalCompleteSensor(task_id="complete", partitions=[["a", "x"]])
    with pytest.raises(OffsetSpecError, match=r"^commit: ranges=.* are not offset ranges"):
        KafkaCommitOffsetsOperator(task_id="commit", ranges={"version": 9})


@pytest.mark.parametrize(
    ("build", "kwargs", "name", "rendered", "fragment"),
    [
        (KafkaPartitionsSensor, {**PARTITIONS, "min_partitions": "{{ params.n }}"},
         "min_partitions", "three", POSITIVE_INT),
        (KafkaPartitionsSensor, {**PARTITIONS, "min_partitions": "{{ params.n }}"},
         "min_partitions", "0", POSITIVE_INT),
        (KafkaIntervalCompleteSensor, {**INTERVAL, "end": "{{ params.end }}"}, "end",
         "not a time", "pass an aware datetime"),
        (KafkaSparkIngestOperator, {**FILES, "output_format": "{{ params.f }}"},
         "output_format", "", "pass a Spark data source name"),
        (KafkaSparkIngestOperator, {**FILES, "output_path": "{{ params.out }}"},
         "output_path", "", "is empty"),
        (KafkaSparkIngestOperator, {**TOPIC, "output_topic": "{{ params.t }}"},
         "output_topic", "a/b", "is not a legal topic name"),
        (KafkaSparkIngestOperator, {**FILES, "sql": "{{ params.sql }}"}, "sql", " ", "is empty"),
        (KafkaResolveOffsetsOperator, {**RESOLVE, "group_id": "{{ params.g }}"}, "group_id",
         ["g"], "is not a string"),
        (KafkaCommitOffsetsOperator, {**COMMIT, "group_id": "{{ params.g }}"}, "group_id",
         3, "is not a string"),
    ],
)
def test_templated_arguments_are_checked_once_rendered_before_any_cluster_call(
        build: Any, kwargs: dict[str, Any], name: str, rendered: Any, fragment: str) -> None:
    task = build(**kwargs)  # a template: not checked when the DAG is parsed
    setattr(task, name, rendered)  # what rendering produced
    context = {"run_id": "r", "params": {}, "data_interval_start": None,
               "data_interval_end": None}
    configuration_error(lambda **_: task.execute(context), {"task_id": kwargs["task_id"]}, name,
                        fragment)


@pytest.mark.parametrize(
    ("build", "kwargs", "param", "value"),
    [
        (KafkaCommitOffsetsOperator, COMMIT, "allow_rewind", "false"),
        (KafkaResolveOffsetsOperator, RESOLVE, "re_resolve", "no"),
    ],
)
def test_bool_params_of_a_run_must_be_bools(build: Any, kwargs: dict[str, Any], param: str,
                                            value: Any) -> None:
    with pytest.raises(ConfigurationError) as info:
        build(**kwargs).execute({"run_id": "r", "params": {param: value, "start": "earliest",
                                                           "stop": "latest"}})
    assert type(info.value) is ConfigurationError
    assert str(info.value).startswith(f"{kwargs['task_id']}: the Param {param}='{value}'")
    assert "pass true or false" in str(info.value)


DAG_FILE = """
import pendulum
from airflow.sdk import DAG
from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.sensors import KafkaIntervalCompleteSensor

with DAG(dag_id="hostile", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
    {task}
"""


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ('KafkaSparkIngestOperator(task_id="ingest", ranges="{{ ti.xcom_pull() }}", '
         'output_path="/out", max_records_per_split=0)',
         "ingest: max_records_per_split=0 is not valid; pass a positive int"),
        ('KafkaIntervalCompleteSensor(task_id="complete", topics="a", idle_timeout=-300)',
         "complete: idle_timeout=-300 is not a positive, finite duration"),
    ],
)
def test_a_bad_literal_is_an_import_error_of_the_dag_file(tmp_path: Path, task: str,
                                                          message: str) -> None:
    dag_file = tmp_path / "hostile.py"
    dag_file.write_text(textwrap.dedent(DAG_FILE).format(task=task))
    code = ("from airflow.dag_processing.dagbag import DagBag; "
            f"bag = DagBag({str(dag_file)!r}); "
            "print('DAGS', sorted(bag.dag_ids)); print('ERRORS', *bag.import_errors.values())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert "DAGS []\n" in out, out
    errors = out.split("ERRORS", 1)[1]
    assert "ConfigurationError" in errors and message in errors, out
