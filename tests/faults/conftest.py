"""A real 3-broker cluster (``scripts/kafka-broker start --brokers 3``) for the fault tests,
and what they need to find and kill the broker that matters: partition leaders, the group
coordinator, transaction coordinators. Every test starts with all brokers up and every replica
in sync, and brokers a test killed are started again after it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tools.local_broker import LocalCluster, local_cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("kafka-cluster"), brokers=3) as started:
        # The brokers create __transaction_state on the first transactional producer: create
        # it now, so that the tests can tell which broker coordinates which transaction.
        producer = Producer({"bootstrap.servers": started.bootstrap,
                             "transactional.id": "faults-setup"})
        producer.init_transactions(60)
        yield started


@pytest.fixture(scope="session")
def cluster_config(cluster: LocalCluster) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap}


@pytest.fixture(scope="session")
def cluster_admin(cluster_config: dict[str, Any]) -> AdminClient:
    return AdminClient(cluster_config)


@pytest.fixture(autouse=True)
def healthy(cluster: LocalCluster) -> Iterator[None]:
    """All brokers up and every replica in sync before the test, and again after it."""
    settle(cluster)
    yield
    settle(cluster)


def settle(cluster: LocalCluster) -> None:
    took = cluster.settle()
    if took > 10:
        print(f"the cluster settled in {took:.0f}s")


@pytest.fixture
def cluster_topic(cluster_admin: AdminClient) -> Iterator[Callable[..., str]]:
    """``cluster_topic(partitions=3)``: a new topic with the cluster's defaults (replication
    factor 3, min.insync.replicas=2), deleted after the test."""
    created: list[str] = []

    def create(partitions: int = 3, **config: str) -> str:
        name = f"f-{uuid.uuid4().hex[:10]}"
        cluster_admin.create_topics([NewTopic(name, partitions, config=config)])[name].result(30)
        created.append(name)
        deadline = time.monotonic() + 30
        while not has_leaders(cluster_admin, name, partitions):
            assert time.monotonic() < deadline, f"{name} has no leaders after 30 s"
            time.sleep(0.2)
        return name

    yield create
    if created:
        for future in cluster_admin.delete_topics(created).values():
            future.result(timeout=60)


def has_leaders(admin: AdminClient, topic: str, partitions: int) -> bool:
    found = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return len(found) == partitions and all(p.leader >= 0 for p in found.values())


def leader_of(admin: AdminClient, topic: str, partition: int) -> int:
    """The leader of ``topic[partition]``; waits for a broker whose metadata has it (a topic
    created a moment ago may not have reached the broker asked yet)."""
    deadline = time.monotonic() + 30
    while True:
        found = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(partition)
        if found is not None and found.leader >= 0:
            return int(found.leader)
        assert time.monotonic() < deadline, f"{topic}/{partition} has no leader after 30 s"
        time.sleep(0.2)


def java_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of an ASCII string, as Kafka computes it."""
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` / ``__transaction_state`` that holds a group's
    or a transactional id's state (Kafka's ``Utils.abs(key.hashCode()) % partitions``)."""
    h = java_hash(key)
    return 0 if h == -(1 << 31) else abs(h) % partitions


def transaction_coordinator(admin: AdminClient, transactional_id: str) -> int:
    """The broker coordinating ``transactional_id``: the leader of its ``__transaction_state``
    partition."""
    state = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
    return state.partitions[coordinator_partition(transactional_id, len(state.partitions))].leader


def group_coordinator(admin: AdminClient, group_id: str) -> int:
    """The broker coordinating ``group_id`` (the group must exist: it has committed offsets)."""
    description = admin.describe_consumer_groups([group_id])[group_id].result(timeout=30)
    return description.coordinator.id


class Background:
    """Run ``target`` in a thread; :meth:`result` returns its value or raises its exception."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self._outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                self._outcome.append((True, target()))
            except BaseException as exc:  # handed to the caller of result()
                self._outcome.append((False, exc))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"still running after {timeout}s"
        ok, value = self._outcome[0]
        if not ok:
            raise value
        return value
