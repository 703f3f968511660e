"""What every operator and sensor of this package shares: the Kafka connection and the
subscription arguments.

Modelled on the Amazon provider's base operator: the hook class and the connection argument
are declared once; every argument is keyword-only; the hook is a ``cached_property`` built on
first use (never in ``__init__``, which runs at DAG parse time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.offsets import OffsetRanges, OffsetSpecError, Subscription

SUBSCRIPTION_FIELDS: tuple[str, ...] = ("topics", "topic_pattern", "partitions")
"""The templated subscription arguments: exactly one of them is given."""

Topics = str | Iterable[str]
Partitions = Iterable[Sequence[Any]]


class KafkaConnectionMixin:
    """The ``kafka_conn_id`` argument and the :class:`KafkaHook` built from it."""

    kafka_conn_id: str

    @cached_property
    def kafka_hook(self) -> KafkaHook:
        """The hook for ``kafka_conn_id``; built on first use, inside the running task."""
        return KafkaHook(kafka_conn_id=self.kafka_conn_id)


def subscription_from(topics: Topics | None = None, topic_pattern: str | None = None,
                      partitions: Partitions | None = None) -> Subscription:
    """The :class:`Subscription` of the subscription arguments (exactly one must be given).

    * ``topics``: a topic name, a comma-separated string of names, or a list of names;
    * ``topic_pattern``: a regex matched against whole topic names (``__*`` topics and this
      package's internal ``_kafka_spark_*`` topics excluded);
    * ``partitions``: a list of ``(topic, partition)`` pairs.
    """
    _check_one(topics, topic_pattern, partitions)
    if topics is not None:
        names = topics.split(",") if isinstance(topics, str) else topics
        return Subscription.topics([str(name).strip() for name in names])
    if topic_pattern is not None:
        return Subscription.pattern(topic_pattern)
    assert partitions is not None
    return Subscription.partitions((str(t), int(p)) for t, p in partitions)


def subscription_kwargs(subscription: Subscription) -> dict[str, Any]:
    """The JSON-ready subscription arguments that :func:`subscription_from` turns back into
    ``subscription`` (triggers serialize their subscription this way)."""
    if subscription.kind == "topics":
        return {"topics": list(subscription.topic_names)}
    if subscription.kind == "pattern":
        return {"topic_pattern": subscription.regex}
    return {"partitions": [[t, p] for t, p in subscription.partition_list]}


def _check_one(*values: Any) -> None:
    given = [name for name, value in zip(SUBSCRIPTION_FIELDS, values, strict=True)
             if value is not None]
    if len(given) != 1:
        raise OffsetSpecError(
            f"pass exactly one of topics=, topic_pattern= or partitions= (got "
            f"{', '.join(given) or 'none'})."
        )


class SubscriptionMixin:
    """The templated subscription arguments of the resolve operator and the sensors; see
    :func:`subscription_from`. Exactly one must be given (checked when the DAG is parsed)."""

    topics: Topics | None
    topic_pattern: str | None
    partitions: Partitions | None

    def _set_subscription(self, topics: Topics | None, topic_pattern: str | None,
                          partitions: Partitions | None) -> None:
        _check_one(topics, topic_pattern, partitions)
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.partitions = partitions

    def subscription(self) -> Subscription:
        """The subscription from the rendered arguments."""
        return subscription_from(self.topics, self.topic_pattern, self.partitions)


class KafkaSparkBaseOperator(KafkaConnectionMixin, BaseOperator):
    """Base of this package's operators: declares ``kafka_conn_id`` and ``kafka_hook`` once.

    :param kafka_conn_id: the Airflow connection whose extra JSON is the librdkafka config
        (default ``kafka_default``).
    """

    template_fields: Sequence[str] = ()

    def __init__(self, *, kafka_conn_id: str = KafkaHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id


def ranges_table(ranges: OffsetRanges) -> str:
    """A fixed-width table of the ranges, one row per partition, for task logs."""
    return format_table(("topic", "partition", "start", "stop", "offsets"),
                        [(r.topic, r.partition, r.start, r.stop, r.size) for r in ranges])


def format_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows as a fixed-width text table for task logs; numbers right-aligned."""
    cells = [list(header)] + [[str(c) for c in row] for row in rows]
    numeric = [all(row[i].lstrip("-").isdigit() for row in cells[1:]) and len(cells) > 1
               for i in range(len(header))]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(w) if num else cell.ljust(w)
                  for cell, w, num in zip(row, widths, numeric, strict=True)).rstrip()
        for row in cells
    )
