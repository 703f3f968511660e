"""producer_config: the partitioner every guarantee produces with."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets.config import producer_config
from airflow_provider_kafka_spark.options import DeliveryGuarantee

CONFIG = {"bootstrap.servers": "127.0.0.1:9092"}
EOS: dict[str, Any] = {"transactional_id": "app-0123456789ab-0",
                       "transaction_timeout_ms": 60000}


@pytest.mark.parametrize("guarantee", ["none", "at_least_once", "exactly_once"])
def test_keys_are_partitioned_like_the_java_producer_unless_kafka_config_says_otherwise(
    guarantee: DeliveryGuarantee,
) -> None:
    eos = EOS if guarantee == "exactly_once" else {}
    own = {**CONFIG, "partitioner": "consistent_random"}

    assert producer_config(CONFIG, guarantee, **eos)["partitioner"] == "murmur2_random"
    assert producer_config(own, guarantee, **eos)["partitioner"] == "consistent_random"


@pytest.mark.parametrize("guarantee", ["none", "at_least_once"])
def test_records_time_out_after_two_minutes_unless_kafka_config_says_otherwise(
    guarantee: DeliveryGuarantee,
) -> None:
    assert producer_config(CONFIG, guarantee)["message.timeout.ms"] == 120000
    assert producer_config({**CONFIG, "message.timeout.ms": 5000},
                           guarantee)["message.timeout.ms"] == 5000
    assert producer_config({**CONFIG, "delivery.timeout.ms": 5000},
                           guarantee)["delivery.timeout.ms"] == 5000
    assert "message.timeout.ms" not in producer_config({**CONFIG, "delivery.timeout.ms": 5000},
                                                       guarantee)


def test_exactly_once_leaves_the_record_timeout_to_the_transaction_timeout() -> None:
    """librdkafka caps message.timeout.ms at transaction.timeout.ms by itself."""
    assert "message.timeout.ms" not in producer_config(CONFIG, "exactly_once", **EOS)
