"""Each sink's answer to ``ingest``'s one question (``sink.intake(SinkInput(...))``, asked
right after ``prepare``) for each shape of input: records as read, decoded or transformed, by
the native readers or Spark's Kafka source; and ``ingest``'s check of an answer it cannot
follow. The answers are followed end to end in ``tests/integration/test_ingest.py``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError, WriteConfigError
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.sinks import DeltaSink, FileSink, IcebergSink, KafkaSink, Sink
from airflow_provider_kafka_spark.sinks.files.swap import STAGING_MARK
from airflow_provider_kafka_spark.spark import kafka_schema
from airflow_provider_kafka_spark.spark.ingest_checks import checked_intake
from airflow_provider_kafka_spark.spark.intake import (
    Intake,
    LandedParquet,
    Records,
    RowsWithSplitEnds,
    SinkInput,
    SparkRows,
)
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder

IDENTITY = '["ranges-identity", true, null]'
SHAPES: list[tuple[Records, str]] = [(records, engine)
                                     for records in ("as_read", "decoded", "transformed")
                                     for engine in ("python", "spark-kafka")]
OTHER_SHAPES = [s for s in SHAPES if s != ("as_read", "python")]


def given(records: Records = "as_read", engine: Any = "python") -> SinkInput:
    return SinkInput(identity=IDENTITY, records=records, engine=engine)


class OwnSink(Sink):
    """A sink of one's own: the abstract steps only."""

    def describe(self) -> dict[str, Any]:
        return {}

    def write(self, df: Any, dead_letters: Any = None) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(("records", "engine"), SHAPES)
def test_a_sink_of_your_own_takes_spark_rows_visible_as_written(records: Records,
                                                                 engine: str) -> None:
    assert OwnSink().intake(given(records, engine)) == Intake(
        SparkRows(), staged=False, statistics_after_commit=False)
    assert Intake() == Intake(SparkRows(), staged=False, statistics_after_commit=False)


@pytest.mark.parametrize("sink", [IcebergSink("lake.db.orders"), DeltaSink("/data/orders")],
                         ids=["iceberg", "delta"])
@pytest.mark.parametrize(("records", "engine"), SHAPES)
def test_a_table_sink_takes_spark_rows_staged_and_counted_after_its_commit(
        sink: Sink, records: Records, engine: str) -> None:
    assert sink.intake(given(records, engine)) == Intake(
        SparkRows(), staged=True, statistics_after_commit=True)


READ_COLUMNS = kafka_schema(include_headers=True)


@pytest.mark.parametrize(("guarantee", "records", "engine", "takes"), [
    ("exactly_once", "as_read", "python", RowsWithSplitEnds()),
    *[("exactly_once", r, e, SparkRows()) for r, e in OTHER_SHAPES],
    *[(g, r, e, SparkRows()) for g in ("at_least_once", "none") for r, e in SHAPES],
])
def test_a_kafka_sink_takes_rows_with_split_ends_only_exactly_once_and_as_read(
        spark: Any, guarantee: str, records: Records, engine: str, takes: Any) -> None:
    sink = KafkaSink("out", kafka_config={}, delivery_guarantee=guarantee)
    shaped = spark.createDataFrame([], READ_COLUMNS)
    if records == "transformed":
        shaped = shaped.select("key", "value", "headers")
    sink.prepare(spark, shaped)

    assert sink.intake(given(records, engine)) == Intake(
        takes, staged=False, statistics_after_commit=False)
    assert sink.input_identity == IDENTITY
    assert sink.records_as_read is (records != "transformed")


def test_a_kafka_sink_checks_the_columns_it_writes_when_asked(spark: Any) -> None:
    """Records not transformed keep only their own columns (``offset`` and ``timestampType``
    are dropped); a transform's columns are written as they are."""
    read = spark.createDataFrame([], READ_COLUMNS)
    as_read = KafkaSink("out", kafka_config={})
    as_read.prepare(spark, read)
    assert as_read.intake(given("decoded")) == Intake(SparkRows())

    transformed = KafkaSink("out", kafka_config={})
    transformed.prepare(spark, read.select("offset", "value"))
    with pytest.raises(WriteConfigError) as caught:
        transformed.intake(given("transformed"))
    assert str(caught.value) == (
        "the records to write to topic 'out' have the columns ['offset', 'value']: ['offset'] "
        "cannot be written. write_kafka takes ['key', 'value', 'topic', 'partition', "
        "'headers', 'timestamp'] and needs 'value'; make the transform or sql return those "
        "(select or rename the columns). Nothing was read or written.")

    no_value = KafkaSink("out", kafka_config={})
    no_value.prepare(spark, read.select("key"))
    with pytest.raises(WriteConfigError, match=r"have the columns \['key'\]: no 'value'\."):
        no_value.intake(given("transformed"))

    with pytest.raises(SinkError, match=r"KafkaSink\.intake\(\) called without prepare\(\)"):
        KafkaSink("out", kafka_config={}).intake(given())


@pytest.mark.parametrize(("options", "codec"), [({}, "snappy"),
                                                ({"compression": "zstd"}, "zstd"),
                                                ({"COMPRESSION": "none"}, "none")])
def test_a_file_sink_of_local_parquet_has_the_readers_land_records_as_read(
        spark: Any, tmp_path: Path, options: dict[str, str], codec: str) -> None:
    sink = FileSink(str(tmp_path / "out"), options=options)
    sink.prepare(spark, spark.createDataFrame([], READ_COLUMNS))
    try:
        intake = sink.intake(given())
        assert isinstance(intake.takes, LandedParquet)
        folder = intake.takes.folder
        assert intake == Intake(LandedParquet(folder, sink.adopt), staged=True,
                                statistics_after_commit=False)
        assert os.path.dirname(folder.path) == str(tmp_path)
        assert os.path.basename(folder.path).startswith(f".out{STAGING_MARK}")
        assert os.path.isdir(folder.path)  # the staging folder prepare made
        assert (folder.compression, folder.s3) == (codec, None)
    finally:
        sink.abort()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("arguments", "records", "engine"), [
    *[({}, r, e) for r, e in OTHER_SHAPES],
    ({"format": "json"}, "as_read", "python"),
    ({"format": "orc"}, "as_read", "python"),
    ({"partition_by": ["partition"]}, "as_read", "python"),
    ({"options": {"compression": "snappy", "parquet.block.size": "1048576"}}, "as_read",
     "python"),
    ({"options": {"compression": "lz4_raw"}}, "as_read", "python"),  # not a PARQUET_CODECS
])
def test_a_file_sink_takes_spark_rows_staged_otherwise(
        spark: Any, tmp_path: Path, arguments: dict[str, Any], records: Records,
        engine: str) -> None:
    sink = FileSink(str(tmp_path / "out"), **arguments)
    try:
        sink.prepare(spark, spark.createDataFrame([], READ_COLUMNS))
        assert sink.intake(given(records, engine)) == Intake(
            SparkRows(), staged=True, statistics_after_commit=False)
    finally:
        sink.abort()


def test_a_file_sink_is_asked_after_prepare(tmp_path: Path) -> None:
    with pytest.raises(SinkError, match=r"FileSink\.intake\(\) called without a successful "
                                        r"prepare\(\)"):
        FileSink(str(tmp_path / "out")).intake(given())


def test_a_file_sink_on_s3_has_the_readers_upload_records_as_read(
        spark: Any, s3_endpoint: Any, s3_bucket: str) -> None:
    settings = S3Settings(endpoint_url=s3_endpoint.url, region=s3_endpoint.region,
                          access_key=s3_endpoint.access_key,
                          secret_key=s3_endpoint.secret_key, path_style=True)
    sink = FileSink(f"s3a://{s3_bucket}/orders/h1", s3=settings)
    sink.prepare(spark, spark.createDataFrame([], READ_COLUMNS))
    try:
        assert sink.intake(given()) == Intake(LandedParquet(
            ParquetFolder(f"s3://{s3_bucket}/orders/h1", "snappy", settings), sink.adopt),
            staged=True)
        assert sink.intake(given("decoded")) == Intake(SparkRows(), staged=True)
    finally:
        sink.abort()


class Answering(OwnSink):
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def __repr__(self) -> str:
        return "Answering()"

    def intake(self, given: SinkInput) -> Any:
        return self.answer


def test_ingest_follows_only_an_answer_the_readers_can_give(tmp_path: Path) -> None:
    folder = ParquetFolder(str(tmp_path))
    landed = Intake(LandedParquet(folder, lambda names: {}), staged=True)
    for answer in (Intake(), landed, Intake(RowsWithSplitEnds())):
        assert checked_intake("job", Answering(answer), answer, given()) is answer
    assert checked_intake("job", Answering(Intake()), Intake(), given("transformed")) == Intake()
    decoded_by_readers = SinkInput(identity=IDENTITY, records="decoded", engine="python",
                                   readers_decode=True)
    assert checked_intake("job", Answering(landed), landed, decoded_by_readers) is landed
    with pytest.raises(ConfigurationError, match="answered LandedParquet for records 'decoded'"):
        checked_intake("job", Answering(landed), landed, given("decoded"))
    with pytest.raises(ConfigurationError, match="answered RowsWithSplitEnds for records "
                                                 "'decoded'"):
        checked_intake("job", Answering(None), Intake(RowsWithSplitEnds()), decoded_by_readers)

    with pytest.raises(ConfigurationError) as caught:
        checked_intake("job", Answering(landed), landed, given("transformed", "python"))
    assert str(caught.value) == (
        "job: Answering().intake() answered LandedParquet for records 'transformed' read with "
        "engine='python'; the readers land files only for records as read or decoded by the "
        "readers (SinkInput.native_rows), and mark split ends only for records as read "
        "(SinkInput.native_as_read), with engine='python'. Answer SparkRows() for this input. "
        "Nothing was read.")
    with pytest.raises(ConfigurationError, match="answered RowsWithSplitEnds for records "
                                                 "'as_read' read with engine='spark-kafka'"):
        checked_intake("job", Answering(None), Intake(RowsWithSplitEnds()),
                       given("as_read", "spark-kafka"))
    with pytest.raises(ConfigurationError) as caught:
        checked_intake("job", Answering(None), None, given())
    assert str(caught.value) == (
        "job: Answering().intake() returned None; return an Intake "
        "(airflow_provider_kafka_spark.spark.intake), e.g. Intake() for Spark rows through "
        "write(). Nothing was read.")
    bad_folder = Intake(LandedParquet(str(tmp_path), lambda names: {}))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="LandedParquet takes a ParquetFolder"):
        checked_intake("job", Answering(None), bad_folder, given())
