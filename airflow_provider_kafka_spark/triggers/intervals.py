"""An event trigger for Airflow's asset watchers: one event per complete interval of Kafka
topics, in order, exactly the intervals a scheduled DAG with the interval-complete sensor
would read, each announced once its data is complete instead of at a fixed time.

:class:`KafkaIntervalEventTrigger` runs in the triggerer for as long as a DAG is scheduled on
its asset (:func:`airflow_provider_kafka_spark.assets.kafka_interval_asset`). It walks a grid of
intervals (:class:`IntervalGrid`: every ``timedelta`` since the Unix epoch, or a cron
expression in a time zone) and, for the next interval ``[start, end)``:

1. waits until the triggerer's clock passes ``end`` (an interval is never announced before it
   ends, as a scheduled run never starts before its data interval ends);
2. checks, every ``poll_interval`` seconds, whether it is complete by
   :func:`~airflow_provider_kafka_spark.offsets.completeness.check_interval_complete`, the
   check of :class:`~airflow_provider_kafka_spark.sensors.KafkaIntervalCompleteSensor`: a
   record or transaction marker stamped ``>= end`` below the last stable offset of every
   partition (an open transaction that began before it holds the interval back however old it
   is), or, with ``idle_timeout``, a partition quiet for that long;
3. yields one event whose payload is the
   :class:`~airflow_provider_kafka_spark.offsets.intervals.Announcement` of the interval
   (``start``, ``end`` and their epoch millis; Airflow turns it into an asset event with
   ``extra={"from_trigger": True, "payload": {...}}``), and, :data:`HANDOFF_S` later, records
   ``end`` as its position (:mod:`~airflow_provider_kafka_spark.offsets.intervals`);
4. goes on with the next interval at once: after an outage it announces every interval that
   completed meanwhile, one at a time.

**First start.** A watcher without a recorded position (its name never ran) starts with the
interval that contains ``start``, or, without ``start``, the interval in progress at that
moment, and records it before anything else: it never announces the history before it. Later
starts (a triggerer restart, a DAG file edited) resume at the recorded position, whatever
``start`` says then.

**Errors.** Bad arguments (a zero or negative interval, a cron expression that never fires, an
unknown time zone, no subscription) are a ``ConfigurationError`` when the trigger is built,
i.e. when the DAG file is parsed: an import error in the UI. A subscription the cluster does not
have (an unknown topic, a pattern matching nothing) or a connection that cannot be used is found
when the trigger runs: it then announces an error event (payload ``status: "error"``, the
message; the asset's events in the UI show it, and the runs it starts fail with it, see
:class:`~airflow_provider_kafka_spark.operators.KafkaResolveOffsetsOperator`), once per
distinct error, and checks again every ``poll_interval``; once the topics exist it announces
intervals from its position. A cluster that does not answer is waited for, logged, never
announced.

Blocking Kafka calls run in worker threads (``asyncio.to_thread``); the triggerer's event loop
never blocks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from croniter import CroniterBadDateError, croniter

from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    InternalTopicError,
    OffsetResolutionError,
    OffsetSpecError,
)
from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.offsets.cluster import cluster_admin, partition_counts
from airflow_provider_kafka_spark.offsets.completeness import (
    check_idle_timeout,
    check_interval_complete,
)
from airflow_provider_kafka_spark.offsets.intervals import (
    HANDOFF_S,
    WATCHERS_TOPIC,
    Announcement,
    Interval,
    WatcherPosition,
    iso_millis,
    read_position,
    record_position,
)
from airflow_provider_kafka_spark.offsets.specs import Timestamp, parse_offset_spec
from airflow_provider_kafka_spark.options import (
    bad_argument,
    check_seconds,
    check_text,
    check_topic_name,
)
from airflow_provider_kafka_spark.triggers.kafka import KafkaBaseTrigger

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CLUSTER_TIMEOUT_S = 30.0
"""How long each cluster call of the watcher waits for an answer."""


@dataclass(frozen=True)
class IntervalGrid:
    """Where intervals begin and end: every ``every_ms`` milliseconds since the Unix epoch
    (UTC), or at each fire time of the cron expression ``cron`` in ``timezone``. Interval
    ``k`` is ``[boundary k, boundary k+1)``."""

    every_ms: int | None = None
    cron: str | None = None
    timezone: str = "UTC"

    def next_after(self, millis: int) -> int:
        """The first boundary strictly after ``millis``."""
        if self.every_ms is not None:
            return (millis // self.every_ms + 1) * self.every_ms
        assert self.cron is not None
        moment = _EPOCH + timedelta(milliseconds=millis)
        nxt = croniter(self.cron, moment.astimezone(ZoneInfo(self.timezone))).get_next(datetime)
        return _millis(nxt)

    def floor(self, millis: int) -> int:
        """The start of the interval that contains ``millis`` (the last boundary ``<= millis``)."""
        if self.every_ms is not None:
            return millis - millis % self.every_ms
        assert self.cron is not None
        nxt = _EPOCH + timedelta(milliseconds=self.next_after(millis))
        prev = croniter(self.cron, nxt.astimezone(ZoneInfo(self.timezone))).get_prev(datetime)
        return _millis(prev)

    @property
    def every(self) -> float | str:
        """The ``every`` argument that builds this grid again: seconds, or the cron text."""
        return self.every_ms / 1000 if self.every_ms is not None else str(self.cron)

    @property
    def label(self) -> str:
        """``PT1H``-style ISO-8601 duration, or the cron expression."""
        if self.every_ms is None:
            return str(self.cron)
        days, rest = divmod(self.every_ms, 86_400_000)
        hours, rest = divmod(rest, 3_600_000)
        minutes, rest = divmod(rest, 60_000)
        seconds = f"{rest / 1000:g}S" if rest else ""
        time_part = "".join(f"{n}{u}" for n, u in ((hours, "H"), (minutes, "M")) if n) + seconds
        return "P" + (f"{days}D" if days else "") + (f"T{time_part}" if time_part else "")

    def __str__(self) -> str:
        if self.every_ms is not None:
            return f"every {self.label} since 1970-01-01T00:00:00Z"
        return f"cron {self.cron!r} in {self.timezone}"


def _millis(moment: datetime) -> int:
    delta = moment - _EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def interval_grid(owner: str, every: Any, timezone: Any = "UTC") -> IntervalGrid:
    """The grid of ``every`` (a positive ``timedelta`` or number of seconds, whole
    milliseconds, at least one second; or a cron expression / preset such as ``"0 * * * *"``
    or ``"@daily"``) in ``timezone`` (an IANA name; a ``timedelta`` grid is in UTC).

    Raises:
        ConfigurationError: anything else, naming ``owner``.
    """
    zone = check_text(owner, "timezone", timezone, meaning="an IANA time zone name, e.g. 'UTC' "
                                                          "or 'Europe/Paris'")
    assert zone is not None
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise bad_argument(owner, "timezone", timezone, "pass an IANA time zone name, e.g. "
                                                         "'UTC' or 'Europe/Paris'") from None
    if isinstance(every, str):
        cron = every.strip()
        expected = ("pass a cron expression (five fields, e.g. '0 * * * *' for hourly) or a "
                    "preset such as '@daily', or a timedelta")
        if not croniter.is_valid(cron):
            raise bad_argument(owner, "every", every, expected, "is not a cron expression")
        grid = IntervalGrid(cron=cron, timezone=zone)
        try:
            grid.floor(int(time.time() * 1000))
        except CroniterBadDateError:
            raise bad_argument(owner, "every", every, expected, "never fires") from None
        return grid
    seconds = check_seconds(owner, "every", every, example=3600,
                            meaning="the length of each interval; or a cron expression")
    assert seconds is not None
    millis = round(seconds * 1000)
    if millis < 1000 or abs(millis - seconds * 1000) > 1e-6:
        raise bad_argument(owner, "every", every, "pass at least one second, in whole "
                                                  "milliseconds, e.g. every=timedelta(hours=1)")
    if zone != "UTC":
        raise bad_argument(owner, "timezone", timezone,
                           "a timedelta grid counts from the Unix epoch in UTC; for boundaries "
                           "in local time pass a cron expression as every=, e.g. '0 0 * * *'",
                           problem="does not apply to every=timedelta")
    return IntervalGrid(every_ms=millis)


def start_millis(owner: str, start: Any) -> int | None:
    """``start`` (an aware datetime, an ISO-8601 time with zone or ``timestamp:...``; ``None``)
    as epoch milliseconds.

    Raises:
        ConfigurationError: anything else, naming ``owner``.
    """
    if start is None:
        return None
    expected = ("pass an aware datetime or an ISO-8601 time with zone (e.g. "
                "'2024-05-01T00:00:00Z'), or None for the interval in progress at the first start")
    try:
        if isinstance(start, datetime):
            return Timestamp.from_datetime(start).millis
        if isinstance(start, str):
            text = start.strip()
            spec = parse_offset_spec(text if text.lower().startswith("timestamp:")
                                     else f"timestamp:{text}")
            if isinstance(spec, Timestamp):
                return spec.millis
    except OffsetSpecError as exc:
        raise bad_argument(owner, "start", start, f"{expected} ({exc})") from None
    raise bad_argument(owner, "start", start, expected)


class KafkaIntervalEventTrigger(KafkaBaseTrigger, BaseEventTrigger):
    """Announce every complete interval of a subscription, in order, once (see the module
    doc): the trigger of a Kafka interval asset's watcher.

    :param watcher: the watcher's name, under which its position is kept (the asset's name):
        a watcher keeps its place as long as its name stays, whatever else changes.
    :param every: the grid: a ``timedelta`` (or seconds) counted from the Unix epoch, at least
        one second; or a cron expression or preset (``"0 * * * *"``, ``"@daily"``).
    :param timezone: the cron expression's time zone (IANA name); ``UTC`` for a ``timedelta``.
    :param start: on the watcher's first start, the first interval is the one containing it;
        ``None`` (default): the interval in progress then. Ignored once a position is recorded.
    :param idle_timeout: a partition without new records for this long (seconds or
        ``timedelta``) counts as complete, as for the sensor; ``None``: never.
    :param state_topic: the compacted topic of the watchers' positions.
    :param kafka_conn_id, topics, topic_pattern, partitions, poll_interval: see
        :class:`~airflow_provider_kafka_spark.triggers.kafka.KafkaBaseTrigger`.
    """

    def __init__(self, *, watcher: str, every: timedelta | float | str, timezone: str = "UTC",
                 start: datetime | str | None = None,
                 idle_timeout: timedelta | float | None = None,
                 state_topic: str = WATCHERS_TOPIC, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        owner = type(self).__name__
        name = check_text(owner, "watcher", watcher,
                          meaning="the watcher's name (the asset's name), e.g. 'orders hourly'")
        assert name is not None
        self.watcher = name
        self.grid = interval_grid(owner, every, timezone)
        self.start_ms = start_millis(owner, start)
        self.idle_timeout = check_idle_timeout(owner, idle_timeout)
        self.state_topic = check_topic_name(owner, "state_topic", state_topic)

    def check_kwargs(self) -> dict[str, Any]:
        return {"watcher": self.watcher, "every": self.grid.every,
                "timezone": self.grid.timezone,
                "start": None if self.start_ms is None else iso_millis(self.start_ms),
                "idle_timeout": self.idle_timeout, "state_topic": self.state_topic}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Announce intervals forever (see the module doc)."""
        subscription = str(self.subscription)
        kafka_config: Mapping[str, Any] | None = None
        announced: str | None = None
        while kafka_config is None:
            try:
                kafka_config = await KafkaHook(self.kafka_conn_id).aget_kafka_config()
            except ConfigurationError as exc:
                # Without a config no position can be read or recorded: such an error is
                # announced once per start of the trigger.
                if str(exc) != announced:
                    announced = str(exc)
                    yield self._error_event(announced)
                self.log.error("%s; checking the connection again in %ss", exc,
                               self.poll_interval)
                await asyncio.sleep(self.poll_interval)
        position = await self._start_position(kafka_config)
        while True:
            problem = await self._blocking(self._subscription_problem, kafka_config)
            if problem is _TRANSIENT:
                await asyncio.sleep(self.poll_interval)
                continue
            if problem != position.error:
                if problem is not None:
                    yield self._error_event(str(problem))
                    await asyncio.sleep(HANDOFF_S)
                else:
                    self.log.info("%s: the earlier error is gone", self.watcher)
                position = WatcherPosition(position.next_start_ms,
                                           None if problem is None else str(problem))
                await self._record(kafka_config, position)
            if problem is not None:
                self.log.error("%s cannot announce intervals: %s (checking again in %ss)",
                               self.watcher, problem, self.poll_interval)
                await asyncio.sleep(self.poll_interval)
                continue
            interval = Interval(position.next_start_ms,
                                self.grid.next_after(position.next_start_ms))
            wait_ms = interval.end_ms - int(time.time() * 1000)
            if wait_ms > 0:
                self.log.info("Next interval %s of %s: complete at the earliest when it ends, "
                              "in %.1fs", interval, subscription, wait_ms / 1000)
                await asyncio.sleep(wait_ms / 1000)
                continue
            check = await self._blocking(check_interval_complete, kafka_config,
                                         self.subscription, interval.end_ms, self.idle_timeout,
                                         timeout=CLUSTER_TIMEOUT_S)
            if check is _TRANSIENT or not check.done:
                if check is not _TRANSIENT:
                    self.log.info("Interval %s not complete: %s", interval, check.waiting_for)
                await asyncio.sleep(self.poll_interval)
                continue
            announcement = Announcement(self.watcher, subscription, interval,
                                        idle=tuple((t, p) for t, p in check.payload["idle"]))
            yield TriggerEvent(announcement.to_payload())
            self.log.info("Announced %s of %s (partitions complete by idleness: %s); recording "
                          "the position in %ss", interval, subscription,
                          check.payload["idle"] or "none", HANDOFF_S)
            await asyncio.sleep(HANDOFF_S)
            position = WatcherPosition(interval.end_ms)
            await self._record(kafka_config, position)

    def _error_event(self, message: str) -> TriggerEvent:
        text = (f"the watcher {self.watcher!r} of {self.subscription} announces nothing: "
                f"{message} It checks again every {self.poll_interval:g}s and announces the "
                "intervals once this is fixed.")
        self.log.error("%s", text)
        return TriggerEvent(Announcement(self.watcher, str(self.subscription),
                                         error=text).to_payload())

    def _subscription_problem(self, kafka_config: Mapping[str, Any]) -> str | None:
        """Why the cluster does not have the subscription (an unknown topic, a pattern
        matching nothing), or ``None``. Raises ``OffsetResolutionError`` when the cluster does
        not answer."""
        try:
            admin, cluster = cluster_admin(kafka_config)
            counts = partition_counts(admin, cluster, CLUSTER_TIMEOUT_S)
        except ConfigurationError as exc:  # a config librdkafka refuses, credentials refused
            return str(exc)
        try:
            self.subscription.select(counts)
        except OffsetResolutionError as exc:
            return str(exc)
        return None

    async def _blocking(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in a worker thread; :data:`_TRANSIENT` (logged) when
        the cluster did not answer."""
        try:
            return await asyncio.to_thread(function, *args, **kwargs)
        except (OffsetResolutionError, InternalTopicError) as exc:
            self.log.warning("%s: the cluster did not answer (%s); trying again in %ss",
                             self.watcher, exc, self.poll_interval)
            return _TRANSIENT

    async def _start_position(self, kafka_config: Mapping[str, Any]) -> WatcherPosition:
        """The recorded position; on the first start, the anchor (recorded first)."""
        while True:
            try:
                found = await asyncio.to_thread(read_position, kafka_config, self.watcher,
                                                topic=self.state_topic,
                                                timeout=CLUSTER_TIMEOUT_S)
            except (InternalTopicError, ConfigurationError) as exc:
                self.log.warning("%s: cannot read its position (%s); trying again in %ss",
                                 self.watcher, exc, self.poll_interval)
                await asyncio.sleep(self.poll_interval)
                continue
            if found is not None:
                self.log.info("%s resumes at %s (%s)", self.watcher,
                              iso_millis(found.next_start_ms), self.grid)
                return found
            origin = self.start_ms if self.start_ms is not None else int(time.time() * 1000)
            anchor = WatcherPosition(self.grid.floor(origin))
            self.log.info("%s starts for the first time: the first interval announced starts at "
                          "%s (%s)", self.watcher, iso_millis(anchor.next_start_ms), self.grid)
            await self._record(kafka_config, anchor)
            return anchor

    async def _record(self, kafka_config: Mapping[str, Any], position: WatcherPosition) -> None:
        """Record ``position``, trying again every ``poll_interval`` until it is recorded
        (nothing is announced meanwhile)."""
        while True:
            try:
                await asyncio.to_thread(record_position, kafka_config, self.watcher, position,
                                        topic=self.state_topic, timeout=CLUSTER_TIMEOUT_S)
                return
            except (InternalTopicError, ConfigurationError) as exc:
                self.log.warning("%s: cannot record its position %s (%s); trying again in %ss",
                                 self.watcher, iso_millis(position.next_start_ms), exc,
                                 self.poll_interval)
                await asyncio.sleep(self.poll_interval)


class _Transient:
    def __repr__(self) -> str:
        return "<the cluster did not answer>"


_TRANSIENT: Any = _Transient()
