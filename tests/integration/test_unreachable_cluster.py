"""An unreachable cluster (a free local port, nothing listening) with a short timeout: every
cluster call raises this package's error, quickly, naming the bootstrap servers and what to
check. Never a bare, empty TimeoutError (a future's timeout racing librdkafka's own) and never
a KafkaException. Each call runs a few times: the race did not show in every try."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import (
    CommitError,
    KafkaSparkError,
    OffsetRanges,
    OffsetResolutionError,
    PartitionRange,
    Subscription,
    commit_offsets,
    list_partitions,
    resolve_offsets,
    timestamp_stops,
)

pytestmark = pytest.mark.integration

TIMEOUT = 1.0
RANGES = OffsetRanges((PartitionRange("t", 0, 0, 5), PartitionRange("t", 1, 0, 5)))


@pytest.fixture
def unreachable() -> Iterator[dict[str, Any]]:
    """A config whose bootstrap port had a listener a moment ago and has none now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield {"bootstrap.servers": f"127.0.0.1:{port}"}


CALLS: list[tuple[str, Callable[[dict[str, Any]], object], type[KafkaSparkError]]] = [
    ("resolve_offsets", lambda c: resolve_offsets(c, Subscription.topics("t"), "earliest",
                                                  "latest", timeout=TIMEOUT),
     OffsetResolutionError),
    ("commit_offsets", lambda c: commit_offsets(c, "g", RANGES, timeout=TIMEOUT), CommitError),
    ("list_partitions", lambda c: list_partitions(c, Subscription.topics("t"), timeout=TIMEOUT),
     OffsetResolutionError),
    ("timestamp_stops", lambda c: timestamp_stops(c, [("t", 0), ("t", 1)], 0, timeout=TIMEOUT),
     OffsetResolutionError),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("attempt", range(3))
@pytest.mark.parametrize(("name", "call", "error"), CALLS, ids=[c[0] for c in CALLS])
def test_an_unreachable_cluster_is_a_package_error_naming_it(
        unreachable: dict[str, Any], name: str, call: Callable[[dict[str, Any]], object],
        error: type[KafkaSparkError], attempt: int) -> None:
    started = time.monotonic()
    with pytest.raises(KafkaSparkError) as caught:
        call(unreachable)
    elapsed = time.monotonic() - started

    assert type(caught.value) is error, repr(caught.value)
    message = str(caught.value)
    assert f"bootstrap.servers='{unreachable['bootstrap.servers']}'" in message, message
    assert "the brokers are up and reachable from here" in message, message
    assert "raise timeout=" in message, message
    assert elapsed < TIMEOUT + 5, f"{name} took {elapsed:.1f}s with timeout={TIMEOUT}"
