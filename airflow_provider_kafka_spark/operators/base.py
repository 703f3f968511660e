"""What every operator and sensor of this package shares: the Kafka connection and the
subscription arguments.

Modelled on the Amazon provider's base operator: the hook class and the connection argument
are declared once; every argument is keyword-only; the hook is a ``cached_property`` built on
first use (never in ``__init__``, which runs at DAG parse time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    OffsetRanges,
    OffsetSpecError,
    Subscription,
)
from airflow_provider_kafka_spark.operators.arguments import checkable
from airflow_provider_kafka_spark.options import check_text, shown

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
                      partitions: Partitions | None = None, *,
                      owner: str | None = None) -> Subscription:
    """The :class:`Subscription` of the subscription arguments (exactly one must be given).

    * ``topics``: a topic name, a comma-separated string of names, or a list of names;
    * ``topic_pattern``: a regex matched against whole topic names (``__*`` topics and this
      package's internal ``_kafka_spark_*`` topics excluded);
    * ``partitions``: a list of ``(topic, partition)`` pairs (a partition may be a string of
      digits, as a template renders it).

    Raises:
        OffsetSpecError: not exactly one given, or it is not a subscription; the message
            starts with ``owner`` (a task id) when given.
    """
    try:
        _check_one(topics, topic_pattern, partitions)
        if topics is not None:
            names = topics.split(",") if isinstance(topics, str) else topics
            if not isinstance(names, list | tuple | set | frozenset):
                raise OffsetSpecError(f"topics={topics!r} is not valid; pass a topic name, a "
                                      "comma-separated string of names, or a list of names.")
            return Subscription.topics([str(name).strip() for name in names])
        if topic_pattern is not None:
            return Subscription.pattern(topic_pattern)
        assert partitions is not None
        if isinstance(partitions, str | bytes) or not isinstance(partitions, list | tuple):
            raise OffsetSpecError(
                f"partitions={partitions!r} is not valid; pass a list of (topic, partition) "
                "pairs, e.g. [('orders', 0), ('orders', 1)] (a template must render a list: "
                "render_template_as_native_obj=True on the DAG)."
            )
        return Subscription.partitions(_pair(item) for item in partitions)
    except OffsetSpecError as exc:
        if owner is None:
            raise
        raise OffsetSpecError(f"{owner}: {exc}") from None


def _pair(item: Any) -> Any:
    """``(topic, int partition)`` from a pair whose partition may be a string of digits; any
    other item as it is, for :meth:`Subscription.partitions` to reject by name."""
    if isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[1], str) \
            and item[1].strip().isdigit():
        return (item[0], int(item[1]))
    return item


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
    :func:`subscription_from`. Exactly one must be given; literal ones are checked when the
    DAG is parsed, templated ones once rendered."""

    task_id: str
    topics: Topics | None
    topic_pattern: str | None
    partitions: Partitions | None

    def _set_subscription(self, topics: Topics | None, topic_pattern: str | None,
                          partitions: Partitions | None) -> None:
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.partitions = partitions
        self._check_subscription(rendered=False)

    def _check_subscription(self, *, rendered: bool) -> None:
        _check_one_in(self.task_id, self.topics, self.topic_pattern, self.partitions)
        if all(checkable(v, rendered=rendered)
               for v in (self.topics, self.topic_pattern, self.partitions)):
            self.subscription()

    def subscription(self) -> Subscription:
        """The subscription from the rendered arguments."""
        return subscription_from(self.topics, self.topic_pattern, self.partitions,
                                 owner=self.task_id)


def _check_one_in(owner: str, *values: Any) -> None:
    try:
        _check_one(*values)
    except OffsetSpecError as exc:
        raise OffsetSpecError(f"{owner}: {exc}") from None


class KafkaSparkBaseOperator(KafkaConnectionMixin, BaseOperator):
    """Base of this package's operators: declares ``kafka_conn_id`` and ``kafka_hook`` once.

    Every operator checks its literal arguments in ``__init__`` (when the DAG file is parsed)
    and its rendered template fields at the start of ``execute``, before any cluster call,
    with the checks of :mod:`~airflow_provider_kafka_spark.operators.arguments`.

    :param kafka_conn_id: the Airflow connection whose extra JSON is the librdkafka config
        (default ``kafka_default``).
    """

    template_fields: Sequence[str] = ()

    def __init__(self, *, kafka_conn_id: str = KafkaHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = check_conn_id(self.task_id, "kafka_conn_id", kafka_conn_id)


def check_conn_id(owner: str, name: str, value: Any) -> str:
    """``value`` if it can be an Airflow connection id."""
    conn_id = check_text(owner, name, value, meaning="an Airflow connection id, e.g. "
                                                     f"{KafkaHook.default_conn_name!r}")
    assert conn_id is not None
    return conn_id


def bool_param(owner: str, context: Mapping[str, Any], name: str) -> bool:
    """The run's Param ``name`` as a bool (absent or null: False).

    Raises:
        ConfigurationError: it is set to something else than a JSON boolean (``"false"``
            would otherwise count as true).
    """
    value = (context.get("params") or {}).get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ConfigurationError(
        f"{owner}: the Param {name}={shown(value)} is not valid; pass true or false (a JSON "
        f"boolean, e.g. --conf '{{\"{name}\": true}}'), or leave it unset."
    )


def ranges_table(ranges: OffsetRanges) -> str:
    """A fixed-width table of the ranges, one row per partition, and a total line, for task
    logs; ``lag`` is empty for ranges resolved before lag was recorded."""
    table = format_table(("topic", "partition", "start", "stop", "offsets", "lag"),
                         [(r.topic, r.partition, r.start, r.stop, r.size,
                           ranges.lag.get((r.topic, r.partition), "")) for r in ranges])
    return f"{table}\ntotal: {ranges.total()} offset(s), lag {ranges.total_lag()}"


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
