"""Resolve offset specs to exact ranges, and commit ranges to a consumer group.

All cluster questions are batched: one metadata call, one ``list_offsets`` call per spec kind
(earliest, latest, and each distinct timestamp) and at most one group-offsets call, whatever
the number of partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sized
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from airflow_provider_kafka_spark.errors import (
    CommitError,
    ConfigurationError,
    DataLossError,
    IntervalNotCompleteError,
    KafkaSparkError,
    OffsetResolutionError,
    OffsetSpecError,
)
from airflow_provider_kafka_spark.offsets.config import (
    AuthenticationWatch,
    check_isolation_level,
    check_timeout,
    client_config,
    cluster_name,
    consumer_config,
    new_client,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.offsets.specs import (
    Committed,
    Earliest,
    Latest,
    OffsetSpec,
    SpecificOffsets,
    Timestamp,
    parse_offset_spec,
    shown,
)
from airflow_provider_kafka_spark.offsets.subscription import Subscription

log = logging.getLogger(__name__)

Key = tuple[str, int]
OnDataLoss = Literal["fail", "skip"]
OnOpenTransaction = Literal["fail", "truncate"]
T = TypeVar("T")
E = TypeVar("E", bound=KafkaSparkError)

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

# The broker refuses a commit from outside the group while the group has members.
_ACTIVE_GROUP_CODES = frozenset({
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.STALE_MEMBER_EPOCH,
})

# librdkafka's OFFSET_INVALID: the group has no committed offset for the partition.
_NO_COMMITTED_OFFSET = -1001

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

# The request timed out or no broker could be reached.
_UNREACHABLE_CODES = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                                KafkaError._ALL_BROKERS_DOWN})

REACH_HELP = ("Check that bootstrap.servers is right and that the brokers are up and reachable "
              "from here (host, port, advertised listeners, firewall, security.protocol), or "
              "raise timeout=.")


def admin_client(kafka_config: Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` for the user's librdkafka config, watching for authentication
    failures (see :func:`_partition_counts`).

    Raises:
        ConfigurationError: a config that :func:`client_config` or librdkafka refuses.
    """
    watch = AuthenticationWatch(client_config(kafka_config))
    admin = new_client(AdminClient, watch.config)
    admin.kafka_spark_watch = watch  # type: ignore[attr-defined]  # read by cluster_metadata
    return admin


def _admin(kafka_config: Mapping[str, Any] | AdminClient) -> tuple[AdminClient, str]:
    """The admin client to use and the cluster's name for messages."""
    if isinstance(kafka_config, AdminClient):
        return kafka_config, "the cluster of the given AdminClient"
    return admin_client(kafka_config), cluster_name(kafka_config)


def list_partitions(
    kafka_config: Mapping[str, Any] | AdminClient,
    subscription: Subscription,
    *,
    timeout: float = 30.0,
) -> list[Key]:
    """The subscription's ``(topic, partition)`` pairs as the cluster has them now, sorted.

    ``timeout``: seconds to wait for the cluster's metadata (a positive, finite number).

    Raises:
        ConfigurationError: a bad ``timeout`` or config; OffsetSpecError: not a Subscription.
        OffsetResolutionError: unknown topic or partition, a pattern matching nothing,
            or the cluster did not answer within ``timeout`` seconds.
    """
    seconds = check_timeout(timeout)
    _check_subscription(subscription)
    admin, cluster = _admin(kafka_config)
    return _list_partitions(admin, cluster, subscription, seconds)


def _check_subscription(subscription: object) -> None:
    if not isinstance(subscription, Subscription):
        raise OffsetSpecError(
            f"subscription={shown(subscription)} is not a Subscription; build one with "
            "Subscription.topics([...]), Subscription.pattern('...') or "
            "Subscription.partitions([...])."
        )


def _list_partitions(admin: AdminClient, cluster: str, subscription: Subscription,
                     seconds: float) -> list[Key]:
    return subscription.select(_partition_counts(admin, cluster, seconds))


def _partition_counts(admin: AdminClient, cluster: str, seconds: float) -> dict[str, int]:
    """``{topic: number of partitions}`` of every topic on the cluster (one metadata call)."""
    try:
        metadata = cluster_metadata(admin, seconds)
    except KafkaException as exc:
        raise OffsetResolutionError(
            f"the Kafka cluster at {cluster} did not give its metadata within {seconds:g}s "
            f"({exc.args[0].str()}). {REACH_HELP}"
        ) from None
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()
            if topic.error is None}


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


def resolve_offsets(
    kafka_config: Mapping[str, Any],
    subscription: Subscription,
    starting: object,
    stopping: object,
    *,
    group_id: str | None = None,
    isolation_level: str = "read_committed",
    on_data_loss: OnDataLoss = "fail",
    on_open_transaction: OnOpenTransaction = "fail",
    timeout: float = 30.0,
) -> OffsetRanges:
    """Resolve ``starting`` and ``stopping`` specs to one ``[start, stop)`` range per partition.

    Semantics per partition:

    * ``earliest``: the log start offset.
    * ``latest``: the last stable offset under ``read_committed``, the high watermark under
      ``read_uncommitted``.
    * ``timestamp:T``: the offset of the first record with timestamp >= T, or ``latest`` when
      there is none. Note that Kafka's lookup also sees transaction markers, which carry the
      time of the commit.
    * ``committed``: the group's committed offset, else the reset strategy (no reset: error).
    * explicit offsets: as given; a listed offset beyond ``latest`` is an error.

    Open transactions (``read_committed``): a ``timestamp:T`` **stop** that the last stable
    offset cuts short, because a transaction that is still open began before the first record
    with timestamp >= T, is :class:`IntervalNotCompleteError` (retry once the transaction is
    decided). With ``on_open_transaction="truncate"`` the stop is the last stable offset and
    the cut is recorded in ``OffsetRanges.truncated``.

    Lag: each partition's ``latest`` (under ``isolation_level``) minus its stop, kept in
    ``OffsetRanges.lag``: how far the range ends behind the partition's end at resolution.

    Data loss: a start below the log start offset means the data is gone; so does a
    ``timestamp:T`` start on a partition whose records were deleted (log start offset > 0)
    when T is not after the oldest retained record's timestamp (the deleted records may have
    been in the interval). That is :class:`DataLossError`, or with ``on_data_loss="skip"``
    the start moves up and the lost count is kept in ``OffsetRanges.lost`` (and logged); for
    a timestamp start the count is the log start offset, an upper bound.

    ``timeout``: seconds for all the cluster calls together (a positive, finite number of at
    most 3600); an unreachable cluster is an :class:`OffsetResolutionError` once it passed.

    Raises:
        ConfigurationError: a bad ``timeout`` or client config.
        OffsetSpecError: an invalid spec, ``committed`` without ``group_id``, or bad options.
        OffsetResolutionError: unknown topics, start > stop, an explicit offset out of range,
            a partition with no committed offset and no reset strategy, or a timeout.
        IntervalNotCompleteError: an open transaction holds back a ``timestamp:`` stop.
        DataLossError: data the range needs was deleted, with ``on_data_loss="fail"``.
    """
    seconds = check_timeout(timeout)
    start_spec = parse_offset_spec(starting)
    stop_spec = parse_offset_spec(stopping)
    level = check_isolation_level(isolation_level)
    if on_data_loss not in ("fail", "skip"):
        raise ConfigurationError(f"on_data_loss={shown(on_data_loss)} is not valid; use 'fail' "
                                 "or 'skip'.")
    if on_open_transaction not in ("fail", "truncate"):
        raise ConfigurationError(f"on_open_transaction={shown(on_open_transaction)} is not "
                                 "valid; use 'fail' or 'truncate'.")
    if group_id is not None and not isinstance(group_id, str):
        raise ConfigurationError(f"group_id={shown(group_id)} is not a consumer group; pass the "
                                 "consumer group's id as a string (or None).")
    _check_subscription(subscription)
    specs = (start_spec, stop_spec)
    if any(_needs_group(s) for s in specs) and not group_id:
        raise OffsetSpecError(
            "a 'committed' offset spec needs group_id: pass the consumer group whose offsets to use."
        )
    if (isinstance(start_spec, Timestamp) and isinstance(stop_spec, Timestamp)
            and start_spec.millis > stop_spec.millis):
        raise OffsetSpecError(
            f"the starting time {start_spec} is after the stopping time {stop_spec}; swap them, "
            "or check the times (the start is inclusive, the stop exclusive)."
        )

    deadline = time.monotonic() + seconds
    admin, cluster = _admin(kafka_config)
    partitions = _list_partitions(admin, cluster, subscription, seconds)
    lookup = _OffsetLookup(admin, cluster, partitions, level, deadline)

    committed = (lookup.committed(kafka_config, group_id)
                 if group_id and any(map(_needs_group, specs)) else {})
    starts = _offsets_for(start_spec, "starting", partitions, lookup, committed)
    stops = _offsets_for(stop_spec, "stopping", partitions, lookup, committed)
    truncated: dict[Key, int] = {}
    if isinstance(stop_spec, Timestamp):
        held = {k: s.open_transaction for k, s in lookup.timestamp_stops(stop_spec.millis).items()
                if s.open_transaction is not None}
        if held and on_open_transaction == "fail":
            detail = "; ".join(f"{t}/{p}: last stable offset {o} (the open transaction's first "
                               f"offset {o})" for (t, p), o in sorted(held.items())[:20])
            raise IntervalNotCompleteError(
                f"the interval up to {stop_spec} is not complete on {len(held)} partition(s): a "
                f"transaction that is still open began before its end ({detail}). Its records "
                "may be committed inside the interval. Retry once it is committed or aborted "
                "(the broker aborts it after its transaction.timeout.ms); wait with "
                "KafkaIntervalCompleteSensor; or pass on_open_transaction='truncate' to stop at "
                "the last stable offset and record the cut in the ranges.",
                held,
            )
        truncated = held
        if truncated:
            log.warning("Stopping at the last stable offset (on_open_transaction='truncate'): %s",
                        ", ".join(f"{t}/{p} at {o}" for (t, p), o in truncated.items()))

    earliest = lookup.offsets("earliest")
    latest = lookup.offsets("latest")  # cached: asked once per resolution at most
    ranges: list[PartitionRange] = []
    lost: dict[Key, int] = {}
    backwards: list[str] = []
    retained_after = (_deleted_may_be_in_interval(lookup, start_spec.millis)
                      if isinstance(start_spec, Timestamp) else set())
    for key in partitions:
        start, stop = starts[key], stops[key]
        gone = min(earliest[key], stop) - start
        if gone > 0:
            lost[key] = gone
            start += gone
        elif key in retained_after:
            lost[key] = earliest[key]
        if start > stop:
            backwards.append(f"{key[0]}/{key[1]} start {start} > stop {stop}")
            continue
        ranges.append(PartitionRange(key[0], key[1], start, stop))
    if backwards:
        raise OffsetResolutionError(
            f"the starting offsets are after the stopping offsets for {len(backwards)} "
            f"partition(s): {'; '.join(backwards[:20])}. Check the start and stop specs "
            f"({start_spec} .. {stop_spec})."
        )
    if lost:
        detail = ", ".join(f"{t}/{p}: {n} offset(s)" for (t, p), n in sorted(lost.items()))
        if on_data_loss == "fail":
            raise DataLossError(
                f"data was deleted before it could be read ({detail}): the start is below the "
                "log start offset, or the interval begins before the oldest record that "
                "retention or delete_records left (the deleted records may have been in it). "
                "Pass on_data_loss='skip' to read what is left instead, recording the loss.",
                lost,
            )
        log.warning("Skipping deleted offsets (on_data_loss='skip'): %s", detail)
    return OffsetRanges(
        tuple(ranges),
        starting=str(start_spec),
        stopping=str(stop_spec),
        isolation_level=level,
        group_id=group_id,
        lost=lost,
        lag={(r.topic, r.partition): max(latest[(r.topic, r.partition)] - r.stop, 0)
             for r in ranges},
        truncated=truncated,
    )


@dataclass(frozen=True)
class TimestampStop:
    """Where a ``timestamp:T`` stop lands on one partition, and whether that can still change.

    ``offset`` is the stop :func:`resolve_offsets` returns now. ``final``: a record (or a
    transaction marker) with timestamp >= T exists below the last stable offset, so the stop
    can never move. ``open_transaction``: the first offset of an open transaction that began
    before the stop (the stop is held back there until the transaction is decided), else None.
    Neither: no record with timestamp >= T exists yet, the stop is the end of the log.
    """

    offset: int
    final: bool
    open_transaction: int | None = None


def timestamp_stops(
    kafka_config: Mapping[str, Any] | AdminClient,
    partitions: Iterable[Key],
    millis: int,
    *,
    isolation_level: str = "read_committed",
    timeout: float = 30.0,
) -> dict[Key, TimestampStop]:
    """The :class:`TimestampStop` of ``timestamp:<millis>`` on each partition (batched).

    Raises:
        ConfigurationError: a bad ``timeout``, ``isolation_level`` or config.
        OffsetSpecError: ``partitions`` is not a list of (topic, partition) pairs.
        OffsetResolutionError: the cluster did not answer within ``timeout`` seconds, or
            refused a partition.
    """
    seconds = check_timeout(timeout)
    level = check_isolation_level(isolation_level)
    stop = Timestamp(millis).millis
    if isinstance(partitions, Sized) and len(partitions) == 0:
        return {}
    keys = Subscription.partitions(partitions, allow_internal=True).partition_list
    admin, cluster = _admin(kafka_config)
    lookup = _OffsetLookup(admin, cluster, list(keys), level, time.monotonic() + seconds)
    return lookup.timestamp_stops(stop)


def _deleted_may_be_in_interval(lookup: _OffsetLookup, millis: int) -> set[Key]:
    """Partitions whose deleted records (below a log start offset > 0) may have timestamps
    >= ``millis``: the oldest retained record is at or after ``millis``, or none is left."""
    earliest = lookup.offsets("earliest")
    if not any(earliest.values()):
        return set()
    found = lookup.offsets(millis, "read_uncommitted")
    high = lookup.offsets("latest", "read_uncommitted")
    return {k for k in lookup.partitions if earliest[k] > 0
            and (found[k] == earliest[k] or (found[k] < 0 and high[k] == earliest[k]))}


@dataclass(frozen=True)
class CommitResult:
    """What :func:`commit_offsets` did, per ``(topic, partition)``.

    ``committed``: the offsets written. ``unchanged``: partitions left alone because the group
    was already at or past the range's stop, with the group's offset (a re-run of an older
    commit is a no-op, never a rewind).
    """

    group_id: str
    committed: Mapping[Key, int] = field(default_factory=dict)
    unchanged: Mapping[Key, int] = field(default_factory=dict)


def commit_offsets(
    kafka_config: Mapping[str, Any],
    group_id: str,
    ranges: OffsetRanges | str | Mapping[str, Any],
    *,
    allow_rewind: bool = False,
    timeout: float = 30.0,
) -> CommitResult:
    """Commit each partition's ``stop`` offset for ``group_id``; never move a group backwards.

    Every partition is checked before any is committed: it must exist on the cluster, and
    its ``stop`` must not be beyond the end of the log under the ranges' isolation level
    (the last stable offset for ``read_committed``, the high watermark otherwise). One bad
    partition is a :class:`CommitError` naming all of them, and nothing is committed.

    Partitions where the group's committed offset is already at or past ``stop`` are left as
    they are and reported in :attr:`CommitResult.unchanged`, unless ``allow_rewind=True``,
    which moves them back to ``stop`` (logged with the offsets before and after).

    Commits from outside the group (a consumer that never joins it, :class:`GroupOffsets`);
    the group must have no active members (a running consumer owns its offsets, and the
    broker refuses the commit). Transient coordinator errors, and a coordinator that does not
    answer (its broker died), are retried until ``timeout`` (seconds, a positive finite
    number) has passed.

    Raises:
        ConfigurationError: a bad ``timeout``, ``group_id``, ``allow_rewind``, ranges or config.
        CommitError: a partition does not exist or its stop is beyond the end of the log,
            the group has active members, the cluster did not answer within ``timeout``, or
            the broker refused the commit.
    """
    seconds = check_timeout(timeout)
    if not isinstance(allow_rewind, bool):
        raise ConfigurationError(f"allow_rewind={shown(allow_rewind)} is not a bool; pass True "
                                 "or False.")
    offset_ranges = OffsetRanges.from_json(ranges)
    if not group_id or not isinstance(group_id, str):
        raise ConfigurationError(f"group_id={shown(group_id)} is not a consumer group; "
                                 "commit_offsets needs a non-empty group_id string.")
    wanted = {(r.topic, r.partition): r.stop for r in offset_ranges}
    if not wanted:
        return CommitResult(group_id)
    deadline = time.monotonic() + seconds
    admin, cluster = _admin(kafka_config)
    try:
        _check_commit_partitions(admin, cluster, wanted, offset_ranges.isolation_level,
                                 deadline, group_id)
    except OffsetResolutionError as exc:
        raise CommitError(str(exc)) from None

    try:
        current = _OffsetLookup(admin, cluster, sorted(wanted), "read_committed",
                                deadline).committed(kafka_config, group_id)
    except OffsetResolutionError as exc:
        raise CommitError(str(exc)) from None
    unchanged = {k: current[k] for k, stop in wanted.items()
                 if k in current and (current[k] == stop or (current[k] > stop
                                                             and not allow_rewind))}
    moves = {k: stop for k, stop in wanted.items() if k not in unchanged}
    if unchanged:
        log.info("Group %r is already at or past these stops; left as they are: %s", group_id,
                 ", ".join(f"{t}/{p} at {current[(t, p)]} (stop {wanted[(t, p)]})"
                           for t, p in sorted(unchanged)))
    rewinds = {k: o for k, o in moves.items() if k in current and current[k] > o}
    if rewinds:
        log.warning("Rewinding group %r (allow_rewind=True): %s", group_id,
                    ", ".join(f"{t}/{p} from {current[(t, p)]} back to {o}"
                              for (t, p), o in sorted(rewinds.items())))
    if not moves:
        return CommitResult(group_id, {}, unchanged)
    offsets = [TopicPartition(t, p, offset) for (t, p), offset in sorted(moves.items())]
    with GroupOffsets(kafka_config, group_id) as group:
        try:
            result = retry_transient(lambda wait: group.commit(offsets, wait),
                                       f"committing offsets for group {group_id!r}", deadline)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in _ACTIVE_GROUP_CODES:
                raise CommitError(
                    f"consumer group {group_id!r} has active members: the broker refused a "
                    f"commit from outside the group ({error.str()}); a running consumer owns "
                    "the group's offsets. Stop it or use a group_id that only this pipeline "
                    "uses. Nothing was committed."
                ) from None
            raise cluster_failure(error, f"committing offsets for group {group_id!r}", cluster,
                                  _COMMIT_HELP, CommitError) from None
        except TimeoutError:  # concurrent.futures.TimeoutError is TimeoutError
            raise cluster_failure(None, f"committing offsets for group {group_id!r}", cluster,
                                  _COMMIT_HELP, CommitError) from None
    failed = [f"{tp.topic}/{tp.partition}: {tp.error.str()}" for tp in result
              if tp.error is not None]
    if failed:
        raise CommitError(
            f"the cluster at {cluster} refused to commit offsets of group {group_id!r} for "
            f"{len(failed)} partition(s): {'; '.join(failed[:50])}. The other partitions were "
            "committed. Fix the cause (ACLs, a member that joined the group meanwhile) and "
            "commit again: commit_offsets never moves a group backwards, so a repeat is safe."
        )
    return CommitResult(group_id, moves, unchanged)


def _check_commit_partitions(admin: AdminClient, cluster: str, wanted: Mapping[Key, int],
                             isolation_level: str, deadline: float, group_id: str) -> None:
    """Every partition of ``wanted`` (``{key: stop}``) exists and its stop is not beyond the
    end of the log under ``isolation_level``; else a :class:`CommitError` naming them all."""
    counts = _partition_counts(admin, cluster, max(deadline - time.monotonic(), 0.001))
    bad: dict[Key, str] = {}
    for topic, partition in wanted:
        if topic not in counts:
            bad[(topic, partition)] = "no such topic"
        elif partition >= counts[topic]:
            bad[(topic, partition)] = (f"no such partition (the topic has partitions "
                                       f"0..{counts[topic] - 1})")
    present = sorted(k for k in wanted if k not in bad)
    if present:
        latest = _OffsetLookup(admin, cluster, present, isolation_level, deadline).offsets(
            "latest")
        for key in present:
            if wanted[key] > latest[key]:
                bad[key] = (f"stop {wanted[key]} is beyond the end of the log ({latest[key]}, "
                            f"{isolation_level})")
    if bad:
        detail = "; ".join(f"{t}/{p}: {why}" for (t, p), why in sorted(bad.items())[:50])
        raise CommitError(
            f"nothing was committed for group {group_id!r}: {len(bad)} partition(s) of the "
            f"ranges do not match the cluster at {cluster}: {detail}. The ranges come from "
            "another cluster, or a topic was deleted or recreated since they were resolved: "
            "resolve the offsets again and commit those ranges."
        )


_COMMIT_HELP = ("Check the group id and that this client may describe the group and commit "
                "its offsets (ACLs).")


class GroupOffsets:
    """Reads and commits the offsets of ``group_id`` through a consumer that never joins the
    group (a context manager; the consumer is closed on exit).

    Group offsets go through librdkafka's consumer, which follows a coordinator that moves;
    the admin API's group requests can abort the whole process when one times out while the
    coordinator's broker is down (librdkafka issue #4605).

    Raises:
        ConfigurationError: a config that librdkafka refuses.
    """

    def __init__(self, kafka_config: Mapping[str, Any], group_id: str) -> None:
        self._answers: list[tuple[KafkaError | None, list[TopicPartition]]] = []
        config = consumer_config(kafka_config, isolation_level="read_committed",
                                 group_id=group_id)
        config["on_commit"] = lambda error, partitions: self._answers.append((error, partitions))
        self._consumer = new_client(Consumer, config)

    def __enter__(self) -> GroupOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self._consumer.close()

    def committed(self, partitions: list[TopicPartition], seconds: float) -> list[TopicPartition]:
        """The committed offsets of ``partitions`` (``OFFSET_INVALID`` where there is none).

        Raises:
            KafkaException: the request failed, or a partition answered an error.
        """
        result = self._consumer.committed(partitions, timeout=seconds)
        for tp in result:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return result

    def commit(self, offsets: list[TopicPartition], seconds: float) -> list[TopicPartition]:
        """Commit ``offsets`` and wait up to ``seconds`` for the answer: the partitions, each
        with its error, if any.

        Raises:
            KafkaException: the request failed.
            TimeoutError: no answer within ``seconds``.
        """
        self._answers.clear()
        self._consumer.commit(offsets=offsets, asynchronous=True)
        deadline = time.monotonic() + seconds
        while not self._answers:
            if time.monotonic() > deadline:
                raise TimeoutError
            self._consumer.poll(0.1)  # serves on_commit
        error, partitions = self._answers[0]
        if error is not None:
            raise KafkaException(error)
        return partitions


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
        left = max(deadline - time.monotonic(), 0.001)
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


def list_offsets(admin: AdminClient, partitions: list[Key], kind: Literal["earliest", "latest"],
                 *, isolation_level: str, timeout: float) -> dict[Key, int]:
    """The ``kind`` offsets of ``partitions`` (``latest``: the last stable offset under
    ``read_committed``, else the high watermark), asked again while a leader moves (see
    :meth:`_OffsetLookup.offsets`) until ``timeout`` seconds have passed.

    Raises:
        OffsetResolutionError: no answer within ``timeout``, or an error that is not transient.
    """
    lookup = _OffsetLookup(admin, "the cluster of the given AdminClient", partitions,
                           check_isolation_level(isolation_level), time.monotonic() + timeout)
    return lookup.offsets(kind)


def _needs_group(spec: OffsetSpec) -> bool:
    if isinstance(spec, SpecificOffsets):
        return isinstance(spec.default, Committed)
    return isinstance(spec, Committed)


def _offsets_for(
    spec: OffsetSpec,
    role: str,
    partitions: list[Key],
    lookup: _OffsetLookup,
    committed: Mapping[Key, int],
) -> dict[Key, int]:
    """Offsets of ``spec`` for every partition (``role`` names it in errors)."""
    if isinstance(spec, Earliest):
        return lookup.offsets("earliest")
    if isinstance(spec, Latest):
        return lookup.offsets("latest")
    if isinstance(spec, Timestamp):
        return lookup.timestamp_offsets(spec.millis)
    if isinstance(spec, Committed):
        missing = [k for k in partitions if k not in committed]
        if missing and spec.reset is None:
            names = ", ".join(f"{t}/{p}" for t, p in missing[:50])
            raise OffsetResolutionError(
                f"{role} spec 'committed': the group has no committed offset for {len(missing)} "
                f"partition(s): {names}. Use 'committed:earliest' or 'committed:latest' to "
                "choose where such partitions begin."
            )
        fallback = lookup.offsets(spec.reset) if missing and spec.reset else {}
        return {k: committed[k] if k in committed else fallback[k] for k in partitions}
    # SpecificOffsets
    unknown = sorted(set(spec.offsets) - set(partitions))
    if unknown:
        raise OffsetResolutionError(
            f"{role} offsets name partitions that are not subscribed or do not exist: "
            f"{unknown[:50]}. List only partitions of the subscription ({len(partitions)} "
            "partition(s)), or subscribe to these partitions too."
        )
    unlisted = [k for k in partitions if k not in spec.offsets]
    if unlisted and spec.default is None:
        raise OffsetResolutionError(
            f"{role} offsets do not list {len(unlisted)} subscribed partition(s): "
            f"{unlisted[:50]}. List them, or add a default such as \"*\": \"earliest\"."
        )
    defaults = (_offsets_for(spec.default, role, partitions, lookup, committed)
                if unlisted and spec.default is not None else {})
    latest = lookup.offsets("latest")
    beyond = [f"{t}/{p}: {o} > latest {latest[(t, p)]}" for (t, p), o in spec.offsets.items()
              if o > latest[(t, p)]]
    if beyond:
        raise OffsetResolutionError(
            f"{role} offsets are beyond the end of the log ({lookup.isolation_level}): "
            f"{'; '.join(beyond[:50])}. Use offsets up to the end of the log (or 'latest'); "
            "under read_committed an open transaction holds the end back: wait for it, or "
            "resolve with isolation_level='read_uncommitted'."
        )
    return {k: spec.offsets[k] if k in spec.offsets else defaults[k] for k in partitions}


def _is_retriable(exc: KafkaException) -> bool:
    error = exc.args[0]
    return bool(error.retriable()) or error.code() in _TRANSIENT_CODES | _UNREACHABLE_CODES


class _OffsetLookup:
    """Answers offset questions for a fixed partition list, one batched request per kind."""

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
        :data:`ATTEMPT_S` are asked again until the deadline.
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
            while pending:
                wait = min(self._remaining(what, last_error), ATTEMPT_S)
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
                    time.sleep(min(0.2, self._remaining(what, last_error)))
                    self._refresh_leaders({t for t, _ in pending}, what, last_error)
            self._cache[(kind, level_name)] = found
        return self._cache[(kind, level_name)]

    def _refresh_leaders(self, topics: set[str], what: str,
                         last_error: KafkaError | None) -> None:
        """Ask for the metadata of ``topics``: the admin client's offset requests go to the
        leaders it has cached and do not refresh them when a leader moved (it answers
        ``FENCED_LEADER_EPOCH`` or "no leaders found" until something does)."""
        for topic in sorted(topics):
            with suppress(KafkaException):  # the next offset request says what is wrong
                self.admin.list_topics(topic=topic,
                                       timeout=min(self._remaining(what, last_error), ATTEMPT_S))

    def timestamp_offsets(self, millis: int) -> dict[Key, int]:
        """The ``timestamp:<millis>`` offsets: the first record at or after it, else latest."""
        latest = self.offsets("latest")
        found = self.offsets(millis)
        # -1: no record at or after T (the broker also answers -1 past the LSO / HW).
        return {k: latest[k] if found[k] < 0 else min(found[k], latest[k])
                for k in self.partitions}

    def timestamp_stops(self, millis: int) -> dict[Key, TimestampStop]:
        """See :func:`timestamp_stops`."""
        found = self.offsets(millis)
        stops = self.timestamp_offsets(millis)
        if self.isolation_level != "read_committed":
            return {k: TimestampStop(stops[k], found[k] >= 0) for k in self.partitions}
        stable = self.offsets("latest")
        high = self.offsets("latest", "read_uncommitted")
        held = [k for k in self.partitions if found[k] < 0 and stable[k] < high[k]]
        # Counting the undecided records too, the first offset with ts >= T: at the LSO, the
        # stop is exact whatever the transaction does; past it (or none yet), the open
        # transaction began before the stop and its records may still land in the interval.
        uncommitted = self.offsets(millis, "read_uncommitted") if held else {}
        exact = {k for k in held if uncommitted[k] == stable[k]}
        return {k: TimestampStop(stops[k], found[k] >= 0 or k in exact,
                                 stable[k] if k in held and k not in exact else None)
                for k in self.partitions}

    def committed(self, kafka_config: Mapping[str, Any], group_id: str) -> dict[Key, int]:
        """The group's committed offsets; partitions without one are absent."""
        what = f"reading the committed offsets of group {group_id!r}"
        partitions = [TopicPartition(t, p) for t, p in self.partitions]
        otherwise = ("Check the group id and that this client may describe the group and its "
                     "topics (ACLs).")
        with GroupOffsets(kafka_config, group_id) as group:
            try:
                result = retry_transient(lambda wait: group.committed(partitions, wait), what,
                                           self.deadline)
            except KafkaException as exc:
                raise cluster_failure(exc.args[0], what, self.cluster, otherwise,
                                      OffsetResolutionError) from None
        return {(tp.topic, tp.partition): tp.offset for tp in result if tp.offset >= 0}
