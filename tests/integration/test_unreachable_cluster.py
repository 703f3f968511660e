"""An unreachable cluster (a free local port, nothing listening) with a short timeout: every
cluster call raises this package's error, quickly, naming the bootstrap servers and what to
check. Never a bare, empty TimeoutError (a future's timeout racing librdkafka's own) and never
a KafkaException. Each call runs a few times: the race did not show in every try.

Every public entry point that reaches a cluster (``tests/support/unreachable.py``), against
each fault where no Kafka broker answers: nothing listening, an HTTP server, a server that
accepts and never answers. Each fails within the bound its docstring states, timed from the
call (the shared Spark session's start does not count). The TLS mismatches are in
``tests/secured/test_tls_mismatch.py``.

With each entry point's default ``timeout`` (30 s), the first request, for the cluster's
metadata, waits at most ``CONNECT_TIMEOUT_S`` (10 s): the rest of ``timeout`` is for a cluster
that answers but is slow to settle, not for one that never answers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import InternalTopicError
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
from airflow_provider_kafka_spark.offsets.pins import RunKey, pinned_ranges
from airflow_provider_kafka_spark.sinks import FileSink, KafkaSink
from airflow_provider_kafka_spark.spark import ingest
from tests.support.topics import create_topic
from tests.support.unreachable import (
    ENTRY_POINTS,
    INGESTS,
    EntryPoint,
    Failure,
    Setting,
    check_failure,
    fail,
    http_server,
    silent_server,
)
from tools.kafka_records import produce
from tools.processes import free_port

pytestmark = pytest.mark.integration

TIMEOUT = 1.0
RANGES = OffsetRanges((PartitionRange("t", 0, 0, 5), PartitionRange("t", 1, 0, 5)))


@pytest.fixture
def unreachable() -> Iterator[dict[str, Any]]:
    """A config whose bootstrap port has no listener."""
    yield {"bootstrap.servers": f"127.0.0.1:{free_port()}"}


Call = Callable[..., object]  # (config, **timeout)
CALLS: list[tuple[str, Call, type[KafkaSparkError]]] = [
    ("resolve_offsets", lambda c, **t: resolve_offsets(c, Subscription.topics("t"), "earliest",
                                                       "latest", **t), OffsetResolutionError),
    ("commit_offsets", lambda c, **t: commit_offsets(c, "g", RANGES, **t), CommitError),
    ("list_partitions", lambda c, **t: list_partitions(c, Subscription.topics("t"), **t),
     OffsetResolutionError),
    ("timestamp_stops", lambda c, **t: timestamp_stops(c, [("t", 0), ("t", 1)], 0, **t),
     OffsetResolutionError),
    # The resolve operator's first request (the run's pins, in an internal topic): issue 55's
    # deployed test saw it wait its whole timeout (30 s), not the first contact's 10 s.
    ("pinned_ranges", lambda c, **t: pinned_ranges(c, RunKey("dag", "task", "run"), {}, **t),
     InternalTopicError),
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


FAULTS = ["nothing listening", "an HTTP server", "a silent server"]


@pytest.fixture(scope="module")
def faults() -> Iterator[dict[str, str]]:
    """``bootstrap.servers`` of each fault, one server of each kind for the module."""
    with http_server() as http, silent_server() as silent:
        yield {"nothing listening": f"127.0.0.1:{free_port()}", "an HTTP server": http,
               "a silent server": silent}


@pytest.fixture(scope="module")
def spark_setting(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Setting:
    return Setting(spark, spark.createDataFrame([(b"k", b"v")], "key binary, value binary"),
                   tmp_path_factory.mktemp("unreachable"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e.name for e in ENTRY_POINTS])
def test_every_entry_point_fails_within_its_stated_bound(
        faults: dict[str, str], entry: EntryPoint, fault: str,
        request: pytest.FixtureRequest) -> None:
    setting = request.getfixturevalue("spark_setting") if entry.spark else Setting()
    servers = faults[fault]
    check_failure(entry, fail(entry, {"bootstrap.servers": servers}, TIMEOUT, setting),
                  servers, TIMEOUT)


@pytest.fixture(scope="module")
def ingest_failures(faults: dict[str, str], spark: Any, kafka_config: dict[str, Any],
                    kafka_admin: Any, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[dict[tuple[str, str], Failure]]:
    """How each ingest fails against each fault, all run at once (each waits its fixed 10 s):
    ``{(entry name, fault): Failure}``. The Kafka sink's input is a real topic of two records."""
    topic = create_topic(kafka_admin, f"unreachable-{uuid.uuid4().hex[:10]}", 1)
    output = create_topic(kafka_admin, f"unreachable-out-{uuid.uuid4().hex[:10]}", 1)
    now = int(time.time() * 1000)
    produce(kafka_config, topic, [(0, b"k0", b"v0", now), (0, b"k1", b"v1", now)])
    ranges = resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest")
    assert ranges.total() == 2
    # The session's first ingest of each kind plans Spark's jobs for the first time (seconds,
    # more with several at once on a busy machine): not what is timed here.
    for sink in (FileSink(str(tmp_path_factory.mktemp("warm") / "out")),
                 KafkaSink(output, kafka_config=kafka_config, delivery_guarantee="at_least_once")):
        assert ingest(spark, ranges, kafka_config, sink, progress_every=None).records == 2
    cases = [(entry, fault) for entry in INGESTS for fault in FAULTS]

    def run(case: tuple[EntryPoint, str]) -> Failure:
        entry, fault = case
        folder = tmp_path_factory.mktemp("ingest")
        return fail(entry, {"bootstrap.servers": faults[fault]}, TIMEOUT,
                    Setting(spark, folder=Path(folder), input_config=kafka_config,
                            input_ranges=ranges))

    with ThreadPoolExecutor(len(FAULTS)) as pool:  # more at once: Spark's own work queues
        outcomes = dict(zip(((e.name, f) for e, f in cases), pool.map(run, cases),
                            strict=True))
    yield outcomes
    for future in kafka_admin.delete_topics([topic, output]).values():
        future.result(timeout=30)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("entry", INGESTS, ids=[e.name for e in INGESTS])
def test_ingest_fails_within_its_fixed_bound(
        ingest_failures: dict[tuple[str, str], Failure], faults: dict[str, str],
        entry: EntryPoint, fault: str) -> None:
    check_failure(entry, ingest_failures[(entry.name, fault)], faults[fault], TIMEOUT)
