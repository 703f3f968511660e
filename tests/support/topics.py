"""Creating a test topic that every client can use at once.

``create_topics`` returns when the controller has recorded the topic; a broker learns of it a
moment later. A client asking that broker in between is told the topic does not exist (or has
no leader), which the package rightly reports as an unknown topic. So a test waits here until
the metadata shows every partition with a leader.
"""
from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["create_topic", "has_leaders"]

VISIBLE_WITHIN_S = 30.0


def has_leaders(admin: AdminClient, topic: str, partitions: int) -> bool:
    """Whether ``admin``'s broker knows ``topic`` with ``partitions`` partitions, each led."""
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None:
        return False
    return (len(found.partitions) == partitions
            and all(p.leader >= 0 for p in found.partitions.values()))


def create_topic(admin: AdminClient, name: str, partitions: int, *,
                 replication_factor: int = -1, **config: str) -> str:
    """Creates ``name`` and returns it once its metadata shows every partition with a leader."""
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=replication_factor,
                                  config=config)])[name].result(timeout=30)
    deadline = time.monotonic() + VISIBLE_WITHIN_S
    while not has_leaders(admin, name, partitions):
        assert time.monotonic() < deadline, (
            f"{name}: not every partition has a leader {VISIBLE_WITHIN_S:g}s after its creation")
        time.sleep(0.1)
    return name
