"""Retry classification that tells the truth (issue 55): ``causes.classify`` reads a failure's
causes (the texts Spark, S3A, the AWS SDK, PostgreSQL's driver and librdkafka give, Python's
exception classes) and says whether a retry can help; every place where an engine's, a store's
or a client's exception becomes one of the package's errors raises the class that says so.
Each wrap site gets a transient cause (retryable) and a permanent one (not). No JVM here:
``tests/integration/test_causes_jvm.py`` feeds real Java exceptions."""

from __future__ import annotations

from typing import Any
from unittest.mock import MagicMock

import pytest
from confluent_kafka import KafkaError

from airflow_provider_kafka_spark.causes import classify, classify_text
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    KafkaSparkError,
    OffsetResolutionError,
    SinkError,
    TableError,
    TableRuntimeError,
    TransientError,
    UnknownTopicError,
)
from airflow_provider_kafka_spark.offsets import Subscription
from airflow_provider_kafka_spark.offsets.config import is_authentication_failure
from airflow_provider_kafka_spark.sinks.files.objects import PublishConflictError

# -- texts as the engines give them ---------------------------------------------------------

TEMPORARY_GONE = (
    "An error occurred while calling o812.save.\n: java.io.FileNotFoundException: No such file "
    "or directory: s3a://lake/new/path/_temporary/0\n\tat org.apache.hadoop.fs.s3a.S3AFileSystem"
    ".s3GetFileStatus(S3AFileSystem.java:4027)\n")
SLOW_DOWN = (
    "An error occurred while calling o90.save.\n: org.apache.hadoop.fs.s3a."
    "AWSServiceThrottledException: PUT 0-byte object on new/path: software.amazon.awssdk."
    "services.s3.model.S3Exception: Please reduce your request rate. (Service: S3, Status "
    "Code: 503, Request ID: X):SlowDown\n")
SERVER_500 = ("org.apache.hadoop.fs.s3a.AWSStatus500Exception: PUT on x: We encountered an "
              "internal error. (Service: S3, Status Code: 500, Request ID: Y):InternalError")
RESET = ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed: "
         "org.apache.hadoop.fs.s3a.AWSClientIOException: upload part on x: software.amazon."
         "awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connection "
         "reset\nCaused by: java.net.SocketException: Connection reset\n")
TIMEOUT = "java.net.SocketTimeoutException: Read timed out"
METASTORE_DOWN = (
    "org.apache.spark.sql.AnalysisException: org.apache.hadoop."
    "hive.ql.metadata.HiveException: java.lang.RuntimeException: Unable to instantiate org."
    "apache.hadoop.hive.ql.metadata.SessionHiveMetaStoreClient\nCaused by: MetaException("
    "message:Could not connect to meta store using any of the URIs provided. Most recent "
    "failure: org.apache.thrift.transport.TTransportException: java.net.ConnectException: "
    "Connection refused)")
CATALOG_DB_DOWN = ("org.apache.iceberg.jdbc.UncheckedSQLException: Failed to connect: jdbc:"
                   "postgresql://db:5432/iceberg\nCaused by: org.postgresql.util.PSQLException: "
                   "Connection to db:5432 refused. Check that the hostname and port are correct")
SQL_TRANSIENT = "java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available"
NO_CLASS = ("java.lang.RuntimeException: java.lang.ClassNotFoundException: Class org.apache."
            "hadoop.fs.s3a.S3AFileSystem not found")
NO_SOURCE = ("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: nope. Make sure the "
             "provider name is correct. SQLSTATE: 42K02")
DENIED = ("java.nio.file.AccessDeniedException: s3a://lake/x: getFileStatus on s3a://lake/x: "
          "software.amazon.awssdk.services.s3.model.S3Exception: Forbidden (Service: S3, Status "
          "Code: 403, Request ID: X)")
NO_BUCKET = ("org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://gone/x': Bucket gone does "
             "not exist")
BAD_COLUMNS = ("[UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE] The CSV datasource doesn't support the "
               "column `b` of the type \"ARRAY<STRING>\". SQLSTATE: 0A000")
BAD_CODEC = "java.lang.IllegalArgumentException: Codec [bogus] is not available."
NO_DELTA = "[DELTA_MISSING_DELTA_TABLE] `s3a://lake/none` is not a Delta table."
NO_PARTITION_COLUMN = "org.apache.spark.sql.AnalysisException: Partition column `missing` not found"


class AnalysisException(Exception):
    """Stands for ``pyspark.errors.AnalysisException`` (its class name is what counts)."""


@pytest.mark.parametrize(("text", "retryable", "kind"), [
    (TEMPORARY_GONE, True, "concurrent writer"),
    (SLOW_DOWN, True, "throttled"),
    (SERVER_500, True, "server error"),
    (RESET, True, "connection"),
    (TIMEOUT, True, "timeout"),
    (METASTORE_DOWN, True, "connection"),  # below an AnalysisException: transient
    (CATALOG_DB_DOWN, True, "database"),
    (SQL_TRANSIENT, True, "database"),
    ("java.io.IOException: Stream closed", True, "I/O error"),
    ("java.io.FileNotFoundException: s3a://lake/x/part-0.parquet", True, "I/O error"),
    ("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata",
     True, "concurrent writer"),
    ("io.delta.exceptions.ConcurrentAppendException: Files were added", True,
     "concurrent writer"),
    (NO_CLASS, False, "missing class"),
    (f"java.io.IOException: wrapped\nCaused by: {NO_CLASS}", False, "missing class"),
    (NO_SOURCE, False, "missing class"),
    (DENIED, False, "refused"),
    ("org.postgresql.util.PSQLException: FATAL: password authentication failed for user "
     "\"iceberg\"", False, "refused"),
    (NO_BUCKET, False, "missing"),
    ("org.apache.hadoop.fs.ParentNotDirectoryException: Parent path is not a directory: "
     "file:/tmp/a-file", False, "path in the way"),
    (BAD_CODEC, False, "bad argument"),
    (NO_DELTA, False, "bad argument"),
    (NO_PARTITION_COLUMN, False, "bad argument"),
    ("something nobody has seen", True, "unknown"),
])
def test_the_causes_a_retry_can_change_and_those_it_cannot(text: str, retryable: bool,
                                                            kind: str) -> None:
    cause = classify_text(text)
    assert (cause.retryable, cause.kind) == (retryable, kind), cause
    said = cause.says()
    assert ("a retry may help" in said) if retryable else ("cannot help" in said), said


def test_metastore_down_below_an_analysis_error_is_transient() -> None:
    assert classify_text(METASTORE_DOWN).retryable
    assert not classify_text("org.apache.spark.sql.AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] "
                             "The table or view `db`.`t` cannot be found.").retryable


def test_stack_frames_are_not_causes() -> None:
    text = ("java.lang.IllegalArgumentException: bad\n\tat org.apache.hadoop.fs.s3a.Invoker."
            "once(Invoker.java:1)\n\tat java.net.SocketTimeoutException.<init>(X.java:2)\n")
    assert classify_text(text).kind == "bad argument"


def test_python_chains_classes_and_clients() -> None:
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except OSError as inner:
            raise RuntimeError("upload failed") from inner
    except RuntimeError as outer:
        assert classify(outer).kind == "connection" and classify(outer).retryable
    assert not classify(ValueError("bad")).retryable
    assert classify(OSError("disk")).kind == "I/O error"
    assert not classify(PermissionError(13, "Permission denied")).retryable
    assert classify(RuntimeError("?"), otherwise=False) == classify_text("?", otherwise=False)
    assert not classify(RuntimeError("?"), otherwise=False).retryable
    assert not classify(ConfigurationError("x")).retryable  # the package's own: its class
    assert classify(SinkError("x")).retryable
    # A botocore ClientError's code and status.
    error = RuntimeError("An error occurred (SlowDown) when calling the PutObject operation")
    error.response = {"Error": {"Code": "SlowDown"},  # type: ignore[attr-defined]
                      "ResponseMetadata": {"HTTPStatusCode": 503}}
    assert classify(error).kind == "throttled"
    denied = RuntimeError("An error occurred (AccessDenied)")
    denied.response = {"Error": {"Code": "AccessDenied"},  # type: ignore[attr-defined]
                       "ResponseMetadata": {"HTTPStatusCode": 403}}
    assert not classify(denied).retryable


def test_a_kafka_error_by_its_name_or_its_own_verdict() -> None:
    from confluent_kafka import KafkaException

    timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT))
    assert classify(timed_out).retryable
    unknown_topic = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert not classify(unknown_topic).retryable
    retriable = KafkaException(KafkaError(KafkaError.NOT_COORDINATOR, retriable=True))
    assert classify(retriable).retryable


# -- offsets/config.py: a TLS connection reset is not bad credentials ---------------------------

@pytest.mark.parametrize(("code", "text", "refused"), [
    (KafkaError._TRANSPORT, "ssl://b:9093/1: SSL transport error: Connection reset by peer "
                            "(after 8123ms in state UP)", False),
    (KafkaError._TRANSPORT, "ssl://b:9093/1: SSL transport error: error:0A000126:SSL routines::"
                            "unexpected eof while reading (after 10ms in state UP)", False),
    (KafkaError._SSL, "ssl://b:9093/bootstrap: SSL handshake failed: Connection reset by peer "
                      "(after 2ms in state SSL_HANDSHAKE)", False),
    (KafkaError._TRANSPORT, "ssl://b:9093/bootstrap: SSL transport error: error:0A000412:SSL "
                            "routines::sslv3 alert bad certificate: SSL alert number 42", True),
    (KafkaError._SSL, "ssl://b:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines"
                      "::certificate verify failed: broker certificate could not be verified",
     True),
    (KafkaError._SSL, "SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker "
                      "listener?", True),
    (KafkaError.SASL_AUTHENTICATION_FAILED, "Authentication failed: invalid credentials", True),
    (KafkaError._TRANSPORT, "b:9092/1: Connection refused", False),
])
def test_only_a_tls_refusal_is_an_authentication_failure(code: int, text: str,
                                                         refused: bool) -> None:
    assert is_authentication_failure(KafkaError(code, text)) is refused


# -- sinks/files/sink.py ------------------------------------------------------------------------

def _shaped() -> Any:
    shaped = MagicMock()
    shaped.schema.simpleString.return_value = "struct<v:string>"
    return shaped


def _file_sink(path: str) -> Any:
    from airflow_provider_kafka_spark.sinks import FileSink

    sink = FileSink(path, format="parquet")
    sink._writes_to = path
    if path.startswith("s3a:"):
        sink._objects = MagicMock()
    return sink


@pytest.mark.parametrize("path", ["s3a://lake/new/path", "file:/data/out"])
@pytest.mark.parametrize(("text", "expected"), [
    (SLOW_DOWN, SinkError), (RESET, SinkError), (TIMEOUT, SinkError),
    ("java.io.IOException: Mkdirs failed to create file:/data", SinkError),
    (BAD_COLUMNS, ConfigurationError), (BAD_CODEC, ConfigurationError),
    (NO_PARTITION_COLUMN, ConfigurationError), (DENIED, ConfigurationError),
    (NO_SOURCE, ConfigurationError),
])
def test_the_empty_write_of_prepare_by_its_cause(path: str, text: str,
                                                 expected: type[KafkaSparkError]) -> None:
    error = _file_sink(path)._empty_write_failed(_shaped(), RuntimeError(text))
    assert type(error) is expected, error
    assert error.retryable is (expected is SinkError)
    message = str(error)
    assert ("a retry may help" in message) if error.retryable else (
        "cannot help" in message or "is not a data source" in message), message


def test_the_empty_write_on_s3_losing_its_temporary_folder_is_a_concurrent_writer() -> None:
    error = _file_sink("s3a://lake/new/path")._empty_write_failed(
        _shaped(), RuntimeError(TEMPORARY_GONE))
    assert type(error) is PublishConflictError and error.retryable
    assert "Another run writes the same folder" in str(error)
    assert "a retry may help" in str(error)
    # Locally each attempt has a staging folder of its own: a missing file is an I/O error.
    local = _file_sink("file:/data/out")._empty_write_failed(_shaped(), RuntimeError(TEMPORARY_GONE))
    assert type(local) is SinkError


def test_a_spark_write_on_s3_losing_its_temporary_folder_is_a_concurrent_writer() -> None:
    sink = _file_sink("s3a://lake/new/path")
    sink._staged = True

    def failing(df: Any, mode: str | None = None) -> Any:
        writer = MagicMock()
        writer.save.side_effect = RuntimeError(TEMPORARY_GONE)
        return writer

    sink._writer = failing
    with pytest.raises(PublishConflictError, match="Another run writes the same folder"):
        sink.write(MagicMock())
    sink._writer = lambda df, mode=None: MagicMock(save=MagicMock(side_effect=RuntimeError(
        SLOW_DOWN)))
    with pytest.raises(RuntimeError, match="SlowDown"):  # left as Spark raised it: retried
        sink.write(MagicMock())


def _jvm_spark(lookup: Exception | None = None, filesystem: Exception | None = None) -> Any:
    spark = MagicMock()
    if lookup is not None:
        spark._jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource \
            .side_effect = lookup
    if filesystem is not None:
        spark._jvm.org.apache.hadoop.fs.Path.return_value.getFileSystem.side_effect = filesystem
    return spark


@pytest.mark.parametrize(("lookup", "filesystem", "expected", "says"), [
    (RuntimeError(NO_SOURCE), None, ConfigurationError, "is not a data source"),
    (RuntimeError(RESET), None, SinkError, "a retry may help"),
    (None, RuntimeError("org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem "
                        "for scheme \"s4\""), ConfigurationError, "cannot help"),
    (None, RuntimeError("java.net.UnknownHostException: hdfs-nn"), SinkError, "a retry may help"),
    (None, RuntimeError(TIMEOUT), SinkError, "a retry may help"),
])
def test_the_format_lookup_and_the_file_system_by_their_cause(
        lookup: Exception | None, filesystem: Exception | None,
        expected: type[KafkaSparkError], says: str) -> None:
    from airflow_provider_kafka_spark.sinks import FileSink

    with pytest.raises(KafkaSparkError) as caught:
        FileSink("hdfs://nn/out")._hadoop_files(_jvm_spark(lookup, filesystem))
    assert type(caught.value) is expected
    assert says in str(caught.value)


# -- sinks/tables -------------------------------------------------------------------------------

def _iceberg_spark(failure: Exception) -> Any:
    spark = MagicMock()
    spark.version = "4.1.0"
    conf = {"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
            "spark.jars": "", "spark.jars.packages": ""}
    spark.conf.get.side_effect = lambda key, default=None: conf.get(key, default)
    spark.sql.side_effect = failure
    return spark


@pytest.mark.parametrize(("text", "expected"), [
    (CATALOG_DB_DOWN, TableError), (SQL_TRANSIENT, TableError), (TIMEOUT, TableError),
    ("java.io.IOException: Premature EOF", TableError),
    ("java.lang.IllegalArgumentException: Cannot initialize HadoopCatalog because "
     "warehousePath must not be null", ConfigurationError),
    ("org.postgresql.util.PSQLException: FATAL: password authentication failed", ConfigurationError),
    (DENIED, ConfigurationError),
    ("org.apache.iceberg.exceptions.NoSuchNamespaceException: x", ConfigurationError),
    ("java.lang.ClassNotFoundException: org.apache.iceberg.spark.SparkCatalog", TableRuntimeError),
])
def test_iceberg_show_namespaces_by_its_cause(text: str, expected: type[KafkaSparkError]) -> None:
    from airflow_provider_kafka_spark.sinks import IcebergSink

    with pytest.raises(KafkaSparkError) as caught:
        IcebergSink("lake.db.t").check_runtime(_iceberg_spark(RuntimeError(text)))
    assert type(caught.value) is expected, caught.value
    assert caught.value.retryable is (expected is TableError)


@pytest.mark.parametrize(("text", "expected", "says"), [
    (NO_DELTA, ConfigurationError, "there is no Delta table at the path"),
    ("[TABLE_OR_VIEW_NOT_FOUND] The table or view `default`.`t` cannot be found.",
     ConfigurationError, "there is no Delta table"),
    (TIMEOUT, TableError, "the store did not answer"),
    (METASTORE_DOWN, TableError, "a retry may succeed"),
    ("java.io.IOException: Stream closed", TableError, "a retry may succeed"),
    (SLOW_DOWN, TableError, "a retry may succeed"),
    (DENIED, ConfigurationError, "the store refused"),
])
def test_delta_no_table_only_when_the_cause_says_so(text: str, expected: type[KafkaSparkError],
                                                    says: str) -> None:
    from airflow_provider_kafka_spark.sinks import DeltaSink

    spark = MagicMock()
    spark.sql.side_effect = AnalysisException(text)
    with pytest.raises(KafkaSparkError) as caught:
        DeltaSink("s3a://lake/none").table_schema(spark)
    assert type(caught.value) is expected, caught.value
    assert says in str(caught.value)


def test_a_store_that_fails_with_an_io_error_is_a_retryable_table_error() -> None:
    from airflow_provider_kafka_spark.sinks.tables.sink import store_failure

    error = store_failure("IcebergSink", "read the table t", RuntimeError(SQL_TRANSIENT))
    assert type(error) is TableError and error.retryable
    assert store_failure("DeltaSink", "read t", RuntimeError(NO_DELTA)) is None


# -- spark/transformation.py, operators/partitions.py ---------------------------------------------

def _transformation(transform: Any = None, sql: str | None = None,
                    failure: Exception | None = None) -> Any:
    from airflow_provider_kafka_spark.spark.transformation import Transformation

    spark = MagicMock()
    spark._jsparkSession = None
    if failure is not None:
        spark.sql.side_effect = failure
    return Transformation(spark, "ingest", transform, sql)


@pytest.mark.parametrize(("failure", "expected"), [
    (RuntimeError(METASTORE_DOWN), TransientError),
    (ConnectionRefusedError(111, "Connection refused"), TransientError),
    (RuntimeError(SLOW_DOWN), TransientError),
    (KeyError("no_such_column"), ConfigurationError),
    (AnalysisException("[UNRESOLVED_COLUMN] `nothing` cannot be resolved"), ConfigurationError),
    (RuntimeError("my own check failed"), ConfigurationError),  # the user's code, deterministic
])
def test_a_transform_checked_on_no_rows_by_its_cause(failure: Exception,
                                                     expected: type[KafkaSparkError]) -> None:
    def transform(df: Any) -> Any:
        raise failure

    records = MagicMock()
    records.columns = ["key", "value"]
    with pytest.raises(KafkaSparkError) as caught:
        _transformation(transform)._transformed(records, checking=True)
    assert type(caught.value) is expected
    assert caught.value.retryable is (expected is TransientError)
    if expected is TransientError:
        assert "a retry may help" in str(caught.value)
    with pytest.raises(type(failure)):  # after the read: as the transform raised it
        _transformation(transform)._transformed(records, checking=False)


@pytest.mark.parametrize(("text", "expected"), [
    (METASTORE_DOWN, TransientError),
    ("[TABLE_OR_VIEW_NOT_FOUND] The table or view `other` cannot be found.", ConfigurationError),
])
def test_sql_analysed_over_the_view_by_its_cause(text: str, expected: type[KafkaSparkError]) -> None:
    from pyspark.errors import AnalysisException as SparkAnalysisException

    sink = _transformation(sql="SELECT * FROM other", failure=SparkAnalysisException(text))
    with pytest.raises(KafkaSparkError) as caught:
        sink.check_sql(["key", "value"])
    assert type(caught.value) is expected, caught.value


@pytest.mark.parametrize(("failure", "expected"), [
    (TimeoutError("the calendar service timed out"), TransientError),
    (ValueError("no such key"), ConfigurationError),
])
def test_a_partition_slice_by_its_cause(failure: Exception,
                                        expected: type[KafkaSparkError]) -> None:
    from airflow_provider_kafka_spark.operators.partitions import _sliced

    def partition_slice(key: str) -> Any:
        raise failure

    with pytest.raises(KafkaSparkError) as caught:
        _sliced("t", "eu|2024-01-01", partition_slice)
    assert type(caught.value) is expected


# -- resolution: a topic the cluster does not have ------------------------------------------

@pytest.mark.parametrize("subscription, counts", [
    (Subscription.topics(["orders", "ordres"]), {"orders": 3}),
    (Subscription.partitions([("orders", 0), ("ordres", 0)]), {"orders": 3}),
    (Subscription.partitions([("orders", 7)]), {"orders": 3}),
    (Subscription.pattern("ord.*"), {"payments": 3}),
], ids=["unknown topic", "unknown topic of a partition", "unknown partition",
        "pattern matching nothing"])
def test_an_unknown_topic_at_resolution_is_not_retried(subscription: Subscription,
                                                       counts: dict[str, int]) -> None:
    # A retry asks the same cluster the same question: the names must be fixed (or the topic
    # created), so Airflow ends the task at once. Sensors still wait for it: the class is an
    # OffsetResolutionError, which they catch as "not there yet".
    with pytest.raises(UnknownTopicError) as raised:
        subscription.select(counts)
    assert isinstance(raised.value, OffsetResolutionError)
    assert raised.value.retryable is False
