"""The fault tests' helpers: slow reads and writes a broker can fail in the middle of
(``tools/fault_workloads.py``, which ``tools/fault_soak.py`` runs too), and what they need to
find and kill the broker that matters: partition leaders, the group coordinator, transaction
coordinators."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient

from tools.fault_workloads import SLOW_FETCH, fill, rows_of, slow_input
from tools.local_broker import LocalCluster

__all__ = ["SLOW_FETCH", "Background", "coordinator_partition", "fill", "group_coordinator",
           "java_hash", "leader_of", "rows_of", "settle", "slow_input",
           "transaction_coordinator"]


def settle(cluster: LocalCluster) -> None:
    took = cluster.settle()
    if took > 10:
        print(f"the cluster settled in {took:.0f}s")


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
