"""OpenLineage dataset names and Airflow asset URIs of outputs and topics (naming spec), as
each sink names its output."""

from __future__ import annotations

import os

import pytest

from airflow_provider_kafka_spark.naming import asset_uri, dataset_of_path, kafka_authority
from airflow_provider_kafka_spark.sinks import DeltaSink, FileSink, IcebergSink, KafkaSink


@pytest.mark.parametrize(("path", "dataset", "uri"), [
    ("/data/x/2024-05-01T00", ("file", "/data/x/2024-05-01T00"), "file:///data/x/2024-05-01T00"),
    ("file:/data/x", ("file", "/data/x"), "file:///data/x"),
    ("file:///data/./x/", ("file", "/data/x"), "file:///data/x"),
    ("s3a://lake/orders/h=1", ("s3://lake", "orders/h=1"), "s3://lake/orders/h=1"),
    ("s3://lake/orders", ("s3://lake", "orders"), "s3://lake/orders"),
    ("gs://bucket/a/b", ("gs://bucket", "a/b"), "gs://bucket/a/b"),
    ("hdfs://nn:8020/warehouse/x", ("hdfs://nn:8020", "/warehouse/x"),
     "hdfs://nn:8020/warehouse/x"),
    ("abfss://c@acct.dfs.core.windows.net/x", ("abfss://c@acct.dfs.core.windows.net", "/x"),
     "abfss://c@acct.dfs.core.windows.net/x"),
])
def test_folders(path: str, dataset: tuple[str, str], uri: str) -> None:
    assert dataset_of_path(path) == dataset
    assert FileSink(path).dataset() == dataset
    assert asset_uri(dataset) == uri


def test_a_relative_folder_is_named_by_its_absolute_path() -> None:
    assert dataset_of_path("out/x") == ("file", os.path.join(os.getcwd(), "out", "x"))


@pytest.mark.parametrize(("servers", "authority"), [
    ("broker-1:9092,broker-2:9092", "broker-1:9092"),
    (" SASL_SSL://b.example.com:9094 , c:9094", "b.example.com:9094"),
])
def test_topics(servers: str, authority: str) -> None:
    config = {"bootstrap.servers": servers, "sasl.password": "never-shown"}
    assert kafka_authority(config) == authority
    dataset = KafkaSink("orders", kafka_config=config).dataset()
    assert dataset == (f"kafka://{authority}", "orders")
    assert asset_uri(dataset) == f"kafka://{authority}/orders"
    assert KafkaSink("orders").dataset() is None  # the operator gives it the input's cluster


def test_tables_are_named_by_their_location_else_their_path_else_their_name() -> None:
    assert asset_uri(IcebergSink("lake.db.t").dataset("file:/wh/db/t")) == "file:///wh/db/t"
    assert asset_uri(IcebergSink("lake.db.t").dataset()) == "iceberg://lake.db.t"
    assert asset_uri(DeltaSink("/data/delta/t").dataset()) == "file:///data/delta/t"
    assert asset_uri(DeltaSink("db.t").dataset()) == "delta://db.t"
