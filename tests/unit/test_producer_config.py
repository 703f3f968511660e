"""producer_config: the partitioner every guarantee produces with."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_kafka_spark.spark.transactions import DeliveryGuarantee, producer_config

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
