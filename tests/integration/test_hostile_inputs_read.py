"""Hostile arguments to read_kafka (and decode_kafka / summarize): this package's error, of the
exact class, raised on the driver before any read, with a message that says what to do. Never
Spark's ``AnalysisException [PYTHON_DATA_SOURCE_ERROR]``, a TypeError or a bare TimeoutError:
``pytest.raises(KafkaSparkError)`` lets any of them fail the test."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    KafkaSparkError,
    OffsetRanges,
    OffsetResolutionError,
    PartitionRange,
)
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.spark import read_kafka

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RANGES = OffsetRanges((PartitionRange("t", 0, 0, 5), PartitionRange("t", 1, 2, 9)))


def assert_error(call: Callable[[], object], cls: type[KafkaSparkError], fragment: str) -> str:
    """``call()`` raises exactly ``cls`` whose message contains ``fragment``; the message."""
    with pytest.raises(KafkaSparkError) as caught:
        call()
    assert type(caught.value) is cls, repr(caught.value)
    message = str(caught.value)
    assert fragment in message, message
    return message


@pytest.fixture
def unreachable() -> Iterator[dict[str, Any]]:
    """A config whose bootstrap port had a listener a moment ago and has none now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield {"bootstrap.servers": f"127.0.0.1:{port}"}


# --- Class 2: poll_timeout and timeout are positive, finite numbers of seconds ---

BAD_TIMEOUTS = [-1, 0, None, True, "30", float("nan"), float("inf"), 1e300]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", BAD_TIMEOUTS, ids=repr)
@pytest.mark.parametrize("name", ["poll_timeout", "timeout"])
def test_a_bad_timeout_is_a_configuration_error(spark: Any, unreachable: dict[str, Any],
                                                name: str, value: object) -> None:
    message = assert_error(lambda: read_kafka(spark, RANGES, unreachable, **{name: value}),
                           ConfigurationError, "pass a positive, finite number of seconds")
    assert message.startswith(f"{name}={shown(value)} ")


# --- Class 3: an unreachable cluster is this package's error, quickly, naming it ---

@pytest.mark.timeout(60)
@pytest.mark.parametrize("attempt", range(3))
@pytest.mark.parametrize("engine", ["python", "spark-kafka"])
def test_an_unreachable_cluster_is_an_offset_resolution_error(
        spark: Any, unreachable: dict[str, Any], engine: str, attempt: int) -> None:
    started = time.monotonic()
    message = assert_error(lambda: read_kafka(spark, RANGES, unreachable, engine=engine,
                                              timeout=1),
                           OffsetResolutionError, "the brokers are up and reachable from here")
    assert f"bootstrap.servers='{unreachable['bootstrap.servers']}'" in message
    assert "raise timeout=" in message
    assert time.monotonic() - started < 6
