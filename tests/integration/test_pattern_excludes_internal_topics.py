"""A topic_pattern never picks up the package's own topics (the exactly-once ledger)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from airflow_provider_kafka_spark.offsets import (
    OffsetResolutionError,
    Subscription,
    resolve_offsets,
)

pytestmark = pytest.mark.integration

LEDGER = "_kafka_spark_ledger"


@pytest.fixture
def ledger_topic(kafka_admin: Any) -> str:
    """The default ledger topic, as write_kafka creates it (kept: other tests may use it)."""
    future = kafka_admin.create_topics([NewTopic(LEDGER, num_partitions=1,
                                                 config={"cleanup.policy": "compact"})])[LEDGER]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return LEDGER


def test_a_pattern_skips_the_ledger_topic(kafka_config: dict[str, Any], kafka_admin: Any,
                                          new_topic: Any, ledger_topic: str) -> None:
    mine = new_topic(partitions=1, prefix=f"ledger-{uuid.uuid4().hex[:6]}")
    wait_for_leaders(kafka_admin, [mine, ledger_topic])

    ranges = resolve_offsets(kafka_config, Subscription.pattern(".*ledger.*"), "earliest",
                             "latest")
    topics = {r.topic for r in ranges}
    assert mine in topics
    assert ledger_topic not in topics

    with pytest.raises(OffsetResolutionError, match=r"matches no topic.*'_kafka_spark_' \(this "
                       r"package's ledger and run pins\)"):
        resolve_offsets(kafka_config, Subscription.pattern("_kafka.*"), "earliest", "latest")


def wait_for_leaders(kafka_admin: Any, topics: list[str], timeout: float = 30.0) -> None:
    """Until the metadata lists ``topics`` without error (a new topic briefly has no leader,
    and patterns only see topics without error)."""
    deadline = time.monotonic() + timeout
    while True:
        listed = kafka_admin.list_topics(timeout=timeout).topics
        if all(t in listed and listed[t].error is None for t in topics):
            return
        assert time.monotonic() < deadline, f"topics {topics} have no leader after {timeout}s"
        time.sleep(0.1)
