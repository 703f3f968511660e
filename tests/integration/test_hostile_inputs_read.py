"""Hostile arguments to read_kafka (and decode_kafka / summarize): this package's error, of the
exact class, raised on the driver before any read, with a message that says what to do. Never
Spark's ``AnalysisException [PYTHON_DATA_SOURCE_ERROR]``, a TypeError or a bare TimeoutError:
``pytest.raises(KafkaSparkError)`` lets any of them fail the test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import CorruptRecordError, executor_error
from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    KafkaSparkError,
    OffsetRanges,
    OffsetResolutionError,
    OffsetSpecError,
    PartitionRange,
)
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.spark import (
    DecodeError,
    KafkaReadError,
    Subject,
    decode_kafka,
    kafka_errors,
    read_kafka,
    summarize,
)
from airflow_provider_kafka_spark.spark.read.datasource import read_options
from tests.support.topics import create_topic
from tools.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RANGES = OffsetRanges((PartitionRange("t", 0, 0, 5), PartitionRange("t", 1, 2, 9)))


def assert_error(call: Callable[[], object], cls: type[KafkaSparkError], fragment: str) -> str:
    """``call()`` raises exactly ``cls`` whose message contains ``fragment``; the message."""
    with pytest.raises(KafkaSparkError) as caught:
        call()
    assert type(caught.value) is cls, repr(caught.value)
    message = str(caught.value)
    assert fragment in message, message
    return message


@pytest.fixture
def unreachable() -> Iterator[dict[str, Any]]:
    """A config whose bootstrap port has no listener."""
    yield {"bootstrap.servers": f"127.0.0.1:{free_port()}"}


# --- Class 2: poll_timeout and timeout are positive, finite numbers of seconds ---

BAD_TIMEOUTS = [-1, 0, None, True, "30", float("nan"), float("inf"), 1e300]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", BAD_TIMEOUTS, ids=repr)
@pytest.mark.parametrize("name", ["poll_timeout", "timeout"])
def test_a_bad_timeout_is_a_configuration_error(spark: Any, unreachable: dict[str, Any],
                                                name: str, value: object) -> None:
    message = assert_error(lambda: read_kafka(spark, RANGES, unreachable, **{name: value}),
                           ConfigurationError, "pass a positive, finite number of seconds")
    assert message.startswith(f"{name}={shown(value)} ")


# --- Class 3: an unreachable cluster is this package's error, quickly, naming it ---

@pytest.mark.timeout(60)
@pytest.mark.parametrize("attempt", range(3))
@pytest.mark.parametrize("engine", ["python", "spark-kafka"])
def test_an_unreachable_cluster_is_an_offset_resolution_error(
        spark: Any, unreachable: dict[str, Any], engine: str, attempt: int) -> None:
    started = time.monotonic()
    message = assert_error(lambda: read_kafka(spark, RANGES, unreachable, engine=engine,
                                              timeout=1),
                           OffsetResolutionError, "the brokers are up and reachable from here")
    assert f"bootstrap.servers='{unreachable['bootstrap.servers']}'" in message
    assert "raise timeout=" in message
    assert time.monotonic() - started < 6


@pytest.mark.timeout(90)
def test_an_address_where_no_broker_answers_fails_within_the_first_contact_bound(
        spark: Any) -> None:
    """With the default timeout=30: no broker answering the first metadata request is an
    error after CONNECT_TIMEOUT_S (10 s), not after the whole timeout (it was ~31 s)."""
    started = time.monotonic()
    message = assert_error(lambda: read_kafka(spark, RANGES, {"bootstrap.servers": "127.0.0.1:1"}),
                           OffsetResolutionError,
                           "no broker of the Kafka cluster at bootstrap.servers='127.0.0.1:1' "
                           "answered within 10s")
    elapsed = time.monotonic() - started
    assert "Check that bootstrap.servers is right and that the brokers are up" in message
    assert elapsed < 20, f"read_kafka took {elapsed:.1f}s to find no broker answering"


# --- Class 9: read_kafka's arguments are checked on the driver, before Spark sees them ---

@pytest.fixture(scope="module")
def records(kafka_config: dict[str, Any], kafka_admin: Any) -> Iterator[OffsetRanges]:
    """A topic with three records: the ranges of all of them."""
    from tools.kafka_records import produce

    name = f"hostile-read-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_admin, name, 1)
    produce(kafka_config, name, [(0, None, b"v", int(time.time() * 1000))] * 3)
    yield OffsetRanges((PartitionRange(name, 0, 0, 3),))
    kafka_admin.delete_topics([name])[name].result(30)


READ_CASES: list[tuple[dict[str, Any], type[KafkaSparkError], str]] = [
    *[({"max_records_per_split": v}, ConfigurationError, "pass a positive int or None")
      for v in (0, -1, 1.5, True, "10", 2**64)],
    *[({"include_headers": v}, ConfigurationError, "pass True or False")
      for v in ("false", 1, None)],
    *[({"engine": v}, ConfigurationError, "use one of ('python', 'spark-kafka')")
      for v in ("spark", "PYTHON", None, ["python"])],
    *[({"isolation_level": v}, ConfigurationError, "use one of ('read_committed', ")
      for v in ("dirty", None, "READ_COMMITTED")],
    *[({"on_data_loss": v}, ConfigurationError, "use 'fail' or 'skip'")
      for v in ("ignore", None, True)],
    *[({"lost": v}, ConfigurationError, "pass a new LostOffsets()") for v in ("x", {})],
    ({"kafka_config": {"error_cb": print}}, ConfigurationError,
     "Spark executors only receive string, number or boolean settings"),
    ({"kafka_config": {"sasl.jaas.config": "x"}}, ConfigurationError, "sasl.username"),
    ({"ranges": '{"version": 1, "ranges": [{"topic": "t", "partition": 0, "start": 5, '
                '"stop": 2}], "resolved_at": "2024-05-01T00:00:00+00:00"}'},
     OffsetSpecError, "start 5 is after stop 2"),
    ({"spark": None}, ConfigurationError, "pass a SparkSession"),
]


@pytest.mark.parametrize(("change", "error", "fragment"), READ_CASES,
                         ids=[f"read{i}" for i in range(len(READ_CASES))])
def test_a_bad_read_argument_is_raised_before_the_read(
        spark: Any, kafka_config: dict[str, Any], records: OffsetRanges,
        change: dict[str, Any], error: type[KafkaSparkError], fragment: str) -> None:
    arguments: dict[str, Any] = {"spark": spark, "ranges": records, "kafka_config": kafka_config}
    for name, value in change.items():
        arguments[name] = {**kafka_config, **value} if name == "kafka_config" else value
    # count(): without the checks, Spark would fail here with an AnalysisException.
    assert_error(lambda: read_kafka(**arguments).count(), error, fragment)


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [("maxRecordsPerSplit", "0", "a positive int"), ("maxRecordsPerSplit", "x", "a positive int"),
     ("pollTimeout", "-1", "a positive number of seconds"),
     ("pollTimeout", "nan", "a positive number of seconds"),
     ("includeHeaders", "yes", "'true' or 'false'"), ("onDataLoss", "ignore", "'fail' or 'skip'"),
     ("isolationLevel", "dirty", "read_committed"), ("lostOffsetsAccumulator", "x", "an int")],
)
def test_bad_data_source_options_are_configuration_errors(
        kafka_config: dict[str, Any], records: OffsetRanges, option: str, value: str,
        fragment: str) -> None:
    options = {"ranges": records.to_json(), "kafka.bootstrap.servers": "a:1", option: value}
    message = assert_error(lambda: read_options(options), ConfigurationError, fragment)
    assert message.startswith(f"option {option}={value!r} of format 'kafka_bounded'")


def test_the_ranges_option_is_required() -> None:
    assert_error(lambda: read_options({}), ConfigurationError, "needs the 'ranges' option")


# --- Class 9: decode_kafka and summarize check their arguments ---

@pytest.fixture(scope="module")
def frame(spark: Any, kafka_config: dict[str, Any], records: OffsetRanges) -> Any:
    return read_kafka(spark, records, kafka_config)


DECODE_CASES: list[tuple[dict[str, Any], str]] = [
    *[({"key_format": v}, "use one of ('bytes', 'string', 'json', 'avro', 'protobuf', "
                          "'json_schema')")
      for v in ("xml", None, ["json"])],
    ({"key_format": "avro"}, "key_format='avro' needs key_schema, the reader schema"),
    ({"value_format": "avro", "value_schema": Subject("orders-value")},
     "value_format='avro' needs schema_registry={'url'"),
    ({"value_format": "protobuf", "value_schema": "{}", "schema_registry": {"url": "http://r"}},
     "a Protobuf schema is a Subject(...) or a generated message class"),
    ({"value_format": "string", "schema_registry": {"url": "http://r"}},
     "schema_registry is only used with the formats"),
    *[({"value_format": "json", "value_schema": v}, "a DDL string such as 'id long")
      for v in (5, ["id long"])],
    ({"value_format": "json", "value_schema": "id lon g,"}, "is not a valid DDL schema"),
    ({"value_format": "json", "value_schema": "int"}, "must describe columns"),
    ({"value_format": "json"}, "needs value_schema"),
    ({"on_corrupt": None}, "use one of ('fail', 'skip', 'dead_letter')"),
    ({"observation": "corrupt"}, "pass a pyspark.sql.Observation"),
]


@pytest.mark.parametrize(("arguments", "fragment"), DECODE_CASES,
                         ids=[f"decode{i}" for i in range(len(DECODE_CASES))])
def test_a_bad_decode_argument_is_a_decode_error(frame: Any, arguments: dict[str, Any],
                                                 fragment: str) -> None:
    assert_error(lambda: decode_kafka(frame, **arguments).collect(), DecodeError, fragment)


def test_decode_and_summarize_need_a_kafka_dataframe(spark: Any) -> None:
    for df in (None, "df", spark.range(3)):
        assert_error(lambda df=df: decode_kafka(df).collect(), DecodeError,
                     "pass the DataFrame of read_kafka")
        assert_error(lambda df=df: summarize(df), ConfigurationError,
                     "pass the DataFrame of read_kafka")


# --- Class 9: what Spark itself would reject is this package's error, naming the column ---

def test_a_corrupt_record_under_fail_is_a_corrupt_record_error(
        frame: Any, records: OffsetRanges) -> None:
    topic = records.ranges[0].topic
    decoded = decode_kafka(frame, value_format="json", value_schema="id long")
    with pytest.raises(KafkaSparkError) as caught, kafka_errors():
        decoded.collect()
    error = caught.value
    assert type(error) is CorruptRecordError, repr(error)
    assert str(error) == (f"corrupt record in {topic}/0 at offset 0: value is not JSON matching "
                          "the schema id long. Pass on_corrupt='skip' or 'dead_letter' to keep "
                          "going.")
    assert (error.topic, error.partition, error.offset) == (topic, 0, 0)
    assert isinstance(error, KafkaReadError)


def test_spark_s_text_of_a_corrupt_record_names_where_it_is() -> None:
    text = ("[USER_RAISED_EXCEPTION] corrupt record in orders.v2-x/11 at offset 123456: key is "
            "not valid string. Pass on_corrupt='skip' or 'dead_letter' to keep going. "
            "SQLSTATE: P0001\nJVM stacktrace: ...")
    error = executor_error(text)
    assert type(error) is CorruptRecordError
    assert (error.topic, error.partition, error.offset) == ("orders.v2-x", 11, 123456)
    assert str(error).endswith("key is not valid string. Pass on_corrupt='skip' or "
                               "'dead_letter' to keep going.")


def _frames(frame: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    return {
        "duplicate": frame.select("*", F.col("offset").alias("offset")),
        "duplicate_by_case": frame.select("*", F.col("value").alias("VALUE")),
        "raw_key": frame.withColumn("raw_key", F.lit(b"x")),
        "Decode_Error": frame.withColumn("Decode_Error", F.lit("x")),
        "_value_decoded": frame.withColumn("_value_decoded", F.lit("x")),
        "string_timestamp": frame.withColumn("timestamp", F.lit("2024-05-01")),
        "string_offset": frame.withColumn("offset", F.lit("x")),
    }


AVRO = '{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}'
SPARK_REJECTS: list[tuple[str, str, dict[str, Any], type[KafkaSparkError], str]] = [
    ("decode", "duplicate", {"value_format": "string"}, DecodeError,
     "decode_kafka cannot tell the columns ['offset', 'offset'] of its DataFrame apart (Spark "
     "compares column names ignoring case); give each column its own name"),
    ("decode", "duplicate_by_case", {}, DecodeError, "the columns ['value', 'VALUE']"),
    ("decode", "raw_key", {"value_format": "string", "on_corrupt": "dead_letter"}, DecodeError,
     "decode_kafka cannot add the column 'raw_key' (on_corrupt='dead_letter' adds it) to a "
     "DataFrame that has the column 'raw_key'"),
    ("decode", "Decode_Error", {"value_format": "string", "on_corrupt": "dead_letter"},
     DecodeError, "df.withColumnRenamed('Decode_Error', 'my_decode_error')"),
    ("decode", "_value_decoded", {"value_format": "avro", "value_schema": AVRO,
                                  "schema_registry": {"url": "http://127.0.0.1:1"}},
     DecodeError, "cannot add the column '_value_decoded' (the registry formats use it "
                  "internally)"),
    ("summarize", "duplicate", {}, ConfigurationError,
     "summarize cannot tell the columns ['offset', 'offset'] of its DataFrame apart"),
    ("summarize", "duplicate_by_case", {}, ConfigurationError, "['value', 'VALUE']"),
    ("summarize", "string_timestamp", {}, ConfigurationError,
     "summarize needs the column 'timestamp' as a timestamp, as read_kafka returns it; got "
     "string"),
    ("summarize", "string_offset", {}, ConfigurationError, "the column 'offset' as an integer"),
]


@pytest.mark.parametrize(("call", "name", "arguments", "error", "fragment"), SPARK_REJECTS,
                         ids=[f"{c[0]}-{c[1]}" for c in SPARK_REJECTS])
def test_what_spark_would_reject_is_refused_before_any_job(
        spark: Any, frame: Any, call: str, name: str, arguments: dict[str, Any],
        error: type[KafkaSparkError], fragment: str) -> None:
    df = _frames(frame)[name]
    jobs = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    if call == "decode":
        assert_error(lambda: decode_kafka(df, **arguments).collect(), error, fragment)
    else:
        assert_error(lambda: summarize(df), error, fragment)
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) == jobs


RESERVED_FIELDS: list[tuple[str, Any, str]] = [
    ("value", "id long, _corrupt_record string", "_corrupt_record"),
    ("value", "_CORRUPT_RECORD int", "_CORRUPT_RECORD"),
    ("key", "id long, _corrupt_record string", "_corrupt_record"),
    ("value", "struct", "_Corrupt_Record"),
]


@pytest.mark.parametrize(("column", "schema", "field"), RESERVED_FIELDS,
                         ids=[f"{c}-{f}" for c, _, f in RESERVED_FIELDS])
def test_a_json_schema_with_the_corrupt_record_field_is_refused_before_any_job(
        spark: Any, frame: Any, column: str, schema: Any, field: str) -> None:
    """decode_kafka adds ``_corrupt_record`` to a json schema (Spark's PERMISSIVE parse puts
    the text of a record that does not parse there); a schema with that field of its own was
    Spark's AMBIGUOUS_REFERENCE_TO_FIELDS AnalysisException."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if schema == "struct":
        schema = StructType([StructField("id", LongType()), StructField(field, StringType())])
    jobs = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    message = assert_error(
        lambda: decode_kafka(frame, **{f"{column}_format": "json", f"{column}_schema": schema}),
        DecodeError, f"{column}_schema has the field {field!r}")
    assert "Rename that field in the schema" in message, message
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) == jobs


def test_a_nested_corrupt_record_field_is_decoded(frame: Any) -> None:
    rows = decode_kafka(frame, value_format="json", on_corrupt="dead_letter",
                        value_schema="a struct<_corrupt_record: string>").collect()
    assert [r["decode_error"] for r in rows] == [
        "value is not JSON matching the schema a struct<_corrupt_record: string>"] * 3


def test_decode_keeps_columns_whose_names_need_quoting(frame: Any) -> None:
    from pyspark.sql import functions as F

    df = frame.withColumn("a`b", F.lit(1)).withColumn("c.d", F.lit(2))
    rows = decode_kafka(df, value_format="string").collect()
    assert [(r["value"], r["a`b"], r["c.d"]) for r in rows] == [("v", 1, 2)] * 3
