"""Triggers of the deferrable sensors: each waits for one check of
:mod:`~airflow_provider_kafka_spark.offsets.completeness`, the same check the sensor pokes with.

Each check is a blocking function of a librdkafka config (confluent-kafka has no asyncio
API); a trigger runs it in a worker thread with ``asyncio.to_thread`` so the triggerer's event
loop never blocks. A trigger keeps no state between checks, so running it twice (a triggerer
restart, a second triggerer) gives the same answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_kafka_spark.arguments import (
    Partitions,
    Topics,
    check_conn_id,
    subscription_from,
    subscription_kwargs,
)
from airflow_provider_kafka_spark.errors import KafkaSparkError
from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.offsets.completeness import (
    Check,
    check_idle_timeout,
    check_interval_complete,
    check_min_partitions,
    check_partitions,
)
from airflow_provider_kafka_spark.options import bad_argument, check_seconds


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
        self.min_partitions = check_min_partitions(type(self).__name__, min_partitions)

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
        self.idle_timeout = check_idle_timeout(owner, idle_timeout)

    def check_kwargs(self) -> dict[str, Any]:
        return {"end_ms": self.end_ms, "idle_timeout": self.idle_timeout}

    def check(self, kafka_config: Mapping[str, Any]) -> Check:
        return check_interval_complete(kafka_config, self.subscription, self.end_ms,
                                       self.idle_timeout)
