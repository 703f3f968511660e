"""A real Schema Registry (``scripts/schema-registry``, Confluent's REST API) for the format
tests, and raw producing helpers for records the package did not write."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import Producer

from tools.local_registry import local_registry


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The ``schema_registry`` config of one registry for the whole run."""
    with local_registry(tmp_path_factory.mktemp("schema-registry")) as url:
        yield {"url": url}


def produce(kafka_config: dict[str, Any], topic: str,
            records: Sequence[tuple[int, bytes | None, bytes | None]],
            headers: Sequence[list[tuple[str, bytes]] | None] | None = None) -> None:
    """Produce ``(partition, key, value)`` records (optionally with headers), acknowledged."""
    producer = Producer({**kafka_config, "acks": "all"})
    failures: list[Any] = []
    for i, (partition, key, value) in enumerate(records):
        producer.produce(topic, value=value, key=key, partition=partition,
                         headers=headers[i] if headers else None,
                         on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(30) == 0
    assert not failures, failures
