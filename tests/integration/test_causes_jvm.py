"""``causes.classify`` on real Java exceptions, raised by the driver's JVM through py4j (the
``Py4JJavaError`` a wrap site catches): a refused connection and a missing file are transient, a
missing class is not; the file sink's format lookup and empty write by their real causes.
``tests/unit/test_retry_causes.py`` covers the rules on the texts alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from airflow_provider_kafka_spark.causes import classify
from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.sinks import FileSink

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def raised(call: Any) -> Py4JJavaError:
    with pytest.raises(Py4JJavaError) as caught:
        call()
    return caught.value


def test_real_java_exceptions_through_py4j(spark: Any, tmp_path: Path) -> None:
    jvm = spark._jvm
    refused = classify(raised(lambda: jvm.java.net.Socket("127.0.0.1", 1)))
    assert (refused.retryable, refused.kind) == (True, "connection")
    gone = classify(raised(lambda: jvm.java.io.FileInputStream(
        str(tmp_path / "out" / "_temporary" / "0"))))
    assert (gone.retryable, gone.kind) == (True, "concurrent writer")
    missing = classify(raised(lambda: jvm.java.lang.Class.forName("org.example.NoSuchFormat")))
    assert (missing.retryable, missing.kind) == (False, "missing class")
    wrapped = jvm.java.lang.RuntimeException(
        "Job aborted", jvm.java.net.SocketTimeoutException("Read timed out"))
    thrower = jvm.java.util.concurrent.CompletableFuture()
    thrower.completeExceptionally(wrapped)
    timeout = classify(raised(lambda: thrower.get()))
    assert (timeout.retryable, timeout.kind) == (True, "timeout")


def test_the_empty_write_by_its_real_cause(spark: Any, tmp_path: Path) -> None:
    shaped = spark.createDataFrame([], "v string, b array<string>")
    with pytest.raises(ConfigurationError, match="cannot help"):  # CSV has no arrays: certain
        FileSink(str(tmp_path / "csv"), format="csv").prepare(spark, shaped)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the output's parent folder should be")
    with pytest.raises(ConfigurationError, match="a file where a folder should be"):
        FileSink(str(blocked / "out")).prepare(spark, shaped.select("v"))

