"""The Kafka and Spark hooks, reading connections from ``AIRFLOW_CONN_*`` environment
variables (no metadata DB needed)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)
from tools.processes import free_port

# isort: split

from airflow.sdk._shared.secrets_masker.secrets_masker import redact

from airflow_provider_kafka_spark.hooks import KafkaHook, SparkHook
from airflow_provider_kafka_spark.offsets import ConfigurationError, KafkaSparkError

pytestmark = pytest.mark.integration

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter22";'


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_kafka_hook_reads_the_librdkafka_config_and_masks_secrets(
        monkeypatch: pytest.MonkeyPatch, kafka_config: dict[str, Any]) -> None:
    extra = {**kafka_config, "sasl.password": "hunter23", "sasl.oauthbearer.client.secret":
             "hunter25"}
    set_connection(monkeypatch, "kafka_test", conn_type="kafka", extra=extra)
    hook = KafkaHook("kafka_test")
    assert hook.get_kafka_config() == extra
    assert "hunter23" not in str(redact("password is hunter23"))
    assert "hunter25" not in str(redact("secret is hunter25"))
    # A Java-only key is refused, but its secret is masked first.
    set_connection(monkeypatch, "kafka_test", conn_type="kafka",
                   extra={**kafka_config, "sasl.jaas.config": JAAS})
    with pytest.raises(ConfigurationError, match="'sasl.jaas.config' is a Java client setting"):
        hook.get_kafka_config()
    assert JAAS not in str(redact(f"config: {JAAS}"))


def test_kafka_connection_test(monkeypatch: pytest.MonkeyPatch,
                               kafka_config: dict[str, Any]) -> None:
    set_connection(monkeypatch, "kafka_test", conn_type="kafka", extra=kafka_config)
    ok, message = KafkaHook("kafka_test").test_connection()
    assert ok and message.startswith("Connected to Kafka cluster"), message

    set_connection(monkeypatch, "kafka_test", conn_type="kafka",
                   extra={"security.protocol": "PLAINTEXT"})
    ok, message = KafkaHook("kafka_test").test_connection()
    assert not ok
    assert "'kafka_test'" in message and "bootstrap.servers" in message
    with pytest.raises(ConfigurationError, match="extra must be a JSON object of librdkafka"):
        KafkaHook("kafka_test").get_kafka_config()


def test_kafka_hook_async_config(monkeypatch: pytest.MonkeyPatch,
                                 kafka_config: dict[str, Any]) -> None:
    set_connection(monkeypatch, "kafka_test", conn_type="kafka", extra=kafka_config)
    assert asyncio.run(KafkaHook("kafka_test").aget_kafka_config()) == kafka_config


def test_spark_hook_settings_per_connection_type(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SparkHook(None).session_settings() == {"master": "local[*]", "remote": None,
                                                  "conf": {}}
    set_connection(monkeypatch, "spark_test", conn_type="spark", host="spark://master",
                   port=7077, extra={"spark.executor.memory": "2g", "deploy-mode": "cluster"})
    assert SparkHook("spark_test", spark_conf={"spark.sql.shuffle.partitions": 8}) \
        .session_settings() == {"master": "spark://master:7077", "remote": None,
                                "conf": {"spark.executor.memory": "2g",
                                         "spark.sql.shuffle.partitions": "8"}}
    set_connection(monkeypatch, "spark_test", conn_type="spark_connect", host="connect.local",
                   port=15003, login="ana", password="t0ken-secret", extra={"use_ssl": True})
    assert SparkHook("spark_test").session_settings()["remote"] == \
        "sc://connect.local:15003/;user_id=ana;token=t0ken-secret;use_ssl=true"
    assert "t0ken-secret" not in str(redact("token=t0ken-secret"))
    set_connection(monkeypatch, "spark_test", conn_type="http", host="x")
    with pytest.raises(KafkaSparkError, match="has type 'http'"):
        SparkHook("spark_test").session_settings()


@pytest.mark.spark
def test_spark_hook_gives_the_running_session(spark: Any) -> None:
    assert SparkHook(None).get_conn() is spark


# --- Hostile connections: a ConfigurationError naming the connection; test_connection never
# raises; secrets never in a message ---

EXTRA_HELP = "must be a JSON object of librdkafka settings"
SECRET = "hunter24"


def unreachable_bootstrap() -> str:
    return f"127.0.0.1:{free_port()}"


HOSTILE_EXTRAS: list[tuple[Any, str]] = [
    ("not json {", EXTRA_HELP),
    ('{"bootstrap.servers": "a:1", "sasl.password": "hunter24"', EXTRA_HELP),
    ("[1, 2]", EXTRA_HELP),
    ('"bootstrap.servers=a:1"', EXTRA_HELP),
    ("null", EXTRA_HELP),
    ("5", EXTRA_HELP),
    ({"security.protocol": "PLAINTEXT", "sasl.password": SECRET}, "no 'bootstrap.servers'"),
    ({"bootstrap.servers": "a:1", "sasl.jaas.config": JAAS + SECRET},
     "set sasl.username and sasl.password"),
    ({"bootstrap.servers": "a:1", "sasl.password": None}, "is None"),
    ({"bootstrap.servers": ["a:1", "b:2"]}, "comma-separated"),
]


@pytest.mark.parametrize(("extra", "fragment"), HOSTILE_EXTRAS,
                         ids=[f"extra{i}" for i in range(len(HOSTILE_EXTRAS))])
def test_a_bad_extra_is_a_configuration_error_naming_the_connection(
        monkeypatch: pytest.MonkeyPatch, extra: Any, fragment: str) -> None:
    set_connection(monkeypatch, "kafka_bad", conn_type="kafka", extra=extra)
    hook = KafkaHook("kafka_bad")
    for call in (hook.get_kafka_config, hook.get_conn,
                 lambda: asyncio.run(hook.aget_kafka_config())):
        with pytest.raises(KafkaSparkError) as caught:
            call()
        assert type(caught.value) is ConfigurationError, repr(caught.value)
        message = str(caught.value)
        assert message.startswith("Airflow connection 'kafka_bad': "), message
        assert fragment in message and SECRET not in message and "password=" not in message

    ok, message = hook.test_connection()
    assert not ok
    assert "'kafka_bad'" in message and fragment in message and SECRET not in message, message


def test_a_missing_connection_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_NOWHERE", raising=False)
    with pytest.raises(KafkaSparkError) as caught:
        KafkaHook("kafka_nowhere").get_kafka_config()
    assert type(caught.value) is ConfigurationError
    assert "Airflow connection 'kafka_nowhere' is not defined" in str(caught.value)
    ok, message = KafkaHook("kafka_nowhere").test_connection()
    assert not ok and "is not defined" in message


def test_a_config_librdkafka_refuses_fails_the_connection_test(
        monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "kafka_bad", conn_type="kafka",
                   extra={"bootstrap.servers": "a:1", "foo.bar": 1, "sasl.password": SECRET})
    with pytest.raises(ConfigurationError, match=r"^Airflow connection 'kafka_bad': .*'foo\.bar'"):
        KafkaHook("kafka_bad").get_conn()
    ok, message = KafkaHook("kafka_bad").test_connection()
    assert not ok and "'foo.bar'" in message and SECRET not in message


@pytest.mark.timeout(60)
def test_an_unreachable_cluster_fails_the_connection_test(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = unreachable_bootstrap()
    set_connection(monkeypatch, "kafka_bad", conn_type="kafka",
                   extra={"bootstrap.servers": bootstrap, "sasl.password": SECRET})
    started = time.monotonic()
    ok, message = KafkaHook("kafka_bad").test_connection()
    assert not ok
    assert f"'{bootstrap}'" in message and "reachable from here" in message, message
    assert SECRET not in message
    assert time.monotonic() - started < 20


def test_a_deeply_nested_extra_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Airflow's environment-variable backend cannot even hold this one: hand it over directly.
    from airflow.sdk import Connection

    deep = Connection(conn_id="kafka_bad", conn_type="kafka", extra="[" * 100_000)
    monkeypatch.setattr(KafkaHook, "get_connection", classmethod(lambda cls, conn_id: deep))
    with pytest.raises(ConfigurationError, match="^Airflow connection 'kafka_bad': its extra is "
                                                 "not JSON this package can read"):
        KafkaHook("kafka_bad").get_kafka_config()
    ok, message = KafkaHook("kafka_bad").test_connection()
    assert not ok and EXTRA_HELP in message
