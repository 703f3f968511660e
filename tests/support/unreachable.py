"""Clusters a client cannot reach, and every public entry point that reaches a cluster, for the
tests that time how each fails (``tests/integration/test_unreachable_cluster.py``,
``tests/secured/test_tls_mismatch.py``).

A fault is a ``bootstrap.servers`` where no Kafka broker answers: a port with nothing listening
(``tools.processes.free_port``), an HTTP server (:func:`http_server`), a server that accepts and never says a
word (:func:`silent_server`), or a broker's listener spoken to with the wrong security protocol
(the secured tier). An entry point (:class:`EntryPoint`) is one call of the public API, with
the error it must raise and the bound its docstring states for its ``timeout`` (or
``metadata_timeout_s``); :func:`check_failure` asserts all three.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from airflow_provider_kafka_spark.errors import KafkaWriteError
from airflow_provider_kafka_spark.offsets import (
    CommitError,
    KafkaSparkError,
    OffsetRanges,
    OffsetResolutionError,
    PartitionRange,
    Subscription,
    audit,
    commit_offsets,
    list_partitions,
    resolve_offsets,
    timestamp_stops,
)
from airflow_provider_kafka_spark.offsets.cluster import CONNECT_TIMEOUT_S
from airflow_provider_kafka_spark.offsets.completeness import (
    Check,
    check_interval_complete,
    check_partitions,
)

TOPIC = "t"
RANGES = OffsetRanges((PartitionRange(TOPIC, 0, 0, 5), PartitionRange(TOPIC, 1, 0, 5)))

SLACK = 4.0
"""Seconds an entry point may take beyond its stated bound: a busy machine's scheduling and a
client's start and close, never a wait of its own."""


@dataclass(frozen=True)
class Setting:
    """What the Spark entry points need besides the faulty config, made before the clock
    starts: the shared ``spark`` session, a DataFrame to write (``rows``), a ``folder`` for a
    file sink, and a reachable cluster (``input_config``) with ``input_ranges`` to read from
    for an ingest whose output cluster is the faulty one."""

    spark: Any = None
    rows: Any = None
    folder: Path = Path(".")
    input_config: dict[str, Any] | None = None
    input_ranges: OffsetRanges | None = None


@dataclass(frozen=True)
class EntryPoint:
    """One public call that reaches a cluster.

    ``call(config, timeout, setting)`` makes the call with a short ``timeout`` (its
    ``timeout=`` or ``metadata_timeout_s=`` argument; an entry point without one ignores it
    and has a fixed bound); ``error``: the package's class it must raise (None: a sensor's
    check, which answers "not done" instead, :class:`Check`); ``bound(timeout)``: the seconds
    its docstring allows; ``spark``: it needs a :class:`Setting` with the Spark session.
    """

    name: str
    call: Callable[[dict[str, Any], float, Setting], object]
    error: type[KafkaSparkError] | None
    bound: Callable[[float], float]
    spark: bool = False


def first_contact(timeout: float) -> float:
    """The bound of a first request, for the cluster's metadata: ``min(timeout, 10)``."""
    return min(timeout, CONNECT_TIMEOUT_S)


def _read(config: dict[str, Any], timeout: float, setting: Setting) -> object:
    from airflow_provider_kafka_spark.spark import read_kafka

    return read_kafka(setting.spark, RANGES, config, timeout=timeout)


def _write(config: dict[str, Any], timeout: float, setting: Setting) -> object:
    from airflow_provider_kafka_spark.spark import write_kafka

    return write_kafka(setting.rows, config, topic=TOPIC, delivery_guarantee="at_least_once",
                       metadata_timeout_s=timeout)


def _ingest_files(config: dict[str, Any], timeout: float, setting: Setting) -> object:
    from airflow_provider_kafka_spark.sinks import FileSink
    from airflow_provider_kafka_spark.spark import ingest

    return ingest(setting.spark, RANGES, config, FileSink(str(setting.folder / "out")),
                  progress_every=None)


def _ingest_kafka(config: dict[str, Any], timeout: float, setting: Setting) -> object:
    """An ingest from a reachable cluster into a KafkaSink on the faulty one."""
    from airflow_provider_kafka_spark.sinks import KafkaSink
    from airflow_provider_kafka_spark.spark import ingest

    assert setting.input_config is not None and setting.input_ranges is not None
    return ingest(setting.spark, setting.input_ranges, setting.input_config,
                  KafkaSink(TOPIC, kafka_config=config, delivery_guarantee="at_least_once"),
                  progress_every=None)


ENTRY_POINTS: list[EntryPoint] = [
    EntryPoint("resolve_offsets", lambda c, t, _: resolve_offsets(
        c, Subscription.topics(TOPIC), "earliest", "latest", timeout=t),
        OffsetResolutionError, first_contact),
    EntryPoint("commit_offsets", lambda c, t, _: commit_offsets(c, "g", RANGES, timeout=t),
               CommitError, first_contact),
    EntryPoint("list_partitions", lambda c, t, _: list_partitions(
        c, Subscription.topics(TOPIC), timeout=t), OffsetResolutionError, first_contact),
    EntryPoint("timestamp_stops", lambda c, t, _: timestamp_stops(
        c, [(TOPIC, 0), (TOPIC, 1)], 0, timeout=t), OffsetResolutionError, first_contact),
    EntryPoint("audit", lambda c, t, _: audit(c, "dag", "task", since=datetime.now(UTC),
                                              timeout=t), OffsetResolutionError, first_contact),
    EntryPoint("check_partitions", lambda c, t, _: check_partitions(
        c, Subscription.topics(TOPIC), 1, timeout=t), None, first_contact),
    EntryPoint("check_interval_complete", lambda c, t, _: check_interval_complete(
        c, Subscription.topics(TOPIC), 0, None, timeout=t), None, first_contact),
    EntryPoint("read_kafka", _read, OffsetResolutionError, first_contact, spark=True),
    EntryPoint("write_kafka", _write, KafkaWriteError, lambda t: t, spark=True),
]
"""The entry points a short ``timeout`` bounds."""

INGESTS: list[EntryPoint] = [
    # ingest has no timeout: read_kafka's default (30 s) bounds the first contact of its read,
    # write_kafka's default metadata_timeout_s (10 s) that of a KafkaSink's write.
    EntryPoint("ingest FileSink", _ingest_files, OffsetResolutionError,
               lambda _: CONNECT_TIMEOUT_S, spark=True),
    EntryPoint("ingest KafkaSink", _ingest_kafka, KafkaWriteError,
               lambda _: CONNECT_TIMEOUT_S, spark=True),
]
"""The entry points with a fixed bound (10 s): ``ingest`` into a file sink with the faulty
cluster as its input, and into a Kafka sink with the faulty cluster as its output."""


@dataclass(frozen=True)
class Failure:
    """How an entry point failed: its error's class (None: a check not done) and message
    (a :class:`Check`'s ``waiting_for``), and the seconds from the call to its end."""

    error: type[BaseException] | None
    message: str
    elapsed: float


def fail(entry: EntryPoint, config: dict[str, Any], timeout: float,
         setting: Setting = Setting()) -> Failure:
    """Call ``entry`` and say how it failed (AssertionError: it did not)."""
    started = time.monotonic()
    try:
        outcome = entry.call(config, timeout, setting)
    except KafkaSparkError as exc:
        return Failure(type(exc), str(exc), time.monotonic() - started)
    elapsed = time.monotonic() - started
    assert isinstance(outcome, Check) and not outcome.done, (entry.name, outcome)
    return Failure(None, outcome.waiting_for, elapsed)


REACH_CHECKS = ("reachable", "security.protocol")
"""What a message of no broker answering tells to check."""


def check_failure(entry: EntryPoint, failure: Failure, servers: str, timeout: float, *,
                  error: type[KafkaSparkError] | None = None,
                  checks: tuple[str, ...] = REACH_CHECKS, slack: float = SLACK) -> None:
    """``failure`` is ``error`` (default: ``entry``'s error, or a check not done), names
    ``servers`` and what to check (``checks``), and came within the bound ``entry`` states
    for ``timeout`` (plus ``slack``)."""
    assert failure.error is (error or entry.error), (entry.name, failure)
    assert f"bootstrap.servers='{servers}'" in failure.message, (entry.name, failure.message)
    for what in checks:
        assert what in failure.message, (entry.name, what, failure.message)
    bound = entry.bound(timeout)
    assert failure.elapsed < bound + slack, (
        f"{entry.name} took {failure.elapsed:.1f}s; its bound is {bound:g}s")


class _NotKafka(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  # no stderr lines
        pass


@contextmanager
def http_server() -> Iterator[str]:
    """An HTTP server on a free port (Python's, answering a Kafka request with its 400 page
    and closing the connection): ``host:port``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotKafka)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def silent_server() -> Iterator[str]:
    """A server on a free port that accepts every connection and never sends a byte (a service
    that waits for its own protocol's greeting): ``host:port``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(10)
        for connection in accepted:
            connection.close()
        listener.close()
