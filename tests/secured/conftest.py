"""One real broker with a SASL_PLAINTEXT, an SSL (mTLS) and a SASL_SSL listener for the session
(``scripts/kafka-broker start --security ...``), and topics created through its secured admin."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dags.conftest import airflow_db, kafka_connection, run_dag  # noqa: F401  (dag runs)
from tools.local_broker import SecuredBroker, secured_broker


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    with secured_broker(tmp_path_factory.mktemp("secured-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def secured_topic(secured: SecuredBroker) -> Callable[..., str]:
    """``secured_topic(partitions=2)``: a new topic, created through the SASL listener."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(secured.client_config("sasl_plaintext"))

    def create(partitions: int = 2) -> str:
        name = f"s-{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(name, num_partitions=partitions,
                                      replication_factor=1)])[name].result(timeout=30)
        return name

    return create


def records_of(config: dict[str, Any], topic: str, partitions: int) -> list[tuple]:
    """(partition, offset, key, value) of every committed record, read with a plain consumer."""
    from tests.kafka_data import consume_all

    return [(p, o, k, v) for p, o, k, v, _ in consume_all(config, topic, partitions,
                                                             "read_committed")]


ROOT = Path(__file__).resolve().parents[2]


def first_event(trigger: Any, timeout: float = 30.0) -> Any:
    """The first event of ``trigger.run()`` (as the triggerer runs it), in a fresh event loop."""
    import asyncio

    async def first() -> Any:
        async for event in trigger.run():
            return event
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))
