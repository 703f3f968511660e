"""A mistyped SASL mechanism is refused when the client is built, as a ConfigurationError naming
``sasl.mechanism`` and the mechanisms to choose from, for every kind of client; the password is
never shown."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.offsets import ConfigurationError
from airflow_provider_kafka_spark.offsets.config import KafkaConfig, consumer_config, new_client

PASSWORD = "MARKER-typo-password-5c1"


def consumer(config: dict[str, Any]) -> object:
    return Consumer(consumer_config(config, isolation_level="read_committed"))


@pytest.mark.parametrize("factory", [AdminClient, Producer, consumer],
                         ids=["admin", "producer", "consumer"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-999", "PLAINN"])
def test_unknown_mechanism_is_named_with_the_choices(factory: Any, mechanism: str) -> None:
    config = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL",
              "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": PASSWORD}
    build = factory if factory is consumer else (lambda c: factory(KafkaConfig.of(c).client()))
    with pytest.raises(ConfigurationError) as exc:
        new_client(build, config)
    message = str(exc.value)
    assert "kafka_config['sasl.mechanism']" in message, message
    assert mechanism in message, message
    assert "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER" in message, message
    assert PASSWORD not in message
