"""Which output paths the file sink takes on a Spark Connect session (no Spark needed): local
paths of the cluster's machines only; everything else is a ConfigurationError, raised in
``FileSink.prepare`` before anything is read or written."""

from __future__ import annotations

import pytest

from airflow_provider_kafka_spark.offsets import ConfigurationError
from airflow_provider_kafka_spark.sinks.files import connect_local_path, is_connect_session


@pytest.mark.parametrize(("path", "local"), [
    ("/data/events/2024-05-01T00", "/data/events/2024-05-01T00"),
    ("/data/events/2024-05-01T00:00/", "/data/events/2024-05-01T00:00"),
    ("file:/data/x", "/data/x"),
    ("file:///data/x", "/data/x"),
    ("FILE://localhost/data/a b", "/data/a b"),
    ("//data//./x/../y", "/data/y"),
])
def test_local_paths(path: str, local: str) -> None:
    assert connect_local_path(path) == local


@pytest.mark.parametrize(("path", "message"), [
    ("hdfs://nn:8020/events", "cannot write 'hdfs://nn:8020/events' over Spark Connect"),
    ("hdfs://nn:8020/x", "For hdfs: paths use a classic session"),
    ("abfss://c@a.dfs.core.windows.net/x", "For abfss: paths"),
    ("gs://bucket/x", "For gs: paths"),
    ("file://otherhost/data/x", "only local paths of the cluster's machines"),
    ("relative/out", "'relative/out' is relative"),
    ("file:relative", "is relative"),
])
def test_paths_refused(path: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        connect_local_path(path)


def test_a_classic_session_type_is_not_connect() -> None:
    from pyspark.sql import SparkSession as Classic
    from pyspark.sql.connect.session import SparkSession as Connect

    assert is_connect_session(object.__new__(Connect))
    assert not is_connect_session(object.__new__(Classic))
