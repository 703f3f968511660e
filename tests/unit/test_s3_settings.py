"""S3 settings as users keep them: Spark's fs.s3a.* (per bucket over global, as S3A reads
them) and an Airflow ``aws`` connection (as the Amazon provider reads it); the secret never
shown; what the store's error codes mean."""

from __future__ import annotations

import json

import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError
from airflow_provider_kafka_spark.hooks import AwsConnection
from airflow_provider_kafka_spark.s3 import S3Settings, split_s3, store_error


def test_spark_settings_per_bucket_win_over_the_global_ones() -> None:
    conf = {"fs.s3a.endpoint": "http://global:9000", "fs.s3a.access.key": "AK",
            "fs.s3a.secret.key": "SK", "fs.s3a.path.style.access": "true",
            "fs.s3a.bucket.lake.endpoint": "http://lake:9000",
            "fs.s3a.bucket.lake.endpoint.region": "eu-west-1"}
    lake = S3Settings.from_hadoop(conf.get, "lake")
    assert (lake.endpoint_url, lake.region, lake.access_key, lake.secret_key, lake.path_style) \
        == ("http://lake:9000", "eu-west-1", "AK", "SK", True)
    other = S3Settings.from_hadoop(conf.get, "other")
    assert (other.endpoint_url, other.region) == ("http://global:9000", None)
    assert lake.hadoop_options("lake")["fs.s3a.bucket.lake.secret.key"] == "SK"



def test_the_settings_as_object_store_options_for_delta_rs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    local = S3Settings(endpoint_url="127.0.0.1:9000", access_key="AK", secret_key="SK",
                       path_style=True, ssl=False)
    assert local.object_store_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}
    aws = S3Settings(region="eu-west-1", access_key="AK", secret_key="SK", session_token="T")
    assert aws.object_store_options() == {
        "AWS_REGION": "eu-west-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true",
        "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_SESSION_TOKEN": "T"}
    assert S3Settings(endpoint_url="https://s3.example:443").object_store_options() == {
        "AWS_ENDPOINT_URL": "https://s3.example:443", "AWS_ALLOW_HTTP": "false",
        "AWS_REGION": "us-east-1"}

def test_the_secret_is_never_shown() -> None:
    settings = S3Settings(endpoint_url="http://x:1", access_key="AKIAEXAMPLE",
                          secret_key="very-secret", session_token="tok-secret")
    assert "very-secret" not in repr(settings) and "tok-secret" not in repr(settings)
    assert "AKIAEXAMPLE" not in repr(settings)
    with pytest.raises(ConfigurationError, match="both access_key and secret_key"):
        S3Settings(access_key="AK")


def test_an_aws_connection_is_read_as_the_amazon_provider_reads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_S3_TEST", json.dumps({
        "conn_type": "aws", "login": "AK", "password": "SK",
        "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1",
                  "config_kwargs": {"s3": {"addressing_style": "path"}}}}))
    settings = AwsConnection("s3_test")()
    assert settings == S3Settings(endpoint_url="http://127.0.0.1:9000", region="eu-west-1",
                                  access_key="AK", secret_key="SK", path_style=True)
    assert repr(AwsConnection("s3_test")) == "AwsConnection('s3_test')"
    with pytest.raises(ConfigurationError, match="'nope' does not exist"):
        AwsConnection("nope")()


def test_what_the_stores_answers_mean() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    def answer(code: str) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": "m"}}, "ListObjectsV2")

    assert isinstance(store_error(answer("SignatureDoesNotMatch"), "list", "s3://b/x"),
                      ConfigurationError)
    assert "bucket does not exist" in str(store_error(answer("NoSuchBucket"), "list", "s3://b"))
    assert type(store_error(answer("InternalError"), "list", "s3://b")) is SinkError
    unreachable = store_error(EndpointConnectionError(endpoint_url="http://h:1"), "list", "s3://b")
    assert type(unreachable) is SinkError and "did not answer" in str(unreachable)
    assert split_s3("s3a://lake/a/b/") == ("lake", "a/b")
    with pytest.raises(ConfigurationError):
        split_s3("/local/path")
