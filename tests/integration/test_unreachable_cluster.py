"""An unreachable cluster (a free local port, nothing listening) with a short timeout: every
cluster call raises this package's error, quickly, naming the bootstrap servers and what to
check. Never a bare, empty TimeoutError (a future's timeout racing librdkafka's own) and never
a KafkaException. Each call runs a few times: the race did not show in every try.

With each entry point's default ``timeout`` (30 s), the first request, for the cluster's
metadata, waits at most ``CONNECT_TIMEOUT_S`` (10 s): the rest of ``timeout`` is for a cluster
that answers but is slow to settle, not for one that never answers."""

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


Call = Callable[..., object]  # (config, **timeout)
CALLS: list[tuple[str, Call, type[KafkaSparkError]]] = [
    ("resolve_offsets", lambda c, **t: resolve_offsets(c, Subscription.topics("t"), "earliest",
                                                       "latest", **t), OffsetResolutionError),
    ("commit_offsets", lambda c, **t: commit_offsets(c, "g", RANGES, **t), CommitError),
    ("list_partitions", lambda c, **t: list_partitions(c, Subscription.topics("t"), **t),
     OffsetResolutionError),
    ("timestamp_stops", lambda c, **t: timestamp_stops(c, [("t", 0), ("t", 1)], 0, **t),
     OffsetResolutionError),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("attempt", range(3))
@pytest.mark.parametrize(("name", "call", "error"), CALLS, ids=[c[0] for c in CALLS])
def test_an_unreachable_cluster_is_a_package_error_naming_it(
        unreachable: dict[str, Any], name: str, call: Call, error: type[KafkaSparkError],
        attempt: int) -> None:
    started = time.monotonic()
    with pytest.raises(KafkaSparkError) as caught:
        call(unreachable, timeout=TIMEOUT)
    elapsed = time.monotonic() - started

    assert type(caught.value) is error, repr(caught.value)
    message = str(caught.value)
    assert f"bootstrap.servers='{unreachable['bootstrap.servers']}'" in message, message
    assert "the brokers are up and reachable from here" in message, message
    assert "raise timeout=" in message, message
    assert elapsed < TIMEOUT + 5, f"{name} took {elapsed:.1f}s with timeout={TIMEOUT}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("name", "call", "error"), CALLS, ids=[c[0] for c in CALLS])
def test_no_broker_answering_fails_after_the_first_contact_bound(
        unreachable: dict[str, Any], name: str, call: Call,
        error: type[KafkaSparkError]) -> None:
    started = time.monotonic()
    with pytest.raises(KafkaSparkError) as caught:
        call(unreachable)  # the default timeout, 30 s
    elapsed = time.monotonic() - started

    assert type(caught.value) is error, repr(caught.value)
    message = str(caught.value)
    assert (f"no broker of the Kafka cluster at bootstrap.servers="
            f"'{unreachable['bootstrap.servers']}' answered within 10s") in message, message
    assert "Check that bootstrap.servers is right and that the brokers are up" in message
    assert elapsed < 20, f"{name} took {elapsed:.1f}s to find no broker answering"
