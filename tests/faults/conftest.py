"""A real 3-broker cluster (``scripts/kafka-broker start --brokers 3``) for the fault tests
(what they need to find and kill the broker that matters is in ``tests/support/faults.py``).
Every test starts with all brokers up and every replica in sync, and brokers a test killed are
started again after it. The cluster is stopped after this folder's tests (package scope: the
rest of the session does not carry its four idle JVMs)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.support.faults import settle
from tests.support.topics import create_topic
from tools.local_broker import LocalCluster, local_cluster


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("kafka-cluster"), brokers=3) as started:
        # The brokers create __transaction_state on the first transactional producer: create
        # it now, so that the tests can tell which broker coordinates which transaction.
        producer = Producer({"bootstrap.servers": started.bootstrap,
                             "transactional.id": "faults-setup"})
        producer.init_transactions(60)
        yield started


@pytest.fixture(scope="package")
def cluster_config(cluster: LocalCluster) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap}


@pytest.fixture(scope="package")
def cluster_admin(cluster_config: dict[str, Any]) -> AdminClient:
    return AdminClient(cluster_config)


@pytest.fixture(autouse=True)
def healthy(cluster: LocalCluster) -> Iterator[None]:
    """All brokers up and every replica in sync before the test, and again after it."""
    settle(cluster)
    yield
    settle(cluster)


@pytest.fixture
def cluster_topic(cluster_admin: AdminClient) -> Iterator[Callable[..., str]]:
    """``cluster_topic(partitions=3)``: a new topic with the cluster's defaults (replication
    factor 3, min.insync.replicas=2), deleted after the test."""
    created: list[str] = []

    def create(partitions: int = 3, **config: str) -> str:
        name = f"f-{uuid.uuid4().hex[:10]}"
        created.append(name)
        return create_topic(cluster_admin, name, partitions, **config)

    yield create
    if created:
        for future in cluster_admin.delete_topics(created).values():
            future.result(timeout=60)
