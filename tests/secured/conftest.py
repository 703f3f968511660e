"""One real broker with a SASL_PLAINTEXT, an SSL (mTLS) and a SASL_SSL listener for the session
(``scripts/kafka-broker start --security ...``), and topics created through its secured admin."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from tools.local_broker import SecuredBroker, secured_broker


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    with secured_broker(tmp_path_factory.mktemp("secured-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def secured_topic(secured: SecuredBroker) -> Callable[..., str]:
    """``secured_topic(partitions=2)``: a new topic, created through the SASL listener."""
    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    admin = AdminClient(secured.client_config("sasl_plaintext"))

    def create(partitions: int = 2) -> str:
        name = f"s-{uuid.uuid4().hex[:10]}"
        return create_topic(admin, name, partitions, replication_factor=1)

    return create
