"""A ``spark_connect`` Airflow connection -> the Spark Connect URL (no server needed): the
fields of the Apache Spark provider's ``spark_connect`` connection (host, port, login = user
id, password = token, extra ``use_ssl``), parsed back with pyspark's own ``ChannelBuilder``
so the test checks what the Connect client will actually use."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from pyspark.sql.connect.client import DefaultChannelBuilder

from airflow_provider_kafka_spark.hooks import SparkHook
from airflow_provider_kafka_spark.offsets import ConfigurationError


def url_of(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_CONNECT_TEST", json.dumps({"conn_type": "spark_connect",
                                                                **fields}))
    settings = SparkHook("connect_test").session_settings()
    assert settings["master"] is None
    return str(settings["remote"])


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"host": "spark.example.com", "port": 15002}, "sc://spark.example.com:15002/"),
        ({"host": "sc://spark.example.com", "port": 443}, "sc://spark.example.com:443/"),
        # No port: the client's default (15002), as with the Apache Spark provider.
        ({"host": "spark.example.com"}, "sc://spark.example.com/"),
        ({"host": "10.0.0.7", "port": 15002, "login": "ana"}, "sc://10.0.0.7:15002/;user_id=ana"),
        ({"host": "h", "port": 1, "extra": {"use_ssl": True}}, "sc://h:1/;use_ssl=true"),
        ({"host": "h", "port": 1, "extra": {"use_ssl": "True"}}, "sc://h:1/;use_ssl=true"),
        ({"host": "h", "port": 1, "extra": {"use_ssl": False}}, "sc://h:1/;use_ssl=false"),
        ({"host": "h", "port": 1, "login": "ana", "password": "s3cret",
          "extra": {"use_ssl": True}}, "sc://h:1/;user_id=ana;token=s3cret;use_ssl=true"),
    ],
)
def test_connection_fields_become_the_connect_url(
        monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], url: str) -> None:
    assert url_of(monkeypatch, **fields) == url


def test_the_client_reads_back_exactly_the_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    # Base64 tokens hold '/', '+' and '='; a '/' left unquoted makes the client see a path
    # ("The path component ... must be empty"), a ';' or '=' another parameter.
    token = "ab/c+d==;x=y"
    user = "ana maria;admin"
    url = url_of(monkeypatch, host="spark.example.com", port=15443, login=user,
                 password=token, extra={"use_ssl": True})
    builder = DefaultChannelBuilder(url)
    assert (builder.host, builder.endpoint) == ("spark.example.com", "spark.example.com:15443")
    assert (builder.userId, builder.token, builder.use_ssl) == (user, token, True)
    assert builder.secure


def test_a_token_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact

    url_of(monkeypatch, host="h", port=1, password="t0ken-xyz", extra={"use_ssl": True})
    assert "t0ken-xyz" not in str(redact("sc://h:1/;token=t0ken-xyz"))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"host": "h/path", "port": 1}, "has a path"),
        ({"host": "", "port": 1}, "has no host"),
        ({"host": "h", "port": 1, "extra": {"use_ssl": "maybe"}}, "use_ssl"),
        # The client sends a token only over TLS (or gRPC local credentials to 'localhost'):
        # use_ssl=false with a token cannot be honoured.
        ({"host": "spark.example.com", "port": 1, "password": "tok",
          "extra": {"use_ssl": False}}, "always uses TLS"),
        ({"host": "spark.example.com", "port": 1, "extra": {"use_ssl": True, "x": 1}},
         "extra keys"),
    ],
)
def test_bad_connect_connections(monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any],
                                 message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        url_of(monkeypatch, **fields)
    assert "'connect_test'" in str(caught.value)
    assert "tok" not in str(caught.value).replace("token", "")
