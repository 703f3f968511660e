"""What a table sink says when the table's store (S3 through S3A) or its catalog's database is
at fault: a ConfigurationError when a retry cannot help, a retryable TableError when it may
(plain Python: the Java exceptions' texts as S3A, Delta and PostgreSQL's driver wrote them;
``tests/tables/test_tables_on_s3.py`` meets them on a real S3 server)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError, TableError
from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.sinks.tables.commits import ApplicationState, CommitRecord
from airflow_provider_kafka_spark.sinks.tables.sink import TableSink, store_failure

DENIED = ("java.nio.file.AccessDeniedException: s3a://lake/t/_delta_log: getFileStatus on "
          "s3a://lake/t/_delta_log: software.amazon.awssdk.services.s3.model.S3Exception: "
          "Forbidden (Service: S3, Status Code: 403, Request ID: X):null")
NO_BUCKET = ("org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://gone/t/_delta_log': "
             "getFileStatus on s3a://gone/t/_delta_log: software.amazon.awssdk.services.s3."
             "model.NoSuchBucketException: The specified bucket does not exist. (Service: S3, "
             "Status Code: 404):NoSuchBucket")
DOWN = ("java.net.ConnectException: getFileStatus on s3a://lake/t/_delta_log: software.amazon."
        "awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connect to "
        "127.0.0.1:9 [/127.0.0.1] failed: Connection refused")
CATALOG_DOWN = ("An error occurred while calling o52.sql.\n: org.apache.iceberg.jdbc."
                "UncheckedSQLException: Failed to connect: jdbc:postgresql://db:5432/iceberg\n"
                "Caused by: org.postgresql.util.PSQLException: Connection to db:5432 refused.\n"
                "Caused by: java.net.ConnectException: Connection refused")
NO_TABLE = "[DELTA_MISSING_DELTA_TABLE] `s3a://lake/none` is not a Delta table."


@pytest.mark.parametrize(("text", "meaning"), [
    (DENIED, "access is denied"),
    (NO_BUCKET, "the bucket does not exist"),
    ("...SignatureDoesNotMatch: The request signature we calculated does not match...",
     "the secret key is wrong"),
])
def test_a_store_that_refuses_is_a_configuration_error(text: str, meaning: str) -> None:
    error = store_failure("DeltaSink", "read the table s3a://lake/t", RuntimeError(text))
    assert isinstance(error, ConfigurationError) and not error.retryable
    assert f"DeltaSink: the store refused to read the table s3a://lake/t: {meaning}" in str(error)
    assert "fs.s3a.* settings" in str(error) and "Nothing was read or written." in str(error)


@pytest.mark.parametrize("text", [DOWN, CATALOG_DOWN, "... Status Code: 503 ... SlowDown"])
def test_a_store_or_catalog_that_does_not_answer_is_a_retryable_table_error(text: str) -> None:
    error = store_failure("IcebergSink", "list the catalog 'lake'", RuntimeError(text))
    assert isinstance(error, TableError) and error.retryable
    assert "could not list the catalog 'lake': the store did not answer" in str(error)
    assert "a retry may succeed" in str(error)


def test_other_failures_are_left_to_the_sink() -> None:
    assert store_failure("DeltaSink", "read the table t", RuntimeError(NO_TABLE)) is None


class FailingCommit(TableSink):
    """A table sink whose table is empty and whose commit fails with ``error``."""

    format_name = "fake"

    def __init__(self, error: str, **kwargs: Any) -> None:
        super().__init__("lake.db.t", application="app", run="r", **kwargs)
        self.error, self.attempts = error, 0
        self._spark, self._df = object(), object()  # as after prepare() and write()

    def application_state(self, spark: Any) -> ApplicationState:
        return ApplicationState({}, None, 0, None)

    def writes_of_run(self, spark: Any, head: str | None = None) -> set[str]:
        return set()

    def commit_rows(self, spark: Any, df: Any, replacing: list[str],
                    record: CommitRecord) -> dict[str, Any]:
        self.attempts += 1
        raise RuntimeError(self.error)

    def is_conflict(self, exc: BaseException) -> bool:
        return False

    def check_runtime(self, spark: Any) -> None: ...
    def table_schema(self, spark: Any) -> Any: ...
    def ensure_write_column(self, spark: Any, schema: Any) -> None: ...
    def table_location(self, spark: Any) -> str | None: ...
    def read_table(self, spark: Any, head: str | None = None) -> Any: ...

    def commits(self, spark: Any) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
        return iter(())


MANIFEST = {"ranges": OffsetRanges((PartitionRange("orders", 0, 0, 5),)).to_json()}


def test_a_commit_the_store_refuses_ends_the_task_saying_so() -> None:
    sink = FailingCommit("Job aborted due to stage failure: ... " + DENIED)
    with pytest.raises(ConfigurationError, match="the store refused to commit run 'r' to "
                                                 "lake.db.t: access is denied") as failed:
        sink.commit(MANIFEST)
    assert "The table is as it was." in str(failed.value)
    assert sink.attempts == 1


def test_a_commit_whose_store_did_not_answer_is_retried_by_the_task() -> None:
    sink = FailingCommit(DOWN)
    with pytest.raises(TableError, match="the commit of run 'r' to lake.db.t failed") as failed:
        sink.commit(MANIFEST)
    assert failed.value.retryable and sink.attempts == 1
