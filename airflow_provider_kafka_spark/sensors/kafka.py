"""Sensors: partition discovery and interval completeness, in poke mode or deferrable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf

from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.offsets import (
    KafkaSparkError,
    OffsetSpecError,
    Timestamp,
    parse_offset_spec,
)
from airflow_provider_kafka_spark.operators.base import (
    SUBSCRIPTION_FIELDS,
    KafkaConnectionMixin,
    Partitions,
    SubscriptionMixin,
    Topics,
    subscription_kwargs,
)
from airflow_provider_kafka_spark.triggers.kafka import (
    Check,
    KafkaBaseTrigger,
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
    check_interval_complete,
    check_partitions,
)


class KafkaBaseSensor(KafkaConnectionMixin, SubscriptionMixin, BaseSensorOperator):
    """Shared base: connection, subscription, and the poke/defer plumbing.

    Subclasses implement :meth:`check` (one blocking check) and :meth:`trigger` (the same
    check, deferred). With ``deferrable=True`` the sensor checks once in the worker and, if not
    done, hands the waiting to the triggerer, polling every ``poke_interval`` seconds.

    :param kafka_conn_id: the connection whose extra JSON is the librdkafka config.
    :param topics: topic name(s); templated. See ``subscription_from``.
    :param topic_pattern: regex of topic names; templated.
    :param partitions: ``(topic, partition)`` pairs; templated.
    :param deferrable: wait in the triggerer instead of a worker slot (default: the
        ``[operators] default_deferrable`` Airflow option).
    """

    template_fields: Sequence[str] = SUBSCRIPTION_FIELDS

    def __init__(
        self,
        *,
        kafka_conn_id: str = KafkaHook.default_conn_name,
        topics: Topics | None = None,
        topic_pattern: str | None = None,
        partitions: Partitions | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id
        self._set_subscription(topics, topic_pattern, partitions)
        self.deferrable = deferrable

    def check(self, context: Any) -> Check:
        """One blocking check against the cluster."""
        raise NotImplementedError

    def trigger(self, context: Any) -> KafkaBaseTrigger:
        """The trigger that waits for the same condition."""
        raise NotImplementedError

    def xcom_value(self, payload: Mapping[str, Any]) -> Any:
        """What the sensor returns (XCom) once done, from the check's payload."""
        raise NotImplementedError

    def poke(self, context: Any) -> PokeReturnValue | bool:
        result = self.check(context)
        if not result.done:
            self.log.info("Waiting: %s", result.waiting_for)
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.xcom_value(result.payload))

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        result = self.check(context)
        if result.done:
            return self.xcom_value(result.payload)
        self.log.info("Waiting in the triggerer: %s", result.waiting_for)
        self.defer(
            trigger=self.trigger(context),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> Any:
        """Resume after the trigger fired: fail on an error event, else return the XCom."""
        if event.get("status") != "success":
            raise KafkaSparkError(f"{self.task_id}: {event.get('message', event)}")
        return self.xcom_value(event)

    def _trigger_kwargs(self) -> dict[str, Any]:
        return {"kafka_conn_id": self.kafka_conn_id, **subscription_kwargs(self.subscription()),
                "poll_interval": self.poke_interval}


class KafkaPartitionsSensor(KafkaBaseSensor):
    """Wait until the subscription has at least ``min_partitions`` partitions.

    For topic creation (a named topic, or a first topic matching a pattern) and scale-out.
    Returns the discovered partitions as ``[[topic, partition], ...]`` (XCom). Partitions that
    appear between runs are read from the earliest offset when the resolve task's start spec is
    ``committed:earliest``.

    :param min_partitions: how many partitions the subscription must have (default 1).
    """

    template_fields: Sequence[str] = (*SUBSCRIPTION_FIELDS, "min_partitions")

    def __init__(self, *, min_partitions: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_partitions = min_partitions

    def check(self, context: Any) -> Check:
        return check_partitions(self.kafka_hook.get_kafka_config(), self.subscription(),
                                int(self.min_partitions))

    def trigger(self, context: Any) -> KafkaPartitionsTrigger:
        return KafkaPartitionsTrigger(min_partitions=int(self.min_partitions),
                                      **self._trigger_kwargs())

    def xcom_value(self, payload: Mapping[str, Any]) -> list[list[Any]]:
        return [list(pair) for pair in payload["partitions"]]


class KafkaIntervalCompleteSensor(KafkaBaseSensor):
    """Wait until every partition is complete up to ``end``: no record that a
    ``read_committed`` reader could see with a timestamp before ``end`` can still appear below
    the stop that the resolve task would return for ``timestamp:<end>``.

    A partition is complete when it holds a record (or transaction marker) with a timestamp
    ``>= end`` below its last stable offset. A transaction still open that began before that
    point keeps the partition waiting, however old it is: its records may yet be committed
    inside the interval. With ``idle_timeout``, a partition without such a record and without
    an open transaction is also complete when idle: it has no record, or its newest record is
    older than ``idle_timeout`` by the wall clock (records that arrive later with older
    timestamps then belong to a later run); without ``idle_timeout`` an idle partition holds
    the sensor until its timeout. While waiting, each poke logs the late partitions.
    Returns ``{"end": <ISO time>, "idle": [[topic, partition], ...]}``.

    :param end: the instant the data must be complete up to (exclusive): an aware datetime,
        an ISO-8601 time with zone, or ``timestamp:...``. Templated; default: the run's
        ``data_interval_end`` (a run without data interval needs ``end=``).
    :param idle_timeout: a ``timedelta`` or seconds; ``None`` (default) disables idleness.
    """

    template_fields: Sequence[str] = (*SUBSCRIPTION_FIELDS, "end")

    def __init__(self, *, end: Any = None,
                 idle_timeout: timedelta | float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.end = end
        self.idle_timeout = (idle_timeout.total_seconds() if isinstance(idle_timeout, timedelta)
                             else idle_timeout)

    def end_ms(self, context: Any) -> int:
        """``end`` (rendered, else the data interval end) in epoch milliseconds."""
        end = self.end or context.get("data_interval_end")
        if end is None:
            raise OffsetSpecError(
                f"{self.task_id}: the run has no data interval (a manual or asset-triggered "
                "run): pass end= to say up to when the data must be complete."
            )
        if isinstance(end, datetime):
            return Timestamp.from_datetime(end).millis
        text = str(end).strip()
        spec = parse_offset_spec(text if text.lower().startswith("timestamp:")
                                 else f"timestamp:{text}")
        if not isinstance(spec, Timestamp):
            raise OffsetSpecError(f"{self.task_id}: end={self.end!r} is not a time.")
        return spec.millis

    def check(self, context: Any) -> Check:
        return check_interval_complete(self.kafka_hook.get_kafka_config(), self.subscription(),
                                       self.end_ms(context), self.idle_timeout)

    def trigger(self, context: Any) -> KafkaIntervalCompleteTrigger:
        return KafkaIntervalCompleteTrigger(end_ms=self.end_ms(context),
                                            idle_timeout=self.idle_timeout,
                                            **self._trigger_kwargs())

    def xcom_value(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        return {"end": payload["end"], "idle": [list(pair) for pair in payload["idle"]]}
