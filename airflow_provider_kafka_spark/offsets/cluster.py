"""Cluster access: admin clients, metadata, partition lists and offset lookups, each asked
again while the cluster settles (a leader or coordinator moving, a broker that died), until a
deadline.

Every question is batched: one metadata call, and one ``list_offsets`` call per kind of
offset (earliest, latest, a timestamp) for all partitions together. Errors name the cluster
and say how to reach it (:func:`cluster_failure`).

Two waits: an operation's first request, for the cluster's metadata (:func:`reach_cluster`),
waits at most :data:`CONNECT_TIMEOUT_S` for some broker to answer; the operation's own
``timeout`` bounds everything, including the asking again while the cluster settles.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Mapping
from contextlib import suppress
from typing import Any, Literal, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from airflow_provider_kafka_spark.errors import (
    DataLossError,
    KafkaSparkError,
    OffsetResolutionError,
)
from airflow_provider_kafka_spark.offsets.config import (
    AuthenticationWatch,
    KafkaConfig,
    check_isolation_level,
    check_timeout,
    new_client,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.offsets.subscription import Subscription, check_subscription

log = logging.getLogger(__name__)

Key = tuple[str, int]
"""A partition: ``(topic, partition)``."""
T = TypeVar("T")
E = TypeVar("E", bound=KafkaSparkError)
V = TypeVar("V")

# Leadership not settled yet (e.g. right after topic creation); librdkafka's admin results do
# not always flag these as retriable. _NOENT: "Failed to query partition leaders: No leaders
# found", librdkafka's answer while a new topic's metadata has no leader yet.
_TRANSIENT_CODES = frozenset({
    KafkaError._NOENT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.OFFSET_NOT_AVAILABLE,
})

# The group coordinator is moving or loading, or a transactional commit of offsets is still
# pending (UNSTABLE_OFFSET_COMMIT): asking again shortly succeeds.
_COORDINATOR_CODES = frozenset({
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.UNSTABLE_OFFSET_COMMIT,
})

# The request timed out or no broker could be reached.
_UNREACHABLE_CODES = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                                KafkaError._ALL_BROKERS_DOWN})

RESULT_MARGIN = 2.0
"""Seconds a ``future.result()`` waits beyond the request's own ``request_timeout``, so that
librdkafka's timeout (a KafkaException naming the failure) always wins the race against the
future's bare ``TimeoutError``."""

ATTEMPT_S = 5.0
"""Seconds one offset or group request may take before it is sent again. A broker that died
still leads its partitions (and coordinates its groups) until the controller notices, a few
seconds later; a request stuck on it must not use up the whole timeout."""

AUTHENTICATION_PROBE_S = 1.0
"""Seconds of each metadata request before the client is polled for authentication failures."""

MIN_REQUEST_S = 0.5
"""The shortest ``request_timeout`` this package gives an admin request, also when less of the
caller's timeout is left: librdkafka's ListOffsets given a few milliseconds crashes the process
(a segfault in its leader lookup, measured with confluent-kafka 2.16.1: 1 ms at once, 100 ms
never in 48 s of calls), and a request that short cannot be answered anyway."""


def request_seconds(deadline: float) -> float:
    """The ``request_timeout`` of an admin request due by ``deadline`` (``time.monotonic()``):
    what is left of it, at least :data:`MIN_REQUEST_S`."""
    return max(deadline - time.monotonic(), MIN_REQUEST_S)


CONNECT_TIMEOUT_S = 10.0
"""Seconds an operation's first request, for the cluster's metadata, waits for some broker of
``bootstrap.servers`` to answer (the operation's ``timeout`` when that is shorter). No answer
by then means a wrong address, brokers that are down, or a network or TLS setup that keeps
this client out: the operation fails then, not after its whole ``timeout``, which is for a
cluster that answers but is slow to settle (a leader or coordinator moving). The same as
``write_kafka``'s default ``metadata_timeout_s``."""

TOPIC_PROPAGATION_S = 5.0
"""Seconds a topic the caller names, missing from the cluster's metadata, is looked up again
before that is an error (:func:`wait_for_topics`): ``create_topics`` returns once the
controller recorded a topic, and a broker's metadata shows it a moment later (0.1-3 s seen; a
client connected already, asking at once, is told it does not exist). A pattern is never
waited for: matching nothing is an answer."""

TOPIC_RECHECK_S = 0.25
"""Seconds between two lookups of the metadata while named topics are missing."""

REACHABLE = ("Check that bootstrap.servers is right and that the brokers are up and reachable "
             "from here (host, port, advertised listeners, firewall, security.protocol)")
REACH_HELP = f"{REACHABLE}, or raise timeout=."


_ADMIN_DEFAULTS = {"log_level": 5}
"""Under the user's settings: librdkafka's info lines stay out of a task's stderr, where Airflow
logs every line as an error (seen on a clean-clone CI run: an admin client destroyed with one
unserved background event printed ``%6|...|BGQUEUE|... Purging 1 unserved events``). Notices,
warnings and errors are still printed."""


def admin_client(kafka_config: KafkaConfig | Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` for the cluster of ``kafka_config`` (a dict is checked as
    :class:`KafkaConfig` checks it), watching for authentication failures (see
    :func:`cluster_metadata`). One operation builds one and passes it down.

    Raises:
        ConfigurationError: a config that :class:`KafkaConfig` or librdkafka refuses.
    """
    config = KafkaConfig.of(kafka_config)
    watch = AuthenticationWatch({**_ADMIN_DEFAULTS, **config.client()})
    admin = new_client(AdminClient, watch.config)
    admin.kafka_spark_watch = watch  # type: ignore[attr-defined]  # read by cluster_metadata
    admin.kafka_spark_cluster = config.cluster  # type: ignore[attr-defined]  # cluster_admin
    return admin


def cluster_admin(
    kafka_config: KafkaConfig | Mapping[str, Any] | AdminClient,
) -> tuple[AdminClient, str]:
    """The admin client to use (``kafka_config`` itself when it is one, else a new
    :func:`admin_client` of ``KafkaConfig.of(kafka_config)``) and the cluster's name for
    messages (its ``bootstrap.servers``; for an admin client not built by :func:`admin_client`,
    "the cluster of the given AdminClient"): what a public function taking a config or an
    admin client calls once."""
    if isinstance(kafka_config, AdminClient):
        return kafka_config, getattr(kafka_config, "kafka_spark_cluster",
                                     "the cluster of the given AdminClient")
    config = KafkaConfig.of(kafka_config)
    return admin_client(config), config.cluster


def list_partitions(
    kafka_config: KafkaConfig | Mapping[str, Any] | AdminClient,
    subscription: Subscription,
    *,
    timeout: float = 30.0,
) -> list[Key]:
    """The subscription's ``(topic, partition)`` pairs as the cluster has them now, sorted.

    ``timeout``: seconds to wait for the cluster's metadata (a positive, finite number), at
    most :data:`CONNECT_TIMEOUT_S` (10 s) for a first answer. A named topic the metadata does
    not show is looked up again for :data:`TOPIC_PROPAGATION_S` (5 s) within ``timeout``
    before it is unknown (a topic created a moment ago); a pattern does not wait.

    Raises:
        ConfigurationError: a bad ``timeout`` or config; OffsetSpecError: not a Subscription.
        OffsetResolutionError: unknown topic or partition, a pattern matching nothing,
            or no broker answered within that wait.
    """
    seconds = check_timeout(timeout)
    check_subscription(subscription)
    admin, cluster = cluster_admin(kafka_config)
    return subscribed_partitions(admin, cluster, subscription, time.monotonic() + seconds)


def subscribed_partitions(admin: AdminClient, cluster: str, subscription: Subscription,
                          deadline: float) -> list[Key]:
    """``subscription.select`` of the cluster's :func:`partition_counts`; topics it names that
    the metadata does not show are looked up again for :data:`TOPIC_PROPAGATION_S` seconds
    (:func:`wait_for_topics`), within ``deadline`` (``time.monotonic()``), before they are an
    error saying how long they were waited for.

    Raises:
        OffsetResolutionError: see :meth:`Subscription.select`, or no broker answered within
            ``min(seconds left, CONNECT_TIMEOUT_S)``.
        KafkaAuthenticationError: see :func:`cluster_metadata`.
    """
    def counts() -> dict[str, int]:
        return partition_counts(admin, cluster, max(deadline - time.monotonic(), 0.001))

    first = counts()
    if not subscription.missing_topics(first):
        return subscription.select(first)
    # The last lookup starts TOPIC_RECHECK_S before the deadline at the latest: time to answer.
    now = time.monotonic()
    until = min(now + TOPIC_PROPAGATION_S, deadline - TOPIC_RECHECK_S)
    latest = wait_for_topics(first, subscription.missing_topics, counts, until)
    return subscription.select(latest, waited_s=max(until - now, 0.0))


def wait_for_topics(view: V, missing: Callable[[V], Collection[str]],
                    read_again: Callable[[], V], until: float) -> V:
    """``view`` of the cluster's metadata, read again (``read_again()``) every
    :data:`TOPIC_RECHECK_S` seconds while ``missing(view)`` names a topic, until ``until``
    (``time.monotonic()``; callers give at most :data:`TOPIC_PROPAGATION_S` from now). Returns
    the latest view: whatever is still missing there is the caller's error to raise."""
    while missing(view) and (left := until - time.monotonic()) > 0:
        time.sleep(min(TOPIC_RECHECK_S, left))
        view = read_again()
    return view


def partition_counts(admin: AdminClient, cluster: str, seconds: float) -> dict[str, int]:
    """``{topic: number of partitions}`` of every topic on the cluster (one metadata call,
    :func:`reach_cluster`).

    Raises:
        OffsetResolutionError: no broker answered within ``min(seconds, CONNECT_TIMEOUT_S)``.
        KafkaAuthenticationError: see :func:`cluster_metadata`.
    """
    metadata = reach_cluster(admin, cluster, seconds)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()
            if topic.error is None}


def reach_cluster(admin: AdminClient, cluster: str, seconds: float, what: str = "") -> Any:
    """The cluster's metadata (:func:`cluster_metadata`), waiting at most
    ``min(seconds, CONNECT_TIMEOUT_S)`` for some broker to answer: the first request of every
    cluster operation of this package. ``what`` prefixes the message.

    Raises:
        OffsetResolutionError: no broker answered (naming the servers and what to check).
        KafkaAuthenticationError: see :func:`cluster_metadata`.
    """
    wait = min(seconds, CONNECT_TIMEOUT_S)
    try:
        metadata = cluster_metadata(admin, wait)
    except KafkaException as exc:
        remedy = (REACH_HELP if wait < CONNECT_TIMEOUT_S else
                  f"{REACHABLE}. A first answer is awaited {CONNECT_TIMEOUT_S:g}s at most, "
                  "whatever timeout= says.")
        raise OffsetResolutionError(
            f"{what}{': ' if what else ''}no broker of the Kafka cluster at {cluster} answered "
            f"within {wait:g}s ({exc.args[0].str()}). {remedy}"
        ) from None
    admin.kafka_spark_reached = True  # type: ignore[attr-defined]  # read by OffsetLookup
    return metadata


def cluster_metadata(admin: AdminClient, seconds: float) -> Any:
    """``admin.list_topics()``: the metadata of every topic, within ``seconds``.

    The first call of every cluster operation of this package. With a client of
    :func:`admin_client`, it asks in slices of :data:`AUTHENTICATION_PROBE_S` and polls the
    client in between, so that a refused authentication (which librdkafka reports through
    ``error_cb`` only) fails at once instead of after ``seconds``.

    Raises:
        KafkaAuthenticationError: the cluster refused the client's credentials or TLS setup.
        KafkaException: no metadata within ``seconds``.
    """
    watch: AuthenticationWatch | None = getattr(admin, "kafka_spark_watch", None)
    deadline = time.monotonic() + seconds
    while True:
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            return admin.list_topics(
                timeout=remaining if watch is None else min(remaining, AUTHENTICATION_PROBE_S))
        except KafkaException:
            if watch is not None:
                admin.poll(0)
                watch.check(f"asking the cluster for its metadata within {seconds:g}s")
            if watch is None or time.monotonic() >= deadline:
                raise


def retry_transient(call: Callable[[float], T], what: str, deadline: float) -> T:
    """``call(seconds)``, with at most :data:`ATTEMPT_S` seconds per attempt, called again with
    back-off while it fails with a transient group-coordinator error
    (``COORDINATOR_LOAD_IN_PROGRESS``, ``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``) or
    times out or cannot connect (the broker it asked died, and the cluster has not noticed
    yet), and ``deadline`` (``time.monotonic()``) is not reached.

    Raises:
        KafkaException: any other error, or the transient one still at the deadline.
        TimeoutError: the last attempt's future did not complete.
    """
    pause = 0.1
    while True:
        left = request_seconds(deadline)
        try:
            return call(min(left, ATTEMPT_S))
        except (KafkaException, TimeoutError) as exc:
            error = exc.args[0] if isinstance(exc, KafkaException) else None
            transient = error is None or error.code() in _COORDINATOR_CODES | _UNREACHABLE_CODES
            if not transient or time.monotonic() + pause > deadline:
                raise
            log.info("%s: %s; asking again in %.1fs", what,
                     "no answer" if error is None else error.str(), pause)
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def cluster_failure(error: KafkaError | None, what: str, cluster: str, otherwise: str,
                    cls: type[E]) -> E:
    """The ``cls`` error for ``what`` failing at ``cluster``. No ``error`` (a future's bare
    ``TimeoutError``), a timeout or an unreachable broker: the message says how to reach the
    cluster (:data:`REACH_HELP`); any other error: its text, then ``otherwise``."""
    if error is None or error.code() in _UNREACHABLE_CODES:
        detail = "" if error is None else f" ({error.str()})"
        return cls(f"{what}: the Kafka cluster at {cluster} did not answer in time{detail}. "
                   f"{REACH_HELP}")
    return cls(f"{what} failed at the Kafka cluster at {cluster}: {error.str()}. {otherwise}")


def list_offsets(admin: AdminClient, partitions: list[Key],
                 kind: Literal["earliest", "latest"] | int,
                 *, isolation_level: str, timeout: float) -> dict[Key, int]:
    """The ``kind`` offsets of ``partitions`` (``latest``: the last stable offset under
    ``read_committed``, else the high watermark; an int: the first offset at or after that
    timestamp in epoch millis, -1 if none), asked again while a leader moves (see
    :meth:`OffsetLookup.offsets`) until ``timeout`` seconds have passed.

    Raises:
        OffsetResolutionError: no answer within ``timeout``, or an error that is not transient.
    """
    lookup = OffsetLookup(admin, "the cluster of the given AdminClient", partitions,
                          check_isolation_level(isolation_level), time.monotonic() + timeout)
    return lookup.offsets(kind)


def newest_timestamps(admin: AdminClient, partitions: list[Key],
                      timeout: float) -> dict[Key, int | None]:
    """The timestamp of each partition's newest record, transactional ones included
    (``read_uncommitted``); ``-1`` for an empty partition, ``None`` for a partition that did
    not answer within ``timeout`` seconds or answered a retriable error. Asked once.

    Raises:
        OffsetResolutionError: a partition answered an error that is not retriable.
    """
    newest: dict[Key, int | None] = {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): KafkaOffsetSpec.max_timestamp() for t, p in partitions},
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
        request_timeout=max(timeout, MIN_REQUEST_S),
    )
    for tp, future in futures.items():
        try:
            newest[(tp.topic, tp.partition)] = future.result(timeout=timeout).timestamp
        except TimeoutError:
            newest[(tp.topic, tp.partition)] = None
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise OffsetResolutionError(
                    f"max_timestamp lookup failed for {tp.topic}/{tp.partition}: {exc}. Check "
                    "that the topic exists and the connection may describe it (ACLs)."
                ) from None
            newest[(tp.topic, tp.partition)] = None
    return newest


def _is_retriable(exc: KafkaException) -> bool:
    error = exc.args[0]
    return bool(error.retriable()) or error.code() in _TRANSIENT_CODES | _UNREACHABLE_CODES


class OffsetLookup:
    """Answers offset questions for a fixed partition list until ``deadline``
    (``time.monotonic()``): one batched request per kind of offset and isolation level,
    cached, asked again for the partitions that answered a transient error."""

    def __init__(self, admin: AdminClient, cluster: str, partitions: list[Key],
                 isolation_level: str, deadline: float) -> None:
        self.admin = admin
        self.cluster = cluster
        self.partitions = partitions
        self.isolation_level = isolation_level
        self.deadline = deadline
        self._cache: dict[tuple[str | int, str], dict[Key, int]] = {}

    def _remaining(self, what: str, last_error: KafkaError | None = None) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise cluster_failure(last_error, what, self.cluster, REACH_HELP,
                                  OffsetResolutionError)
        return remaining

    def offsets(self, kind: str | int, isolation_level: str | None = None) -> dict[Key, int]:
        """``kind`` is ``"earliest"``, ``"latest"`` or a timestamp in epoch millis; under
        ``isolation_level`` (default: the lookup's). A timestamp with no record at or after it
        below the end of the log (last stable offset / high watermark) answers -1.

        One batched request for all partitions; partitions answering with a retriable error
        (e.g. no leader yet, right after topic creation, or a leader that died) or not within
        :data:`ATTEMPT_S` are asked again until the deadline. Before the first request on an
        admin client that has not reached the cluster yet: :func:`reach_cluster`.

        Raises:
            OffsetResolutionError: the deadline passed, or an error that is not transient.
        """
        level_name = isolation_level or self.isolation_level
        if (kind, level_name) not in self._cache:
            spec = (KafkaOffsetSpec.earliest() if kind == "earliest"
                    else KafkaOffsetSpec.latest() if kind == "latest"
                    else KafkaOffsetSpec.for_timestamp(int(kind)))
            level = (IsolationLevel.READ_COMMITTED if level_name == "read_committed"
                     else IsolationLevel.READ_UNCOMMITTED)
            what = f"listing the {kind} offsets ({level_name})"
            found: dict[Key, int] = {}
            pending = self.partitions
            last_error: KafkaError | None = None
            errors: dict[Key, KafkaError] = {}  # the last retriable error of each pending one
            if pending and not getattr(self.admin, "kafka_spark_reached", False):
                reach_cluster(self.admin, self.cluster, self._remaining(what), what)
            while pending:
                if time.monotonic() >= self.deadline:
                    raise self._unsettled(what, pending, errors, last_error)
                wait = min(request_seconds(self.deadline), ATTEMPT_S)
                futures = self.admin.list_offsets(
                    {TopicPartition(t, p): spec for t, p in pending},
                    isolation_level=level,
                    request_timeout=wait,
                )
                retry: list[Key] = []
                for tp, future in futures.items():
                    key = (tp.topic, tp.partition)
                    try:
                        offset = future.result(timeout=wait + RESULT_MARGIN).offset
                    except TimeoutError:  # concurrent.futures.TimeoutError is TimeoutError
                        retry.append(key)  # asked again until the deadline
                        continue
                    except KafkaException as exc:
                        last_error = exc.args[0]
                        if not _is_retriable(exc):
                            raise cluster_failure(
                                last_error, f"{what} of {key[0]}/{key[1]}", self.cluster,
                                "Check that the topic still exists and that this client may "
                                "describe it (ACLs).", OffsetResolutionError) from None
                        errors[key] = last_error
                        retry.append(key)
                        continue
                    # While a partition's leader moves, librdkafka can answer an offset of
                    # OFFSET_INVALID (-1001) without an error: no answer, ask again.
                    if offset < (0 if kind in ("earliest", "latest") else -1):
                        log.info("%s: %s/%s answered offset %d; asking again", what, *key,
                                 offset)
                        retry.append(key)
                    else:
                        found[key] = offset
                pending = sorted(retry)
                if pending:
                    time.sleep(max(min(0.2, self.deadline - time.monotonic()), 0))
                    self._refresh_leaders({t for t, _ in pending})
            self._cache[(kind, level_name)] = found
        return self._cache[(kind, level_name)]

    def _unsettled(self, what: str, pending: list[Key], errors: Mapping[Key, KafkaError],
                   last_error: KafkaError | None) -> OffsetResolutionError:
        """The error of ``pending`` partitions still without an answer at the deadline: when
        they answered a leader-settling error, naming them, the error and that a retry helps;
        else (no answer, a timeout) :func:`cluster_failure`'s how to reach the cluster."""
        answered = {errors[k].str() for k in pending if k in errors
                    and errors[k].code() not in _UNREACHABLE_CODES}
        if not answered:
            return cluster_failure(last_error, what, self.cluster, REACH_HELP,
                                   OffsetResolutionError)
        named = ", ".join(f"{t}/{p}" for t, p in pending[:20])
        return OffsetResolutionError(
            f"{what}: {len(pending)} of {len(self.partitions)} partition(s) still answered "
            f"{' / '.join(sorted(answered))} when the timeout ran out ({named}"
            f"{', ...' if len(pending) > 20 else ''}) at the Kafka cluster at {self.cluster}: "
            "their leaders are not settled yet (a topic created a moment ago, or a leader that "
            "moved). Retry, or raise timeout=."
        )

    def _refresh_leaders(self, topics: set[str]) -> None:
        """Ask for the metadata of ``topics`` (until the deadline): the admin client's offset
        requests go to the leaders it has cached and do not refresh them when a leader moved
        (it answers ``FENCED_LEADER_EPOCH`` or "no leaders found" until something does)."""
        for topic in sorted(topics):
            left = self.deadline - time.monotonic()
            if left <= 0:
                return
            with suppress(KafkaException):  # the next offset request says what is wrong
                self.admin.list_topics(topic=topic, timeout=min(left, ATTEMPT_S))


def readable_ranges(admin: AdminClient, cluster: str, ranges: OffsetRanges,
                    on_data_loss: Literal["fail", "skip"], timeout: float) -> OffsetRanges:
    """``ranges`` as the cluster can still serve them: each start checked against its
    partition's log start offset (one metadata request, answered within
    ``min(timeout, CONNECT_TIMEOUT_S)`` seconds, then one batched ``earliest`` request, all
    within ``timeout`` seconds). ``ranges`` as they are when nothing was deleted.

    Deleted offsets (retention, ``delete_records``) with ``on_data_loss="skip"``: the starts
    moved up to the log start offset, the skipped offsets added to ``lost``, and a warning
    logged; with ``"fail"``: :class:`DataLossError`.

    Raises:
        DataLossError: a start below the log start offset and ``on_data_loss="fail"``.
        OffsetResolutionError: no broker answered, the cluster did not answer within
            ``timeout``, or it refused the request (a topic deleted, ACLs).
        KafkaAuthenticationError: see :func:`cluster_metadata`.
    """
    deadline = time.monotonic() + timeout
    what = "reading the log start offsets of the ranges"
    otherwise = ("Check that the topics still exist and that this client may describe them "
                 "(ACLs), or resolve the offsets again.")
    reach_cluster(admin, cluster, timeout, what)  # no broker, or a refused login, fails here
    try:
        left = request_seconds(deadline)
        futures = admin.list_offsets(
            {TopicPartition(r.topic, r.partition): KafkaOffsetSpec.earliest()
             for r in ranges if r.size > 0},
            request_timeout=left)
        earliest = {(tp.topic, tp.partition): f.result(timeout=left + RESULT_MARGIN).offset
                    for tp, f in futures.items()}
    except KafkaException as exc:
        raise cluster_failure(exc.args[0], what, cluster, otherwise,
                              OffsetResolutionError) from None
    except TimeoutError:  # concurrent.futures.TimeoutError is TimeoutError
        raise cluster_failure(None, what, cluster, otherwise, OffsetResolutionError) from None
    gone = {(r.topic, r.partition): min(earliest.get((r.topic, r.partition), r.start), r.stop)
            - r.start for r in ranges}
    lost = {key: n for key, n in gone.items() if n > 0}
    if not lost:
        return ranges
    detail = ", ".join(f"{t}/{p}: {n} offset(s)" for (t, p), n in sorted(lost.items()))
    if on_data_loss == "fail":
        raise DataLossError(
            f"data in the ranges was deleted after they were resolved ({detail}): the start is "
            "below the log start offset (retention or delete_records). Pass "
            "on_data_loss='skip' to read what is left, or resolve the offsets again.", lost)
    log.warning("Skipping deleted offsets (on_data_loss='skip'): %s", detail)
    kept = tuple(PartitionRange(r.topic, r.partition, r.start + lost[(r.topic, r.partition)],
                                r.stop) if (r.topic, r.partition) in lost else r for r in ranges)
    merged = dict(ranges.lost)
    for key, n in lost.items():
        merged[key] = merged.get(key, 0) + n
    return dataclasses.replace(ranges, ranges=kept, lost=merged)
