"""Resolve offset specs to exact ranges, and commit ranges to a consumer group.

All cluster questions are batched: one metadata call, one ``list_offsets`` call per spec kind
(earliest, latest, and each distinct timestamp) and at most one group-offsets call, whatever
the number of partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, Literal

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from airflow_provider_kafka_spark.offsets.config import check_isolation_level, client_config
from airflow_provider_kafka_spark.offsets.errors import (
    CommitError,
    DataLossError,
    OffsetResolutionError,
    OffsetSpecError,
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
)
from airflow_provider_kafka_spark.offsets.subscription import Subscription

log = logging.getLogger(__name__)

Key = tuple[str, int]
OnDataLoss = Literal["fail", "skip"]

# Leadership not settled yet (e.g. right after topic creation); librdkafka's admin results do
# not always flag these as retriable.
_TRANSIENT_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.OFFSET_NOT_AVAILABLE,
})

# librdkafka's OFFSET_INVALID: the group has no committed offset for the partition.
_NO_COMMITTED_OFFSET = -1001


def admin_client(kafka_config: Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` for the user's librdkafka config."""
    return AdminClient(client_config(kafka_config))


def list_partitions(
    kafka_config: Mapping[str, Any] | AdminClient,
    subscription: Subscription,
    *,
    timeout: float = 30.0,
) -> list[Key]:
    """The subscription's ``(topic, partition)`` pairs as the cluster has them now, sorted.

    Raises:
        OffsetResolutionError: unknown topic or partition, a pattern matching nothing,
            or the cluster did not answer within ``timeout`` seconds.
    """
    admin = kafka_config if isinstance(kafka_config, AdminClient) else admin_client(kafka_config)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise OffsetResolutionError(
            f"could not read cluster metadata within {timeout}s: {exc}. "
            "Check bootstrap.servers and that the brokers are up."
        ) from None
    counts = {name: len(topic.partitions) for name, topic in metadata.topics.items()
              if topic.error is None}
    return subscription.select(counts)


def resolve_offsets(
    kafka_config: Mapping[str, Any],
    subscription: Subscription,
    starting: object,
    stopping: object,
    *,
    group_id: str | None = None,
    isolation_level: str = "read_committed",
    on_data_loss: OnDataLoss = "fail",
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

    A start below the log start offset means the data is gone: :class:`DataLossError`, or
    with ``on_data_loss="skip"`` the start moves up and the lost count is kept in
    ``OffsetRanges.lost`` (and logged).

    Raises:
        OffsetSpecError: an invalid spec, ``committed`` without ``group_id``, or bad options.
        OffsetResolutionError: unknown topics, start > stop, an explicit offset out of range,
            a partition with no committed offset and no reset strategy, or a timeout.
        DataLossError: a start below the log start offset with ``on_data_loss="fail"``.
    """
    start_spec = parse_offset_spec(starting)
    stop_spec = parse_offset_spec(stopping)
    level = check_isolation_level(isolation_level)
    if on_data_loss not in ("fail", "skip"):
        raise OffsetSpecError(f"on_data_loss={on_data_loss!r} is not valid; use 'fail' or 'skip'.")
    if not isinstance(subscription, Subscription):
        raise OffsetSpecError(f"subscription must be a Subscription, got {subscription!r}.")
    specs = (start_spec, stop_spec)
    if any(_needs_group(s) for s in specs) and not group_id:
        raise OffsetSpecError(
            "a 'committed' offset spec needs group_id: pass the consumer group whose offsets to use."
        )
    if (isinstance(start_spec, Timestamp) and isinstance(stop_spec, Timestamp)
            and start_spec.millis > stop_spec.millis):
        raise OffsetSpecError(
            f"the starting time {start_spec} is after the stopping time {stop_spec}."
        )

    deadline = time.monotonic() + timeout
    admin = admin_client(kafka_config)
    partitions = list_partitions(admin, subscription, timeout=timeout)
    lookup = _OffsetLookup(admin, partitions, level, deadline)

    committed = lookup.committed(group_id) if group_id and any(map(_needs_group, specs)) else {}
    starts = _offsets_for(start_spec, "starting", partitions, lookup, committed)
    stops = _offsets_for(stop_spec, "stopping", partitions, lookup, committed)

    earliest = lookup.offsets("earliest")
    ranges: list[PartitionRange] = []
    lost: dict[Key, int] = {}
    backwards: list[str] = []
    for key in partitions:
        start, stop = starts[key], stops[key]
        gone = min(earliest[key], stop) - start
        if gone > 0:
            lost[key] = gone
            start += gone
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
                "log start offset (retention or delete_records). Pass on_data_loss='skip' to "
                "read from the log start instead, recording the loss.",
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
    )


def commit_offsets(
    kafka_config: Mapping[str, Any],
    group_id: str,
    ranges: OffsetRanges | str | Mapping[str, Any],
    *,
    timeout: float = 30.0,
) -> dict[Key, int]:
    """Commit each partition's ``stop`` offset for ``group_id`` and return what was committed.

    Uses the admin API, so it needs no consumer; the group must have no active members
    (a running consumer owns its offsets).

    Raises:
        CommitError: the group has active members, or the broker refused the commit.
    """
    offset_ranges = OffsetRanges.from_json(ranges)
    if not group_id or not isinstance(group_id, str):
        raise OffsetSpecError("commit_offsets needs a non-empty group_id.")
    wanted = {(r.topic, r.partition): r.stop for r in offset_ranges}
    if not wanted:
        return {}
    admin = admin_client(kafka_config)
    try:
        description = admin.describe_consumer_groups([group_id], request_timeout=timeout)[
            group_id
        ].result(timeout=timeout)
    except KafkaException as exc:
        raise CommitError(f"could not describe consumer group {group_id!r}: {exc}.") from None
    if description.members:
        raise CommitError(
            f"consumer group {group_id!r} has {len(description.members)} active member(s) "
            f"(state {description.state}); a running consumer owns the group's offsets. Stop it "
            "or use a group_id that only this pipeline uses."
        )
    request = ConsumerGroupTopicPartitions(
        group_id, [TopicPartition(t, p, offset) for (t, p), offset in sorted(wanted.items())]
    )
    try:
        result = admin.alter_consumer_group_offsets([request], request_timeout=timeout)[
            group_id
        ].result(timeout=timeout)
    except KafkaException as exc:
        raise CommitError(f"committing offsets for group {group_id!r} failed: {exc}.") from None
    failed = [f"{tp.topic}/{tp.partition}: {tp.error}" for tp in result.topic_partitions
              if tp.error is not None]
    if failed:
        raise CommitError(f"committing offsets for group {group_id!r} failed for {failed}.")
    return wanted


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
        latest = lookup.offsets("latest")
        found = lookup.offsets(spec.millis)
        # -1: no record at or after T (the broker also answers -1 past the LSO / HW).
        return {k: latest[k] if found[k] < 0 else min(found[k], latest[k]) for k in partitions}
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
            f"{role} offsets name partitions that are not subscribed or do not exist: {unknown}."
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
            f"{'; '.join(beyond[:50])}."
        )
    return {k: spec.offsets[k] if k in spec.offsets else defaults[k] for k in partitions}


def _is_retriable(exc: KafkaException) -> bool:
    error = exc.args[0]
    return bool(error.retriable()) or error.code() in _TRANSIENT_CODES


class _OffsetLookup:
    """Answers offset questions for a fixed partition list, one batched request per kind."""

    def __init__(self, admin: AdminClient, partitions: list[Key], isolation_level: str,
                 deadline: float) -> None:
        self.admin = admin
        self.partitions = partitions
        self.isolation_level = isolation_level
        self.deadline = deadline
        self._cache: dict[str | int, dict[Key, int]] = {}

    def _remaining(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise OffsetResolutionError("resolving offsets timed out; raise timeout= or check "
                                        "the cluster's health.")
        return remaining

    def offsets(self, kind: str | int) -> dict[Key, int]:
        """``kind`` is ``"earliest"``, ``"latest"`` or a timestamp in epoch millis.

        One batched request for all partitions; partitions answering with a retriable error
        (e.g. no leader yet, right after topic creation) are asked again until the deadline.
        """
        if kind not in self._cache:
            spec = (KafkaOffsetSpec.earliest() if kind == "earliest"
                    else KafkaOffsetSpec.latest() if kind == "latest"
                    else KafkaOffsetSpec.for_timestamp(int(kind)))
            level = (IsolationLevel.READ_COMMITTED if self.isolation_level == "read_committed"
                     else IsolationLevel.READ_UNCOMMITTED)
            found: dict[Key, int] = {}
            pending = self.partitions
            while pending:
                futures = self.admin.list_offsets(
                    {TopicPartition(t, p): spec for t, p in pending},
                    isolation_level=level,
                    request_timeout=self._remaining(),
                )
                retry: list[Key] = []
                for tp, future in futures.items():
                    key = (tp.topic, tp.partition)
                    try:
                        found[key] = future.result(timeout=self._remaining()).offset
                    except KafkaException as exc:
                        if not _is_retriable(exc):
                            raise OffsetResolutionError(
                                f"list_offsets({kind}) failed for {key[0]}/{key[1]}: {exc}."
                            ) from None
                        retry.append(key)
                pending = sorted(retry)
                if pending:
                    time.sleep(min(0.2, self._remaining()))
            self._cache[kind] = found
        return self._cache[kind]

    def committed(self, group_id: str) -> dict[Key, int]:
        """The group's committed offsets; partitions without one are absent."""
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p) for t, p in self.partitions]
        )
        futures = self.admin.list_consumer_group_offsets(
            [request], require_stable=True, request_timeout=self._remaining()
        )
        result = self._result(futures[group_id], f"committed offsets of group {group_id!r}")
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions
            if tp.error is None and tp.offset != _NO_COMMITTED_OFFSET and tp.offset >= 0
        }

    def _result(self, future: Future[Any], what: str) -> Any:
        try:
            return future.result(timeout=self._remaining())
        except KafkaException as exc:
            raise OffsetResolutionError(f"{what} failed: {exc}.") from None
        except TimeoutError:
            raise OffsetResolutionError(f"{what} did not answer in time.") from None
