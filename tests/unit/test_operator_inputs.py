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

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.hooks import KafkaConnection, SchemaRegistryConnection
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
from airflow_provider_kafka_spark.sinks import FileSink, IcebergSink, KafkaSink
from airflow_provider_kafka_spark.triggers import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)

RANGES = OffsetRanges((PartitionRange("a", 0, 0, 5),), group_id="g").to_dict()
INGEST = {"task_id": "ingest", "ranges": RANGES}
FILES = {**INGEST, "sink": FileSink("/data/out")}
RESOLVE = {"task_id": "resolve", "topics": "orders"}
COMMIT = {"task_id": "commit", "ranges": RANGES}
PARTITIONS = {"task_id": "discover", "topics": "orders"}
INTERVAL = {"task_id": "complete", "topics": "orders"}


def exactly(error: BaseException, cls: type[BaseException]) -> bool:
    """``error`` is of ``cls`` and of no subclass of it (a ConfigurationError, not an
    OffsetSpecError); an operator's execute raises it made Airflow's do-not-retry as well
    (airflow_provider_kafka_spark/retries.py), under the same class name."""
    return isinstance(error, cls) and type(error).__name__ == cls.__name__


def configuration_error(build: Any, kwargs: dict[str, Any], name: str, fragment: str) -> str:
    """Build, expect exactly a ConfigurationError naming the owner and ``name=``."""
    with pytest.raises(ConfigurationError) as info:
        build(**kwargs)
    message = str(info.value)
    assert exactly(info.value, ConfigurationError), message
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


def test_ingest_takes_a_shape_but_not_with_a_transform_or_sql() -> None:
    from airflow_provider_kafka_spark.shaping import Derived, Shape

    shape = Shape(["offset", "value"], {"hour": Derived("timestamp", "hour")})
    assert KafkaSparkIngestOperator(**FILES, shape=shape).shape == shape
    with pytest.raises(ConfigurationError, match="ingest: pass shape= or a transform= / sql="):
        KafkaSparkIngestOperator(**FILES, shape=shape, sql="SELECT * FROM kafka")
    with pytest.raises(ConfigurationError, match=r"ingest: shape=\['offset'\] is not valid"):
        KafkaSparkIngestOperator(**FILES, shape=["offset"])


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


PATH = {"path": "/data/out"}
TOPIC = {"topic": "out"}

SINK_CASES = [
    # (the sink, or what it takes, its other arguments, the bad one, its value, fragment)
    (KafkaSink, TOPIC, "delivery_guarantee", "exactly-once",
     "pass one of 'none', 'at_least_once', 'exactly_once'"),
    (KafkaSink, TOPIC, "delivery_guarantee", True, "pass one of 'none'"),
    (FileSink, PATH, "format", "", "pass a Spark data source name"),
    (FileSink, PATH, "format", "par quet", "pass a Spark data source name"),
    (FileSink, PATH, "format", 3, "pass a Spark data source name"),
    (FileSink, PATH, "options", ["compression"], "pass a dict of Spark writer options"),
    (FileSink, PATH, "options", {"compression": ["zstd"]}, "pass option values as str"),
    (FileSink, PATH, "partition_by", "k", "a list even for one column"),
    (FileSink, PATH, "partition_by", ["k", ""], "pass a list of column names"),
    (FileSink, {}, "path", "", "pass the folder of the output"),
    (FileSink, {}, "path", " ", "pass the folder of the output"),
    (KafkaSink, {}, "topic", "", "is empty"),
    (KafkaSink, {}, "topic", "bad topic!", "1 to 249 letters, digits, '.', '_' or '-'"),
    (KafkaSink, {}, "topic", 42, "is not a string"),
    (KafkaSink, TOPIC, "write_id", " ", "is empty"),
    (KafkaConnection, {}, "kafka_conn_id", "", "pass an Airflow connection id"),  # kafka_config=
    (KafkaSink, TOPIC, "transactional_id_prefix", "", "pass a prefix unique to this application"),
]


@pytest.mark.parametrize(("build", "base", "name", "value", "fragment"), SINK_CASES)
def test_a_sink_rejects_a_bad_literal_when_built(build: Any, base: dict[str, Any], name: str,
                                                 value: Any, fragment: str) -> None:
    message = configuration_error(build, {**base, name: value}, name, fragment)
    assert repr(value)[:50] in message


@pytest.mark.parametrize(("build", "base", "name", "value"), [
    (FileSink, PATH, "delivery_guarantee", "at_least_once"),
    (KafkaSink, TOPIC, "format", "json"),
    (KafkaSink, TOPIC, "options", {"compression": "zstd"}),
    (KafkaSink, TOPIC, "partition_by", ["k"]),
    (FileSink, PATH, "write_id", "w"),
    (FileSink, PATH, "kafka_config", KafkaConnection("other")),
    (FileSink, PATH, "dead_letter_topic", "dlq"),
])
def test_a_sink_takes_only_its_own_arguments(build: Any, base: dict[str, Any], name: str,
                                             value: Any) -> None:
    """What was an argument "that applies only to the sink output_topic=/output_path=": the
    other sink does not take it at all."""
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        build(**base, **{name: value})


REMOVED_INGEST_ARGUMENTS = [
    "output_path", "output_format", "output_options", "partition_by", "output_topic",
    "output_kafka_conn_id", "delivery_guarantee", "transactional_id_prefix", "write_id",
    "dead_letter_topic", "output_table", "table_format", "table_application",
    "table_schema_evolution", "key_format", "value_format", "key_schema", "value_schema",
    "schema_registry_conn_id", "on_corrupt"]


@pytest.mark.parametrize("name", REMOVED_INGEST_ARGUMENTS)
def test_the_ingest_refuses_the_arguments_that_are_now_the_sinks_or_the_decodings(
        name: str) -> None:
    with pytest.raises(TypeError, match=rf"(?s)Invalid arguments were passed to "
                                        rf"KafkaSparkIngestOperator.*'{name}'"):
        KafkaSparkIngestOperator(**FILES, **{name: "x"})


DECODING_CASES = [
    ("value_format", "xml", "pass one of 'bytes', 'string', 'json', 'avro'"),
    ("key_format", 3, "pass one of 'bytes', 'string', 'json', 'avro'"),
    ("on_corrupt", "ignore", "pass one of 'fail', 'skip', 'dead_letter'"),
]


@pytest.mark.parametrize(("name", "value", "fragment"), DECODING_CASES)
def test_a_decoding_rejects_a_bad_literal_when_built(name: str, value: Any,
                                                     fragment: str) -> None:
    message = configuration_error(Decoding, {"value_format": "json", name: value}, name, fragment)
    assert repr(value)[:50] in message


@pytest.mark.parametrize(("arguments", "name", "fragment"), [
    ({"on_corrupt": "skip"}, "value_format", "decodes nothing"),  # on_corrupt, nothing decoded
    ({"value_format": "avro"}, "schema_registry", "is missing; the format 'avro' needs a Schema"),
    ({"value_format": "json", "schema_registry": SchemaRegistryConnection("r")},
     "schema_registry", "is not used"),
])
def test_a_decoding_checks_its_arguments_together_when_built(
        arguments: dict[str, Any], name: str, fragment: str) -> None:
    configuration_error(Decoding, arguments, name, fragment)


@pytest.mark.parametrize(("sink", "decode", "message"), [
    (FileSink("/data/out"), {"value_format": "json"},
     "ingest: decode={'value_format': 'json'} is not valid; pass Decoding(value_format=...)"),
    (KafkaSink("out"), Decoding(value_format="json", on_corrupt="dead_letter"),
     "ingest: KafkaSink: dead_letter_topic=None is missing; on_corrupt='dead_letter' needs"),
    (KafkaSink("out", dead_letter_topic="dlq"), Decoding(value_format="json"),
     "ingest: KafkaSink: dead_letter_topic='dlq' is not used"),
    (KafkaSink("out", dead_letter_topic="dlq"), None,
     "ingest: KafkaSink: dead_letter_topic='dlq' is not used"),
    (IcebergSink("lake.db.t"), Decoding(value_format="json", on_corrupt="dead_letter"),
     "ingest: IcebergSink: on_corrupt='dead_letter' does not apply to a table"),
])
def test_the_ingest_checks_its_sink_and_decoding_together_when_built(
        sink: Any, decode: Any, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        KafkaSparkIngestOperator(**INGEST, sink=sink, decode=decode)
    assert exactly(info.value, ConfigurationError)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("sink", [None, "/data/out", {"output_path": "/data/out"},
                                  [FileSink("/data/out"), KafkaSink("out")]])
def test_the_ingest_refuses_a_sink_that_is_not_a_sink(sink: Any) -> None:
    configuration_error(KafkaSparkIngestOperator, {**INGEST, "sink": sink}, "sink",
                        "pass a sink: FileSink(path), KafkaSink(topic), IcebergSink(table)")


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
    KafkaSparkIngestOperator(**INGEST, max_records_per_split=10, include_headers=False,
                             engine="spark-kafka", on_data_loss="skip",
                             sink=FileSink("/data/out", format="json",
                                           options={"compression": "gzip", "x": 1},
                                           partition_by=("k",)))
    KafkaSparkIngestOperator(**INGEST, sink=KafkaSink(
        "out", delivery_guarantee="AT_LEAST_ONCE", write_id="w", transactional_id_prefix="p",
        kafka_config=KafkaConnection("other")))
    KafkaSparkIngestOperator(task_id="i", ranges="{{ ti.xcom_pull('resolve') }}",
                             sink=FileSink("{{ params.out }}", format="{{ params.f }}"),
                             sql="{{ params.sql }}")
    KafkaSparkIngestOperator(task_id="i", ranges=RANGES,
                             sink=KafkaSink("{{ params.topic }}", write_id="{{ run_id }}"))
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
        (KafkaSparkIngestOperator, {**INGEST, "sink": FileSink("/out", format="{{ params.f }}")},
         "sink.format", "", "pass a Spark data source name"),
        (KafkaSparkIngestOperator, {**INGEST, "sink": FileSink("{{ params.out }}")},
         "sink.path", "", "pass the folder of the output"),
        (KafkaSparkIngestOperator, {**INGEST, "sink": KafkaSink("{{ params.t }}")},
         "sink.topic", "a/b", "is not a legal topic name"),
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
    *owners, attribute = name.split(".")  # the task's argument, or its sink's ("sink.path")
    target = task
    for owner in owners:
        target = getattr(target, owner)
    setattr(target, attribute, rendered)  # what rendering produced
    context = {"run_id": "r", "params": {}, "data_interval_start": None,
               "data_interval_end": None}
    named = f"{type(target).__name__}: {attribute}" if owners else name  # "FileSink: path"
    configuration_error(lambda **_: task.execute(context), {"task_id": kwargs["task_id"]}, named,
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
    assert exactly(info.value, ConfigurationError)
    assert str(info.value).startswith(f"{kwargs['task_id']}: the Param {param}='{value}'")
    assert "pass true or false" in str(info.value)


DAG_FILE = """
import pendulum
from airflow.sdk import DAG
from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.sensors import KafkaIntervalCompleteSensor
from airflow_provider_kafka_spark.sinks import FileSink, KafkaSink

with DAG(dag_id="hostile", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
    {task}
"""


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ('KafkaSparkIngestOperator(task_id="ingest", ranges="{{ ti.xcom_pull() }}", '
         'sink=FileSink("/out"), max_records_per_split=0)',
         "ingest: max_records_per_split=0 is not valid; pass a positive int"),
        ('KafkaSparkIngestOperator(task_id="ingest", ranges="{{ ti.xcom_pull() }}", '
         'sink=KafkaSink("bad topic!"))',
         "KafkaSink: topic='bad topic!' is not a legal topic name"),
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


@pytest.mark.parametrize(("sink", "field"), [
    (FileSink("/out/{{ params.hour }}"), "path"),
    (KafkaSink("out-{{ params.hour }}"), "topic"),
    (IcebergSink("lake.db.t{{ params.hour }}", application="a"), "table"),
])
def test_each_try_renders_the_sink_from_the_dags_own_value(sink: Any, field: str) -> None:
    # What Airflow does for each try (task_runner: prepare_for_execution(), a shallow copy,
    # then render_template_fields): a sink's fields are rendered in place, so without care the
    # first try's rendering would stay in the DAG's value, and a second run in the same
    # process (dag.test(), a backfill in the DAG processor's process) would write where the
    # first one did.
    ingest = KafkaSparkIngestOperator(task_id="i", ranges="{{ params.r }}", sink=sink)
    resolve = KafkaResolveOffsetsOperator(task_id="r", topics="t", start="table:earliest",
                                          table=sink) if field == "table" else None
    for hour in ("01", "02"):
        for task in (ingest, resolve) if resolve else (ingest,):
            running = task.prepare_for_execution()
            running.render_template_fields({"params": {"hour": hour, "r": "{}"}})
            rendered = running.sink if task is ingest else running.table
            assert getattr(rendered, field).endswith(f"{hour}")
    assert getattr(sink, field).endswith("{{ params.hour }}")
