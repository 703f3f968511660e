"""OpenLineage dataset names and Airflow asset URIs of outputs and topics (naming spec)."""

from __future__ import annotations

import os

import pytest

from airflow_provider_kafka_spark.operators.lineage import (
    dataset_of_path,
    kafka_authority,
    output_asset_uri,
)


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
    assert output_asset_uri(output_path=path) == uri


def test_a_relative_folder_is_named_by_its_absolute_path() -> None:
    assert dataset_of_path("out/x") == ("file", os.path.join(os.getcwd(), "out", "x"))


@pytest.mark.parametrize(("servers", "authority"), [
    ("broker-1:9092,broker-2:9092", "broker-1:9092"),
    (" SASL_SSL://b.example.com:9094 , c:9094", "b.example.com:9094"),
])
def test_topics(servers: str, authority: str) -> None:
    config = {"bootstrap.servers": servers, "sasl.password": "never-shown"}
    assert kafka_authority(config) == authority
    assert output_asset_uri(output_topic="orders", kafka_config=config) == \
        f"kafka://{authority}/orders"
