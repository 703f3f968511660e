"""Consumer-group offsets: read a group's committed offsets, and commit ranges' stops to a
group, never moving it backwards.

Group offsets go through a consumer that never joins the group (:class:`GroupOffsets`); every
partition is checked against the cluster before any is committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import (
    CommitError,
    ConfigurationError,
    OffsetResolutionError,
)
from airflow_provider_kafka_spark.offsets.cluster import (
    Key,
    OffsetLookup,
    admin_client,
    cluster_failure,
    partition_counts,
    retry_transient,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig, check_timeout, new_client
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.offsets.specs import shown

log = logging.getLogger(__name__)

# The broker refuses a commit from outside the group while the group has members.
_ACTIVE_GROUP_CODES = frozenset({
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.STALE_MEMBER_EPOCH,
})

_COMMIT_HELP = ("Check the group id and that this client may describe the group and commit "
                "its offsets (ACLs).")


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
    kafka_config: KafkaConfig | Mapping[str, Any],
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
    kafka_config = KafkaConfig.of(kafka_config)
    admin, cluster = admin_client(kafka_config), kafka_config.cluster
    try:
        _check_commit_partitions(admin, cluster, wanted, offset_ranges.isolation_level,
                                 deadline, group_id)
    except OffsetResolutionError as exc:
        raise CommitError(str(exc)) from None

    try:
        current = committed_offsets(kafka_config, group_id, sorted(wanted), deadline)
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
    counts = partition_counts(admin, cluster, max(deadline - time.monotonic(), 0.001))
    bad: dict[Key, str] = {}
    for topic, partition in wanted:
        if topic not in counts:
            bad[(topic, partition)] = "no such topic"
        elif partition >= counts[topic]:
            bad[(topic, partition)] = (f"no such partition (the topic has partitions "
                                       f"0..{counts[topic] - 1})")
    present = sorted(k for k in wanted if k not in bad)
    if present:
        latest = OffsetLookup(admin, cluster, present, isolation_level, deadline).offsets(
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


def committed_offsets(kafka_config: KafkaConfig, group_id: str, partitions: list[Key],
                      deadline: float) -> dict[Key, int]:
    """The committed offsets of ``group_id`` on ``partitions``; partitions without one are
    absent. Transient coordinator errors are retried until ``deadline``
    (``time.monotonic()``).

    Raises:
        OffsetResolutionError: the cluster did not answer by ``deadline``, or refused.
    """
    what = f"reading the committed offsets of group {group_id!r}"
    topic_partitions = [TopicPartition(t, p) for t, p in partitions]
    otherwise = ("Check the group id and that this client may describe the group and its "
                 "topics (ACLs).")
    with GroupOffsets(kafka_config, group_id) as group:
        try:
            result = retry_transient(lambda wait: group.committed(topic_partitions, wait), what,
                                     deadline)
        except KafkaException as exc:
            raise cluster_failure(exc.args[0], what, kafka_config.cluster, otherwise,
                                  OffsetResolutionError) from None
    return {(tp.topic, tp.partition): tp.offset for tp in result if tp.offset >= 0}


class GroupOffsets:
    """Reads and commits the offsets of ``group_id`` through a consumer that never joins the
    group (a context manager; the consumer is closed on exit).

    Group offsets go through librdkafka's consumer, which follows a coordinator that moves;
    the admin API's group requests can abort the whole process when one times out while the
    coordinator's broker is down (librdkafka issue #4605).

    Raises:
        ConfigurationError: a config that librdkafka refuses.
    """

    def __init__(self, kafka_config: KafkaConfig, group_id: str) -> None:
        self._answers: list[tuple[KafkaError | None, list[TopicPartition]]] = []
        config = kafka_config.consumer(isolation_level="read_committed", group_id=group_id)
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
