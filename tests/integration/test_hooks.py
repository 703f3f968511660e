"""The Kafka and Spark hooks, reading connections from ``AIRFLOW_CONN_*`` environment
variables (no metadata DB needed)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.dags import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow.sdk._shared.secrets_masker.secrets_masker import redact

from airflow_provider_kafka_spark.hooks import KafkaHook, SparkHook
from airflow_provider_kafka_spark.offsets import KafkaSparkError, OffsetSpecError

pytestmark = pytest.mark.integration

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter22";'


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_kafka_hook_reads_the_librdkafka_config_and_masks_secrets(
        monkeypatch: pytest.MonkeyPatch, kafka_config: dict[str, Any]) -> None:
    extra = {**kafka_config, "sasl.jaas.config": JAAS, "sasl.password": "hunter23"}
    set_connection(monkeypatch, "kafka_test", conn_type="kafka", extra=extra)
    hook = KafkaHook("kafka_test")
    assert hook.get_kafka_config() == extra
    assert JAAS not in str(redact(f"config: {JAAS}"))
    assert "hunter23" not in str(redact("password is hunter23"))


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
    with pytest.raises(OffsetSpecError, match="extra JSON must be the librdkafka config"):
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
