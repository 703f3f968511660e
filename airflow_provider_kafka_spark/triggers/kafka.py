"""Triggers of the deferrable sensors, and the cluster checks the sensors' pokes share.

Each check is a blocking function of a librdkafka config (confluent-kafka has no asyncio
API); a trigger runs it in a worker thread with ``asyncio.to_thread`` so the triggerer's event
loop never blocks. A trigger keeps no state between checks, so running it twice (a triggerer
restart, a second triggerer) gives the same answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from confluent_kafka import IsolationLevel

from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.offsets import (
    KafkaSparkError,
    OffsetResolutionError,
    Subscription,
    admin_client,
    list_partitions,
    timestamp_stops,
)
from airflow_provider_kafka_spark.operators.base import (
    Partitions,
    Topics,
    check_conn_id,
    subscription_from,
    subscription_kwargs,
)
from airflow_provider_kafka_spark.options import bad_argument, check_positive_int, check_seconds

Key = tuple[str, int]


@dataclass(frozen=True)
class Check:
    """The outcome of one check: ``done``, a JSON-ready ``payload``, and, while not done,
    what is still awaited (``waiting_for``, for the task log)."""

    done: bool
    payload: dict[str, Any] = field(default_factory=dict)
    waiting_for: str = ""


def check_partitions(kafka_config: Mapping[str, Any], subscription: Subscription,
                     min_partitions: int, *, timeout: float = 30.0) -> Check:
    """Done when the subscription has at least ``min_partitions`` partitions.

    Unknown topics and a pattern matching nothing count as "not yet" (topic creation is what
    the sensor waits for); the payload's ``partitions`` lists ``[topic, partition]`` pairs.

    Raises:
        ConfigurationError: ``min_partitions`` is not a positive int.
    """
    check_positive_int("check_partitions", "min_partitions", min_partitions, example=3,
                       meaning="how many partitions to wait for")
    try:
        found = list_partitions(kafka_config, subscription, timeout=timeout)
    except OffsetResolutionError as exc:
        return Check(False, waiting_for=str(exc))
    if len(found) < min_partitions:
        return Check(False, waiting_for=(
            f"{subscription} has {len(found)} partition(s), waiting for {min_partitions}."
        ))
    return Check(True, {"partitions": [[t, p] for t, p in found]})


def check_interval_complete(kafka_config: Mapping[str, Any], subscription: Subscription,
                            end_ms: int, idle_timeout: float | None, *,
                            timeout: float = 30.0) -> Check:
    """Done when no record that a ``read_committed`` reader could see with a timestamp before
    ``end_ms`` can still appear below the stop that ``resolve_offsets`` would return for
    ``timestamp:<end_ms>``.

    A partition is complete when a record (or transaction marker) with timestamp ``>= end_ms``
    is below its last stable offset: the stop is final (``timestamp_stops``). A transaction
    still open that began before that point holds the partition back whatever its age, since
    its records may yet be committed inside the interval. With ``idle_timeout`` (seconds), a
    partition without a record ``>= end_ms`` and without an open transaction is also complete
    when it is idle: it has no record, or its newest record is older than ``idle_timeout`` by
    the wall clock (Flink's source idleness, applied to batch completeness; records that arrive
    later with older timestamps fall into a later interval). The payload's ``idle`` lists the
    partitions that were complete only by idleness.

    Raises:
        ConfigurationError: ``idle_timeout`` is not ``None`` or a positive number of seconds
            (a negative one would make every partition idle: complete at once).
    """
    check_seconds("check_interval_complete", "idle_timeout", idle_timeout, allow_none=True,
                  example=600, meaning="how long a partition without new records waits before "
                                       "it counts as idle")
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = admin_client(kafka_config)
    try:
        partitions = list_partitions(admin, subscription, timeout=timeout)
        stops = timestamp_stops(admin, partitions, end_ms, timeout=timeout)
    except OffsetResolutionError as exc:
        return Check(False, waiting_for=str(exc))
    late = {key: (f"has an open transaction from offset {stop.open_transaction} that began "
                  "before the end") for key, stop in stops.items()
            if stop.open_transaction is not None}
    unfinished = [key for key, stop in stops.items()
                  if not stop.final and stop.open_transaction is None]
    newest: dict[Key, int | None] = {}
    if unfinished:
        futures = admin.list_offsets(
            {TopicPartition(t, p): OffsetSpec.max_timestamp() for t, p in unfinished},
            isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout,
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
    not_idle, idle = late_partitions(newest, end_ms, idle_timeout,
                                     now_ms=int(time.time() * 1000))
    late.update(not_idle)
    if late:
        return Check(False, waiting_for=(
            f"{len(late)} of {len(stops)} partition(s) not complete up to {_iso(end_ms)}: "
            + "; ".join(f"{t}/{p} {why}" for (t, p), why in sorted(late.items())[:20])
        ))
    return Check(True, {"end": _iso(end_ms), "idle": [[t, p] for t, p in idle]})


def late_partitions(newest: Mapping[Key, int | None], end_ms: int, idle_timeout: float | None,
                    now_ms: int) -> tuple[dict[Key, str], list[Key]]:
    """Split partitions that hold no record ``>= end_ms`` yet by their newest record timestamp
    (``-1``: empty, ``None``: no answer).

    Returns ``(late, idle)``: ``late`` maps each partition that may still receive records
    before ``end_ms`` to the reason; ``idle`` lists partitions complete only by idleness.
    """
    late: dict[Key, str] = {}
    idle: list[Key] = []
    idle_before = None if idle_timeout is None else now_ms - int(idle_timeout * 1000)
    for key, ts in sorted(newest.items()):
        if ts is None:
            late[key] = "did not answer (no leader yet?)"
        elif ts >= end_ms:
            continue
        elif idle_before is not None and ts < idle_before:
            idle.append(key)
        elif ts < 0:
            late[key] = "has no record yet"
        else:
            late[key] = f"newest record at {_iso(ts)}"
    return late, idle


def _iso(millis: int) -> str:
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class KafkaBaseTrigger(BaseTrigger):
    """Polls :meth:`check` every ``poll_interval`` seconds until it is done.

    Its arguments are checked when it is built (in the worker that defers, and again in the
    triggerer): a bad one is a ``ConfigurationError`` naming the trigger class, the argument,
    the value and what to pass.

    Serializes itself by ``module.qualname`` of its own class, so subclasses only add their
    arguments in :meth:`check_kwargs`. Never serializes the Kafka config: it reads the
    connection ``kafka_conn_id`` in the triggerer.
    """

    def __init__(self, *, kafka_conn_id: str = KafkaHook.default_conn_name,
                 topics: Topics | None = None, topic_pattern: str | None = None,
                 partitions: Partitions | None = None, poll_interval: float = 30.0) -> None:
        super().__init__()
        owner = type(self).__name__
        self.kafka_conn_id = check_conn_id(owner, "kafka_conn_id", kafka_conn_id)
        self.subscription = subscription_from(topics, topic_pattern, partitions, owner=owner)
        self.poll_interval = check_seconds(owner, "poll_interval", poll_interval, example=30,
                                           meaning="the wait between two checks of the cluster")

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kafka_conn_id": self.kafka_conn_id,
                **subscription_kwargs(self.subscription),
                "poll_interval": self.poll_interval,
                **self.check_kwargs(),
            },
        )

    def check_kwargs(self) -> dict[str, Any]:
        """The subclass's own constructor arguments, JSON-ready."""
        return {}

    def check(self, kafka_config: Mapping[str, Any]) -> Check:
        """One blocking check against the cluster."""
        raise NotImplementedError(f"{type(self).__name__} must implement check(kafka_config).")

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Yield one event: ``{"status": "success", ...payload}`` or
        ``{"status": "error", "message": ...}`` for a configuration error."""
        try:
            kafka_config = await KafkaHook(self.kafka_conn_id).aget_kafka_config()
            while True:
                result = await asyncio.to_thread(self.check, kafka_config)
                if result.done:
                    yield TriggerEvent({"status": "success", **result.payload})
                    return
                self.log.info("Waiting: %s", result.waiting_for)
                await asyncio.sleep(self.poll_interval)
        except KafkaSparkError as exc:
            yield TriggerEvent({"status": "error", "message": str(exc)})


class KafkaPartitionsTrigger(KafkaBaseTrigger):
    """Fires when the subscription has at least ``min_partitions`` partitions."""

    def __init__(self, *, min_partitions: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_partitions = check_positive_int(
            type(self).__name__, "min_partitions", min_partitions, example=3,
            meaning="how many partitions to wait for")

    def check_kwargs(self) -> dict[str, Any]:
        return {"min_partitions": self.min_partitions}

    def check(self, kafka_config: Mapping[str, Any]) -> Check:
        return check_partitions(kafka_config, self.subscription, self.min_partitions)


class KafkaIntervalCompleteTrigger(KafkaBaseTrigger):
    """Fires when every partition is complete up to ``end_ms`` (see
    :func:`check_interval_complete`)."""

    def __init__(self, *, end_ms: int, idle_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        owner = type(self).__name__
        if isinstance(end_ms, bool) or not isinstance(end_ms, int) or end_ms < 0:
            raise bad_argument(owner, "end_ms", end_ms, "pass the end as epoch millis (a "
                                                        "non-negative int), e.g. end_ms=1714557600000")
        self.end_ms = end_ms
        self.idle_timeout = check_seconds(
            owner, "idle_timeout", idle_timeout, allow_none=True, example=600,
            meaning="how long a partition without new records waits before it counts as idle")

    def check_kwargs(self) -> dict[str, Any]:
        return {"end_ms": self.end_ms, "idle_timeout": self.idle_timeout}

    def check(self, kafka_config: Mapping[str, Any]) -> Check:
        return check_interval_complete(kafka_config, self.subscription, self.end_ms,
                                       self.idle_timeout)
