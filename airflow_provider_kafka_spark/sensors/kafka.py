"""Sensors: partition discovery and interval completeness, in poke mode or deferrable.

The checks are :mod:`~airflow_provider_kafka_spark.offsets.completeness`; a deferred sensor
hands the same check to its trigger (:mod:`~airflow_provider_kafka_spark.triggers.kafka`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf

from airflow_provider_kafka_spark.arguments import (
    SUBSCRIPTION_FIELDS,
    Partitions,
    SubscriptionMixin,
    Topics,
    check_conn_id,
    checkable,
    subscription_kwargs,
)
from airflow_provider_kafka_spark.hooks.kafka import KafkaConnectionMixin, KafkaHook
from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    KafkaSparkError,
    OffsetSpecError,
    Timestamp,
    parse_offset_spec,
)
from airflow_provider_kafka_spark.offsets.completeness import (
    Check,
    check_idle_timeout,
    check_interval_complete,
    check_min_partitions,
    check_partitions,
)
from airflow_provider_kafka_spark.options import bad_argument, check_bool, check_seconds
from airflow_provider_kafka_spark.retries import fail_at_once_when_certain
from airflow_provider_kafka_spark.triggers.kafka import (
    KafkaBaseTrigger,
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)

_WAITS: tuple[tuple[str, str, float], ...] = (
    ("poke_interval", "the wait between two checks of the cluster", 60),
    ("timeout", "how long to wait in all before failing; None: Airflow's default", 3600),
    ("max_wait", "the longest wait between checks with exponential_backoff", 600),
)
"""BaseSensorOperator's durations: checked before Airflow sees them."""


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

    ``poke_interval`` must be a positive number of seconds (or a ``timedelta``), ``timeout``
    and ``max_wait`` too, or ``None``; Airflow alone would take ``0`` (a busy loop against the
    cluster) and bools. Literal arguments are checked when the DAG file is parsed, templated
    ones once rendered, at the start of ``execute``, before any cluster call; a bad one is a
    ``ConfigurationError`` (a bad subscription: ``OffsetSpecError``) naming the task, the
    argument, the value and what to pass.
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
        owner = str(kwargs.get("task_id", type(self).__name__))
        # Before Airflow's own checks, which accept 0 and bools and raise a bare ValueError.
        for name, meaning, example in _WAITS:
            if name in kwargs:
                check_seconds(owner, name, kwargs[name], meaning=meaning, example=example,
                              allow_none=name != "poke_interval")
        super().__init__(**kwargs)
        self.kafka_conn_id = check_conn_id(self.task_id, "kafka_conn_id", kafka_conn_id)
        self.deferrable = check_bool(self.task_id, "deferrable", deferrable)
        self._set_subscription(topics, topic_pattern, partitions)

    def check_arguments(self, *, rendered: bool) -> None:
        """Check the template fields: literals when the DAG is parsed (from ``__init__``), all
        of them once rendered (at the start of ``execute``, before any cluster call).

        Raises:
            OffsetSpecError: a bad subscription.
            ConfigurationError: another bad argument.
        """
        self._check_subscription(rendered=rendered)

    def check(self, context: Any) -> Check:
        """One blocking check against the cluster."""
        raise NotImplementedError(f"{type(self).__name__} must implement check(context).")

    def trigger(self, context: Any) -> KafkaBaseTrigger:
        """The trigger that waits for the same condition."""
        raise NotImplementedError(f"{type(self).__name__} must implement trigger(context).")

    def xcom_value(self, payload: Mapping[str, Any]) -> Any:
        """What the sensor returns (XCom) once done, from the check's payload."""
        raise NotImplementedError(f"{type(self).__name__} must implement xcom_value(payload).")

    def poke(self, context: Any) -> PokeReturnValue | bool:
        result = self.check(context)
        if not result.done:
            self.log.info("Waiting: %s", result.waiting_for)
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.xcom_value(result.payload))

    @fail_at_once_when_certain
    def execute(self, context: Any) -> Any:
        self.check_arguments(rendered=True)
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

    @fail_at_once_when_certain
    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> Any:
        """Resume after the trigger fired: fail on an error event, else return the XCom."""
        if event.get("status") != "success":
            raise KafkaSparkError(f"{self.task_id}: the trigger stopped waiting: "
                                  f"{event.get('message', event)}")
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

    :param min_partitions: how many partitions the subscription must have: a positive int, or
        a string of digits (what a template renders); default 1. Templated.
    """

    template_fields: Sequence[str] = (*SUBSCRIPTION_FIELDS, "min_partitions")

    def __init__(self, *, min_partitions: int | str = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_partitions = min_partitions
        self.check_arguments(rendered=False)

    def check_arguments(self, *, rendered: bool) -> None:
        super().check_arguments(rendered=rendered)
        if checkable(self.min_partitions, rendered=rendered):
            self._min_partitions()

    def _min_partitions(self) -> int:
        return check_min_partitions(self.task_id, self.min_partitions, allow_text=True)

    def check(self, context: Any) -> Check:
        return check_partitions(self.kafka_hook.get_kafka_config(), self.subscription(),
                                self._min_partitions())

    def trigger(self, context: Any) -> KafkaPartitionsTrigger:
        return KafkaPartitionsTrigger(min_partitions=self._min_partitions(),
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
    :param idle_timeout: a positive ``timedelta`` or number of seconds; ``None`` (default)
        disables idleness. (Zero or a negative one would make every partition idle, i.e. the
        interval complete at once: rejected.)
    """

    template_fields: Sequence[str] = (*SUBSCRIPTION_FIELDS, "end")

    def __init__(self, *, end: Any = None,
                 idle_timeout: timedelta | float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.end = end
        self.idle_timeout = check_idle_timeout(self.task_id, idle_timeout)
        self.check_arguments(rendered=False)

    def check_arguments(self, *, rendered: bool) -> None:
        super().check_arguments(rendered=rendered)
        if self.end is not None and checkable(self.end, rendered=rendered):
            self._end_millis(self.end)

    def end_ms(self, context: Any) -> int:
        """``end`` (rendered, else the data interval end) in epoch milliseconds."""
        if self.end is not None:
            return self._end_millis(self.end)
        end = context.get("data_interval_end")
        if end is None:
            raise ConfigurationError(
                f"{self.task_id}: end=None and the run has no data interval (a manual or "
                "asset-triggered run): pass end= (e.g. end='{{ params.end }}') to say up to "
                "when the data must be complete."
            )
        return self._end_millis(end)

    def _end_millis(self, end: Any) -> int:
        expected = ("pass an aware datetime, an ISO-8601 time with zone (e.g. "
                    "'2024-05-01T11:00:00Z') or 'timestamp:...', or None for the run's "
                    "data_interval_end")
        if not isinstance(end, datetime | str):
            raise bad_argument(self.task_id, "end", end, expected)
        try:
            if isinstance(end, datetime):
                return Timestamp.from_datetime(end).millis
            text = end.strip()
            spec = parse_offset_spec(text if text.lower().startswith("timestamp:")
                                     else f"timestamp:{text}")
        except OffsetSpecError as exc:
            raise bad_argument(self.task_id, "end", end, f"{expected} ({exc})") from None
        if not isinstance(spec, Timestamp):
            raise bad_argument(self.task_id, "end", end, expected)
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
