"""Resolve offset specs to exact offset ranges, once per DAG run, and keep them in XCom."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_provider_kafka_spark.offsets import (
    OffsetSpecError,
    Timestamp,
    parse_offset_spec,
    resolve_offsets,
)
from airflow_provider_kafka_spark.offsets.config import check_isolation_level
from airflow_provider_kafka_spark.operators.base import (
    SUBSCRIPTION_FIELDS,
    KafkaSparkBaseOperator,
    Partitions,
    SubscriptionMixin,
    Topics,
    ranges_table,
)


class KafkaResolveOffsetsOperator(SubscriptionMixin, KafkaSparkBaseOperator):
    """Resolve ``start`` and ``stop`` to one ``[start, stop)`` offset range per partition.

    The result (``OffsetRanges.to_dict()``) is the task's XCom ``return_value``; the ingest and
    commit tasks read it, so a retry of either reads exactly the same records. Clearing this
    task resolves again: with the default timestamp specs that gives the same ranges unless
    records were added inside the interval or deleted by retention since.

    Where each spec comes from, first match wins:

    1. the DAG run's params ``start`` / ``stop`` when set (a manual run's trigger form, e.g.
       ``{"start": "timestamp:2024-05-01T00:00:00Z", "stop": "latest"}``);
    2. the ``start`` / ``stop`` arguments;
    3. the run's data interval: ``timestamp:<data_interval_start>`` and
       ``timestamp:<data_interval_end>``.

    A run without a data interval, or a zero-width one (``start`` and ``stop`` the same
    instant, as in a manual or asset-triggered run), is an error naming the Params to set,
    never a silent empty read.

    :param topics: topic name(s), see :class:`SubscriptionMixin`; templated.
    :param topic_pattern: regex of topic names; templated.
    :param partitions: ``(topic, partition)`` pairs; templated.
    :param start: the starting offset spec (inclusive), see ``parse_offset_spec``; templated.
        Default: the data interval start.
    :param stop: the stopping offset spec (exclusive); templated. Default: the data interval
        end.
    :param group_id: consumer group for ``committed`` specs (and the default group the commit
        task commits to); templated.
    :param isolation_level: ``read_committed`` (default) or ``read_uncommitted``.
    :param on_data_loss: ``fail`` (default) when a range starts below the log start offset,
        or ``skip`` to start at the log start and record the loss in the ranges.
    :param timeout: seconds to wait for the cluster's answers.
    """

    template_fields: Sequence[str] = (*SUBSCRIPTION_FIELDS, "start", "stop", "group_id")
    ui_color = "#d7e8fc"

    def __init__(
        self,
        *,
        topics: Topics | None = None,
        topic_pattern: str | None = None,
        partitions: Partitions | None = None,
        start: Any = None,
        stop: Any = None,
        group_id: str | None = None,
        isolation_level: str = "read_committed",
        on_data_loss: str = "fail",
        timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._set_subscription(topics, topic_pattern, partitions)
        self.start = start
        self.stop = stop
        self.group_id = group_id
        self.isolation_level = check_isolation_level(isolation_level)
        if on_data_loss not in ("fail", "skip"):
            raise OffsetSpecError(
                f"on_data_loss={on_data_loss!r} is not valid; use 'fail' or 'skip'."
            )
        self.on_data_loss = on_data_loss
        self.timeout = timeout

    def execute(self, context: Any) -> dict[str, Any]:
        start, stop = self.specs(context)
        subscription = self.subscription()
        self.log.info("Resolving %s from %s to %s", subscription, start, stop)
        ranges = resolve_offsets(
            self.kafka_hook.get_kafka_config(),
            subscription,
            start,
            stop,
            group_id=self.group_id or None,
            isolation_level=self.isolation_level,
            on_data_loss=self.on_data_loss,  # type: ignore[arg-type]
            timeout=self.timeout,
        )
        self.log.info("Resolved %d partition(s), %d offset(s):\n%s",
                      len(ranges), ranges.total(), ranges_table(ranges))
        return ranges.to_dict()

    def specs(self, context: Mapping[str, Any]) -> tuple[Any, Any]:
        """The parsed ``(start, stop)`` specs of this run; checked, never zero-width."""
        params = context.get("params") or {}
        start = _parse("start", params.get("start") or self.start
                       or _interval_bound(context, "data_interval_start", "start"))
        stop = _parse("stop", params.get("stop") or self.stop
                      or _interval_bound(context, "data_interval_end", "stop"))
        if isinstance(start, Timestamp) and isinstance(stop, Timestamp) and start == stop:
            raise OffsetSpecError(
                f"start and stop are the same instant ({start}): the run's data interval is "
                "zero-width, as for a manual or asset-triggered run. Trigger the run with the "
                "Params 'start' and 'stop' (e.g. {\"start\": \"timestamp:2024-05-01T00:00:00Z\", "
                "\"stop\": \"timestamp:2024-05-01T01:00:00Z\"}), or schedule the DAG with a "
                "timetable that has data intervals."
            )
        return start, stop


def _interval_bound(context: Mapping[str, Any], key: str, name: str) -> datetime:
    moment = context.get(key)
    if moment is None:
        raise OffsetSpecError(
            f"no {name} offset spec: the run has no data interval (a manual run without logical "
            f"date, or an asset-triggered run) and no Param '{name}'. Trigger the run with the "
            f"Params 'start' and 'stop', or pass {name}= to the operator."
        )
    return moment


def _parse(name: str, value: Any) -> Any:
    try:
        return parse_offset_spec(value)
    except OffsetSpecError as exc:
        raise OffsetSpecError(f"{name}: {exc}") from None
