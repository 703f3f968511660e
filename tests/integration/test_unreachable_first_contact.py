"""An address where no broker answers, with each entry point's default ``timeout`` (30 s):
the first request, for the cluster's metadata, waits at most ``CONNECT_TIMEOUT_S`` (10 s), then
this package's error names the servers and what to check. The rest of ``timeout`` is for a
cluster that answers but is slow to settle, not for one that never answers."""

from __future__ import annotations

import time
from collections.abc import Callable

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

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}
RANGES = OffsetRanges((PartitionRange("t", 0, 0, 5),))

CALLS: list[tuple[str, Callable[[], object], type[KafkaSparkError]]] = [
    ("resolve_offsets", lambda: resolve_offsets(NOWHERE, Subscription.topics("t"), "earliest",
                                                "latest"), OffsetResolutionError),
    ("list_partitions", lambda: list_partitions(NOWHERE, Subscription.topics("t")),
     OffsetResolutionError),
    ("timestamp_stops", lambda: timestamp_stops(NOWHERE, [("t", 0)], 0),
     OffsetResolutionError),
    ("commit_offsets", lambda: commit_offsets(NOWHERE, "g", RANGES), CommitError),
]


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("name", "call", "error"), CALLS, ids=[c[0] for c in CALLS])
def test_no_broker_answering_fails_after_the_first_contact_bound(
        name: str, call: Callable[[], object], error: type[KafkaSparkError]) -> None:
    started = time.monotonic()
    with pytest.raises(KafkaSparkError) as caught:
        call()
    elapsed = time.monotonic() - started

    assert type(caught.value) is error, repr(caught.value)
    message = str(caught.value)
    assert ("no broker of the Kafka cluster at bootstrap.servers='127.0.0.1:1' answered "
            "within 10s") in message, message
    assert "Check that bootstrap.servers is right and that the brokers are up" in message
    assert elapsed < 20, f"{name} took {elapsed:.1f}s to find no broker answering"
