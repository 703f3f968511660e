"""Complete intervals announced once each: what an announcement says, where its watcher
stands, and which run reads each announced interval. No Airflow and no Spark: confluent-kafka
only.

An *interval watcher* (in Airflow: the trigger of a Kafka interval asset,
:mod:`airflow_provider_kafka_spark.triggers.intervals`) walks a grid of intervals
``[start, end)`` in order and announces each one once it is complete by
:func:`~airflow_provider_kafka_spark.offsets.completeness.check_interval_complete`, the rule
of the interval-complete sensor. Three things make that exact:

**The announcement** (:class:`Announcement`): a JSON payload with the watcher's name, its
subscription and the interval's bounds (or, for a watcher that cannot start, the error), and
the interval's start as ``partition_key`` (:func:`partition_key`). The runs it starts read the
bounds back with :meth:`Announcement.from_payload`.

**The watcher's position** (:func:`read_position`, :func:`record_position`): the start of the
next interval to announce, kept under the watcher's name in the compacted topic
``_kafka_spark_watchers`` (:data:`WATCHERS_TOPIC`; one partition, created on first use with
hourly segments so that compaction keeps about one record per watcher: reading it costs the
number of watchers plus the last hour or so of announcements, never the history). It is
recorded when the watcher first starts (its anchor, so a crash before the first announcement
changes nothing) and after each announcement. A watcher that restarts, after a crash or an
outage of any length, resumes at its position: every interval that completed meanwhile is
announced, in order.

*Ordering.* The announcement goes first, the new position is recorded after it, once Airflow
has stored the event (in the trigger: when Airflow's triggerer confirms it, never on a timer).
A crash between the two announces that interval a second time on restart; the reverse order
could skip it forever (recorded, but the event lost with the crashed process). So an interval
is announced **at least once**, and a second announcement is made harmless by the claims.

**Claims** (:func:`claim_intervals`): before a run started by announcements resolves, it
claims each announced interval for its task in the pins topic; the first claim of an interval
in the log wins (the pattern of the runs' boundaries in
:mod:`~airflow_provider_kafka_spark.offsets.runs`). A second announcement of an interval
(after such a crash, or from a second triggerer during a takeover) starts a run that finds the
interval claimed by the first run and reads nothing; two such runs racing both find the same
winner. A retry or a clear of the winning run finds its own claim. Lookups are bounded like
the boundaries': a claim of ``[S, E)`` is looked for in what the pins partition received since
``min(S, since) - PIN_MARGIN``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_kafka_spark.errors import ConfigurationError, InternalTopicError
from airflow_provider_kafka_spark.offsets.cluster import Key, admin_client
from airflow_provider_kafka_spark.offsets.completeness import iso_millis
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.internal_topics import (
    durable_producer,
    ensure_compacted_topic,
    partition_for,
    produce_durably,
    read_partition,
)
from airflow_provider_kafka_spark.offsets.pins import PINS_PARTITIONS, PINS_TOPIC, RunKey, read_start
from airflow_provider_kafka_spark.offsets.subscription import INTERNAL_TOPIC_PREFIX

WATCHERS_TOPIC = f"{INTERNAL_TOPIC_PREFIX}watchers"
"""The default compacted topic of the watchers' positions."""

WATCHERS_TOPIC_CONFIG = {"segment.ms": str(60 * 60 * 1000)}
"""Hourly segments: the broker compacts closed segments only, so short ones keep the topic at
about one record per watcher (a default segment stays open for a week)."""

PAYLOAD_KEY = "kafka_spark_interval"
"""The key that marks an event payload as an :class:`Announcement` (its value: the format
version)."""

PARTITION_KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"
"""How an announcement names its interval as a partition key: the start in UTC, in the format
of the default ``key_format`` of Airflow's ``CronPartitionTimetable``."""

_PAYLOAD_VERSION = 1
_POSITION_VERSION = 1
_CLAIM_VERSION = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, order=True)
class Interval:
    """``[start_ms, end_ms)`` in epoch milliseconds (UTC); ``start_ms < end_ms``."""

    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        for name in ("start_ms", "end_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"Interval: {name}={value!r} is not valid; pass epoch "
                                         "milliseconds (a non-negative int).")
        if self.start_ms >= self.end_ms:
            raise ConfigurationError(f"Interval: start_ms={self.start_ms} is not before "
                                     f"end_ms={self.end_ms}; an interval is [start, end).")

    @property
    def start(self) -> datetime:
        return _EPOCH + timedelta(milliseconds=self.start_ms)

    @property
    def end(self) -> datetime:
        return _EPOCH + timedelta(milliseconds=self.end_ms)

    @property
    def label(self) -> str:
        """The start as a compact UTC name for folders and logs, e.g. ``20240501T100000Z``
        (with ``.250`` style milliseconds only when it has some)."""
        text = self.start.strftime("%Y%m%dT%H%M%S")
        millis = self.start_ms % 1000
        return f"{text}{f'.{millis:03d}' if millis else ''}Z"

    def __str__(self) -> str:
        return f"[{iso_millis(self.start_ms)}, {iso_millis(self.end_ms)})"


@dataclass(frozen=True)
class Announcement:
    """What a watcher announces: the complete ``interval`` of ``subscription`` (``idle``: the
    partitions complete only by idleness), or, with ``interval=None``, the ``error`` that keeps
    the watcher from starting (an unknown topic, a refused connection)."""

    watcher: str
    subscription: str
    interval: Interval | None = None
    idle: tuple[Key, ...] = ()
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.interval is None) == (self.error is None):
            raise ConfigurationError("Announcement: pass exactly one of interval= and error=.")

    def to_payload(self) -> dict[str, Any]:
        """The JSON-ready event payload (Airflow keeps it as the asset event's
        ``extra["payload"]``). Airflow 3.3 gives an event from a trigger no partition key, so
        the interval's :func:`partition_key` rides in the payload as ``partition_key``."""
        payload: dict[str, Any] = {PAYLOAD_KEY: _PAYLOAD_VERSION, "watcher": self.watcher,
                                   "subscription": self.subscription}
        if self.interval is None:
            return {**payload, "status": "error", "error": self.error}
        interval = self.interval
        return {**payload, "status": "complete", "start": iso_millis(interval.start_ms),
                "end": iso_millis(interval.end_ms), "start_ms": interval.start_ms,
                "end_ms": interval.end_ms, "partition_key": partition_key(interval),
                "idle": [[t, p] for t, p in self.idle]}

    @classmethod
    def from_payload(cls, payload: Any) -> Announcement | None:
        """The announcement in an event payload; ``None`` when the payload is not one (another
        trigger's event, an event posted by hand).

        Raises:
            ConfigurationError: the payload is marked as an announcement but cannot be read
                (another version of this package wrote it).
        """
        if not isinstance(payload, Mapping) or PAYLOAD_KEY not in payload:
            return None
        try:
            if payload[PAYLOAD_KEY] != _PAYLOAD_VERSION:
                raise ValueError(f"format version {payload[PAYLOAD_KEY]!r}")
            watcher, subscription = str(payload["watcher"]), str(payload["subscription"])
            if payload.get("status") == "error":
                return cls(watcher, subscription, error=str(payload["error"]))
            interval = Interval(int(payload["start_ms"]), int(payload["end_ms"]))
            idle = tuple((str(t), int(p)) for t, p in payload.get("idle") or ())
        except (KeyError, TypeError, ValueError, ConfigurationError) as exc:
            raise ConfigurationError(
                f"an interval announcement cannot be read ({exc}): {json.dumps(payload)[:300]}; "
                "another version of this package announced it. Run the interval with the "
                "Params start and stop instead.") from None
        return cls(watcher, subscription, interval, idle)


def partition_key(interval: Interval) -> str:
    """The partition key naming ``interval``: its start in UTC as
    :data:`PARTITION_KEY_FORMAT`, e.g. ``2024-05-01T10:00:00`` (milliseconds dropped)."""
    return interval.start.strftime(PARTITION_KEY_FORMAT)


@dataclass(frozen=True)
class WatcherPosition:
    """Where a watcher stands: the next interval it announces starts at ``next_start_ms``;
    ``error`` is the error it last announced (``None``: none since it last worked)."""

    next_start_ms: int
    error: str | None = None


def _position_key(watcher: str) -> bytes:
    return json.dumps(["watcher", _POSITION_VERSION, watcher]).encode()


def _watchers_partition(kafka_config: KafkaConfig, key: bytes, topic: str,
                        timeout: float) -> int:
    admin = admin_client(kafka_config)
    partitions = ensure_compacted_topic(admin, topic, partitions=1, timeout=timeout,
                                        config=WATCHERS_TOPIC_CONFIG)
    return partition_for(key.decode(), partitions)


def read_position(kafka_config: KafkaConfig | Mapping[str, Any], watcher: str, *,
                  topic: str = WATCHERS_TOPIC, timeout: float = 30.0) -> WatcherPosition | None:
    """The position last recorded for ``watcher``; ``None`` when it has none (its first
    start). Reads the watchers topic's partition of that name from its log start (see the
    module doc for why that stays small).

    Raises:
        InternalTopicError: the topic could not be created or read, or the record cannot be
            read (another version of this package wrote it).
    """
    key = _position_key(watcher)
    kafka_config = KafkaConfig.of(kafka_config)
    partition = _watchers_partition(kafka_config, key, topic, timeout)
    read = read_partition(kafka_config, topic, partition, keep=lambda k: k == key,
                          timeout=timeout)
    if not read.records or read.records[-1].value is None:
        return None
    record = read.records[-1]
    try:
        value = json.loads(record.value or b"")
        error = value.get("error")
        return WatcherPosition(int(value["next_start_ms"]),
                               None if error is None else str(error))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InternalTopicError(
            f"the position of the watcher {watcher!r} in {topic!r} (offset {record.offset}) "
            f"cannot be read ({exc}): another version of this package wrote it. Delete the "
            "record (a tombstone for its key) to start the watcher afresh.") from None


def record_position(kafka_config: KafkaConfig | Mapping[str, Any], watcher: str,
                    position: WatcherPosition,
                    *, topic: str = WATCHERS_TOPIC, timeout: float = 30.0) -> None:
    """Record ``position`` for ``watcher`` (replacing the last one) durably: returns once every
    in-sync replica has it.

    Raises:
        InternalTopicError: the topic could not be created or written.
    """
    key = _position_key(watcher)
    kafka_config = KafkaConfig.of(kafka_config)
    partition = _watchers_partition(kafka_config, key, topic, timeout)
    value = {"next_start_ms": position.next_start_ms, "next_start": iso_millis(
        position.next_start_ms), "error": position.error}
    reason = produce_durably(durable_producer(kafka_config), topic, partition, key,
                             json.dumps(value).encode(), timeout)
    if reason is not None:
        raise InternalTopicError(f"could not record the position of the watcher {watcher!r} "
                                 f"in {topic!r}: {reason}.")


def claim_intervals(kafka_config: KafkaConfig | Mapping[str, Any], run: RunKey, intervals: Iterable[Interval],
                    *, since: datetime | None = None, topic: str = PINS_TOPIC,
                    timeout: float = 30.0) -> dict[Interval, RunKey]:
    """Claim each of ``intervals`` for ``run``'s task (``dag_id``, ``task_id``, ``map_index``)
    and return the run that holds each claim: ``run`` itself, or the run that claimed it
    first. ``run`` writes a claim only for intervals nobody holds yet, then reads back which
    claim came first in the log.

    ``since``: when the run began (in Airflow its ``run_after``); a claim of ``[S, E)`` is
    looked for in what was written since ``min(S, since) - PIN_MARGIN`` (``None``: from the
    log start).

    Raises:
        InternalTopicError: the pins topic could not be created, read or written, or a claim in
            it cannot be read.
    """
    claims = _Claims(KafkaConfig.of(kafka_config), run, since, topic, timeout)
    wanted = sorted(set(intervals))
    holders = {interval: claims.find(interval) for interval in wanted}
    free = [interval for interval, holder in holders.items() if holder is None]
    if free:
        claims.write(free)
        for interval in free:
            holder = claims.find(interval)
            if holder is None:
                raise InternalTopicError(
                    f"the claim {run} just wrote for {interval} in {topic!r} is not there when "
                    "read back: the topic's records are being deleted. Check its cleanup.policy "
                    "(compact) and retention; retry the task.")
            holders[interval] = holder
    return {interval: holder for interval, holder in holders.items() if holder is not None}


class _Claims:
    """The claim records of one run's task in the pins topic."""

    def __init__(self, kafka_config: KafkaConfig, run: RunKey, since: datetime | None,
                 topic: str, timeout: float) -> None:
        self.kafka_config, self.run, self.since = kafka_config, run, since
        self.topic, self.timeout = topic, timeout
        self.admin = admin_client(kafka_config)
        self.partitions = ensure_compacted_topic(self.admin, topic, partitions=PINS_PARTITIONS,
                                                 timeout=timeout)

    def _prefix(self, interval: Interval) -> str:
        run = self.run
        return json.dumps(["claim", _CLAIM_VERSION, run.dag_id, run.task_id, run.map_index,
                           interval.start_ms, interval.end_ms])

    def find(self, interval: Interval) -> RunKey | None:
        """The run of the first claim of ``interval`` written since the lookup's start."""
        prefix = self._prefix(interval)
        partition = partition_for(prefix, self.partitions)
        since = None if self.since is None else min(self.since, interval.start)
        head = prefix[:-1].encode() + b", "
        read = read_partition(self.kafka_config, self.topic, partition,
                              start_offset=read_start(self.admin, self.topic, partition, since,
                                                      self.timeout),
                              keep=lambda k: k.startswith(head), timeout=self.timeout)
        for record in read.records:
            if record.value is not None:
                try:
                    *_, run_id = json.loads(record.key)
                except (ValueError, TypeError) as exc:
                    raise InternalTopicError(
                        f"a claim of {interval} in {self.topic!r} at offset {record.offset} "
                        f"cannot be read ({exc}): another version of this package wrote it."
                    ) from None
                return RunKey(self.run.dag_id, self.run.task_id, str(run_id),
                              self.run.map_index)
        return None

    def write(self, intervals: Iterable[Interval]) -> None:
        producer = durable_producer(self.kafka_config)
        for interval in intervals:
            prefix = self._prefix(interval)
            key = json.dumps([*json.loads(prefix), self.run.run_id]).encode()
            value = json.dumps({"start": iso_millis(interval.start_ms),
                                "end": iso_millis(interval.end_ms)}).encode()
            reason = produce_durably(producer, self.topic, partition_for(prefix, self.partitions),
                                     key, value, self.timeout)
            if reason is not None:
                raise InternalTopicError(
                    f"could not claim {interval} for {self.run} in {self.topic!r}: {reason}. "
                    "Nothing was read; retry the task.")
