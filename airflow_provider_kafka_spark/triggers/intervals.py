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
   (``start``, ``end``, their epoch millis and ``partition_key``; Airflow turns it into an
   asset event with ``extra={"from_trigger": True, "payload": {...}}``), and once Airflow has
   stored that event, records ``end`` as its position
   (:mod:`~airflow_provider_kafka_spark.offsets.intervals`);
4. goes on with the next interval: after an outage it announces every interval that completed
   meanwhile, one at a time, each once the previous one is stored.

**Stored, then recorded.** Airflow 3.3's triggerer tells a trigger that one of its events is
stored in the metadata database only through a shared stream in ack mode
(:mod:`airflow.triggers.shared_stream`): the trigger's
:meth:`~KafkaIntervalEventTrigger.create_shared_stream_producer` yields raw events, its
:meth:`~KafkaIntervalEventTrigger.filter_shared_stream` turns them into trigger events, and the
producer's ``advance`` is called once the supervisor has committed them
(``Trigger.submit_event``). The watcher's loop (:class:`_Announcer`) is that producer: its
position moves past an announcement in ``advance`` and nowhere else. A triggerer that dies
before the event is stored, however long storing takes, leaves the position before it: the
next triggerer announces the interval again (a second announcement of a stored one is claimed
away by the runs). If the triggerer gives up waiting (``[triggerer]
shared_stream_ack_timeout``, 300 s by default), the trigger fails and Airflow starts it again
from its position.

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
import json
import time
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamManager, SharedStreamProducer
from croniter import CroniterBadDateError, croniter

from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    InternalTopicError,
    KafkaSparkError,
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
    doc): the trigger of a Kafka interval asset's watcher. It runs as a shared stream in ack
    mode (:mod:`airflow.triggers.shared_stream`): its :class:`_Announcer` moves the watcher's
    position past an announcement only once Airflow has stored the event.

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
        if not hasattr(SharedStreamManager, "confirm_persisted"):
            raise ConfigurationError(
                f"{owner}: the installed Airflow's triggerer does not tell a shared stream that "
                "its events are stored (airflow.triggers.shared_stream has no "
                "SharedStreamManager.confirm_persisted), which the watcher needs to never lose "
                "an interval. Upgrade apache-airflow (3.3.2 has it).")
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

    def shared_stream_key(self) -> Hashable:
        """One stream per trigger: its class and arguments."""
        classpath, kwargs = self.serialize()
        return classpath, json.dumps(kwargs, sort_keys=True)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SharedStreamProducer:
        """The watcher's loop (:class:`_Announcer`), for the triggerer's shared stream in ack
        mode."""
        return _Announcer(cls(**kwargs))

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        """One event per announcement payload of the stream."""
        async for payload in shared_stream:
            # Airflow 3.3 stores an event from a trigger without a partition key: the key rides
            # in the payload (``partition_key``) until a TriggerEvent can carry one.
            yield TriggerEvent(payload)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Not used: Airflow's triggerer runs this trigger as a shared stream (see
        :meth:`filter_shared_stream`), the only way it learns that an event is stored."""
        raise ConfigurationError(
            f"{type(self).__name__} runs in Airflow's triggerer as a shared stream in ack mode "
            "(Airflow 3.3 or later), which tells it when an event is stored; run() is not used. "
            "Schedule a DAG on kafka_interval_asset(...) instead of calling run().")
        yield  # pragma: no cover  (an async generator)


@dataclass(frozen=True)
class _Handoff:
    """What an announcement hands to :meth:`_Announcer.advance`: what it announced and the
    position to record once Airflow has stored it (``None``: none to record)."""

    what: str
    position: WatcherPosition | None


class _Announcer(SharedStreamProducer):
    """The watcher's loop (see the module doc): yields each announcement with its
    :class:`_Handoff`, then waits until Airflow has stored the event, which the triggerer
    tells :meth:`advance`; that records the new position and lets the loop go on. So at most
    one announcement is in flight, and a position never passes an event Airflow has not
    stored, however long storing takes."""

    def __init__(self, trigger: KafkaIntervalEventTrigger) -> None:
        self.trigger = trigger
        self.log = trigger.log
        self.kafka_config: Mapping[str, Any] | None = None
        self.stored = asyncio.Event()

    async def open_stream(self) -> AsyncIterator[tuple[dict[str, Any], _Handoff]]:
        async for payload, handoff in self._announcements():
            self.stored.clear()
            yield payload, handoff
            await self.stored.wait()

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Record the positions of the announcements Airflow has stored, in order.

        Raises:
            KafkaSparkError: an announcement was not stored (the triggerer gave up waiting, see
                ``[triggerer] shared_stream_ack_timeout``): the trigger fails and Airflow starts
                it again, from the position recorded before that announcement.
        """
        for item in batch:
            handoff: _Handoff = item.broker_payload
            if not item.outcome.is_clean:
                raise KafkaSparkError(
                    f"{self.trigger.watcher}: Airflow did not confirm that it stored the "
                    f"announcement of {handoff.what} ({item.outcome}); the watcher starts again "
                    "from its recorded position and announces it again.")
            if handoff.position is not None:
                assert self.kafka_config is not None
                await self._record(self.kafka_config, handoff.position)
                self.log.info("Airflow stored the announcement of %s: %s now stands at %s",
                              handoff.what, self.trigger.watcher,
                              iso_millis(handoff.position.next_start_ms))
        self.stored.set()

    async def _announcements(self) -> AsyncIterator[tuple[dict[str, Any], _Handoff]]:
        """Announce intervals forever (see the module doc); each is yielded once the previous
        one is stored."""
        trigger = self.trigger
        subscription = str(trigger.subscription)
        announced: str | None = None
        while self.kafka_config is None:
            try:
                self.kafka_config = await KafkaHook(trigger.kafka_conn_id).aget_kafka_config()
            except ConfigurationError as exc:
                # Without a config no position can be read or recorded: such an error is
                # announced once per start of the trigger.
                if str(exc) != announced:
                    announced = str(exc)
                    yield self._error_payload(announced), _Handoff("an error", None)
                self.log.error("%s; checking the connection again in %ss", exc,
                               trigger.poll_interval)
                await asyncio.sleep(trigger.poll_interval)
        kafka_config = self.kafka_config
        position = await self._start_position(kafka_config)
        while True:
            problem = await self._blocking(self._subscription_problem, kafka_config)
            if problem is _TRANSIENT:
                await asyncio.sleep(trigger.poll_interval)
                continue
            if problem != position.error:
                position = WatcherPosition(position.next_start_ms,
                                           None if problem is None else str(problem))
                if problem is not None:
                    yield self._error_payload(str(problem)), _Handoff("an error", position)
                else:
                    self.log.info("%s: the earlier error is gone", trigger.watcher)
                    await self._record(kafka_config, position)
            if problem is not None:
                self.log.error("%s cannot announce intervals: %s (checking again in %ss)",
                               trigger.watcher, problem, trigger.poll_interval)
                await asyncio.sleep(trigger.poll_interval)
                continue
            interval = Interval(position.next_start_ms,
                                trigger.grid.next_after(position.next_start_ms))
            wait_ms = interval.end_ms - int(time.time() * 1000)
            if wait_ms > 0:
                self.log.info("Next interval %s of %s: complete at the earliest when it ends, "
                              "in %.1fs", interval, subscription, wait_ms / 1000)
                await asyncio.sleep(wait_ms / 1000)
                continue
            check = await self._blocking(check_interval_complete, kafka_config,
                                         trigger.subscription, interval.end_ms,
                                         trigger.idle_timeout, timeout=CLUSTER_TIMEOUT_S)
            if check is _TRANSIENT or not check.done:
                if check is not _TRANSIENT:
                    self.log.info("Interval %s not complete: %s", interval, check.waiting_for)
                await asyncio.sleep(trigger.poll_interval)
                continue
            announcement = Announcement(trigger.watcher, subscription, interval,
                                        idle=tuple((t, p) for t, p in check.payload["idle"]))
            position = WatcherPosition(interval.end_ms)
            self.log.info("Announced %s of %s (partitions complete by idleness: %s); the "
                          "position moves once Airflow has stored the event", interval,
                          subscription, check.payload["idle"] or "none")
            yield announcement.to_payload(), _Handoff(str(interval), position)

    def _error_payload(self, message: str) -> dict[str, Any]:
        trigger = self.trigger
        text = (f"the watcher {trigger.watcher!r} of {trigger.subscription} announces nothing: "
                f"{message} It checks again every {trigger.poll_interval:g}s and announces the "
                "intervals once this is fixed.")
        self.log.error("%s", text)
        return Announcement(trigger.watcher, str(trigger.subscription), error=text).to_payload()

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
            self.trigger.subscription.select(counts)
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
                             self.trigger.watcher, exc, self.trigger.poll_interval)
            return _TRANSIENT

    async def _start_position(self, kafka_config: Mapping[str, Any]) -> WatcherPosition:
        """The recorded position; on the first start, the anchor (recorded first)."""
        trigger = self.trigger
        while True:
            try:
                found = await asyncio.to_thread(read_position, kafka_config, trigger.watcher,
                                                topic=trigger.state_topic,
                                                timeout=CLUSTER_TIMEOUT_S)
            except (InternalTopicError, ConfigurationError) as exc:
                self.log.warning("%s: cannot read its position (%s); trying again in %ss",
                                 trigger.watcher, exc, trigger.poll_interval)
                await asyncio.sleep(trigger.poll_interval)
                continue
            if found is not None:
                self.log.info("%s resumes at %s (%s)", trigger.watcher,
                              iso_millis(found.next_start_ms), trigger.grid)
                return found
            origin = trigger.start_ms if trigger.start_ms is not None \
                else int(time.time() * 1000)
            anchor = WatcherPosition(trigger.grid.floor(origin))
            self.log.info("%s starts for the first time: the first interval announced starts at "
                          "%s (%s)", trigger.watcher, iso_millis(anchor.next_start_ms),
                          trigger.grid)
            await self._record(kafka_config, anchor)
            return anchor

    async def _record(self, kafka_config: Mapping[str, Any], position: WatcherPosition) -> None:
        """Record ``position``, trying again every ``poll_interval`` until it is recorded
        (nothing is announced meanwhile)."""
        trigger = self.trigger
        while True:
            try:
                await asyncio.to_thread(record_position, kafka_config, trigger.watcher,
                                        position, topic=trigger.state_topic,
                                        timeout=CLUSTER_TIMEOUT_S)
                return
            except (InternalTopicError, ConfigurationError) as exc:
                self.log.warning("%s: cannot record its position %s (%s); trying again in %ss",
                                 trigger.watcher, iso_millis(position.next_start_ms), exc,
                                 trigger.poll_interval)
                await asyncio.sleep(trigger.poll_interval)


class _Transient:
    def __repr__(self) -> str:
        return "<the cluster did not answer>"


_TRANSIENT: Any = _Transient()
