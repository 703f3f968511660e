"""The arguments that operators, sensors and triggers share, and when they are checked (the
checks themselves are :mod:`airflow_provider_kafka_spark.options`). No Airflow and no Spark
import: the checks run while the DAG file is parsed, and in the triggerer.

Every failed check is a :class:`ConfigurationError` (a bad subscription or bad ranges:
:class:`OffsetSpecError`) that names the task (or the trigger), the argument, the value and
what to pass instead, e.g.::

    ingest: max_records_per_split=0 is not valid; pass a positive int (the most offsets one
    Spark partition reads), e.g. 100000, or None for the default.

When they run:

* a **literal** argument is checked in ``__init__``, i.e. when the DAG file is parsed, so a
  bad value is an import error of the DAG, not a failed run;
* a **templated** one (a template field holding Jinja markup such as ``"{{ params.n }}"``, or
  an ``XComArg`` such as ``resolve.output``) is checked once rendered, at the start of
  ``execute``, before any call to Kafka or Spark (:func:`checkable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from typing import Any

from airflow_provider_kafka_spark.errors import ConfigurationError, OffsetSpecError
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.offsets.subscription import Subscription
from airflow_provider_kafka_spark.options import SQL_VIEW, bad_argument, check_text, shown

TEMPLATE_MARKERS: tuple[str, ...] = ("{{", "{%", "{#")
"""A string holding one of these is a Jinja template (Airflow's default delimiters)."""

DEFAULT_KAFKA_CONN_ID = "kafka_default"
"""The Kafka connection used when no ``kafka_conn_id`` is given (the Kafka provider's)."""

SUBSCRIPTION_FIELDS: tuple[str, ...] = ("topics", "topic_pattern", "partitions")
"""The templated subscription arguments: exactly one of them is given."""

Topics = str | Iterable[str]
Partitions = Iterable[Sequence[Any]]


def is_templated(value: Any) -> bool:
    """Whether Airflow replaces ``value`` when it renders the task: a string with Jinja
    markup, an ``XComArg`` or other lazy value (anything with ``resolve``), or a list, tuple,
    set or dict holding one."""
    if isinstance(value, str):
        return any(marker in value for marker in TEMPLATE_MARKERS)
    if isinstance(value, Mapping):
        return any(is_templated(v) for v in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return any(is_templated(v) for v in value)
    return not isinstance(value, PathLike) and callable(getattr(value, "resolve", None))


def checkable(value: Any, *, rendered: bool) -> bool:
    """Whether a template field's value can be checked now: always once rendered; before,
    only when it is a literal."""
    return rendered or not is_templated(value)


def check_conn_id(owner: str, name: str, value: Any) -> str:
    """``value`` if it can be an Airflow connection id.

    Raises:
        ConfigurationError: it is not a non-empty string (the message names ``owner``).
    """
    conn_id = check_text(owner, name, value, meaning="an Airflow connection id, e.g. "
                                                     f"{DEFAULT_KAFKA_CONN_ID!r}")
    assert conn_id is not None
    return conn_id


def parse_ranges(owner: str, ranges: Any) -> OffsetRanges:
    """``ranges`` (the resolve task's XCom, its JSON, or ``OffsetRanges``), parsed.

    Raises:
        OffsetSpecError: they are not offset ranges (the message names ``owner``).
    """
    try:
        return OffsetRanges.from_json(ranges)
    except OffsetSpecError as exc:
        raise OffsetSpecError(
            f"{owner}: ranges={shown(ranges, 200)} are not offset ranges: {exc} "
            "Pass the resolve task's XCom (ranges=resolve.output) or its JSON."
        ) from None


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
        try:
            _check_one(self.topics, self.topic_pattern, self.partitions)
        except OffsetSpecError as exc:
            raise OffsetSpecError(f"{self.task_id}: {exc}") from None
        if all(checkable(v, rendered=rendered)
               for v in (self.topics, self.topic_pattern, self.partitions)):
            self.subscription()

    def subscription(self) -> Subscription:
        """The subscription from the rendered arguments."""
        return subscription_from(self.topics, self.topic_pattern, self.partitions,
                                 owner=self.task_id)


SINK_STEPS: tuple[str, ...] = ("describe", "prepare", "intake", "write", "commit", "abort")
"""What a sink must have (:class:`~airflow_provider_kafka_spark.sinks.Sink`'s steps)."""


def check_stages(owner: str, sink: Any, decode: Any, transform: Any, sql: Any, *,
                 rendered: bool = True, shape: Any = None) -> None:
    """The stages of an ingest, checked together (``ingest()`` and the ingest operator): a
    sink, a :class:`~airflow_provider_kafka_spark.decoding.Decoding` or None that the sink can
    take (its dead letters), and at most one of a callable ``transform``, a ``sql`` query
    (checked once rendered when it is a template) and a
    :class:`~airflow_provider_kafka_spark.shaping.Shape`.

    Raises:
        ConfigurationError: the first bad one, named with its value and a remedy.
    """
    from airflow_provider_kafka_spark.decoding import Decoding

    if not all(callable(getattr(sink, step, None)) for step in SINK_STEPS):
        raise bad_argument(owner, "sink", sink, "pass a sink: FileSink(path), KafkaSink(topic), "
                           "IcebergSink(table), DeltaSink(table) or another "
                           "airflow_provider_kafka_spark.sinks.Sink")
    if decode is not None and not isinstance(decode, Decoding):
        raise bad_argument(owner, "decode", decode, "pass Decoding(value_format=...), or None "
                           "to keep the bytes")
    accepts_dead_letters = getattr(sink, "accepts_dead_letters", None)
    if callable(accepts_dead_letters):
        try:
            accepts_dead_letters(decode is not None and decode.on_corrupt == "dead_letter")
        except ConfigurationError as exc:
            raise ConfigurationError(f"{owner}: {exc}") from None
    if shape is not None:
        from airflow_provider_kafka_spark.shaping import Shape

        if not isinstance(shape, Shape):
            raise bad_argument(owner, "shape", shape, "pass Shape(columns, derived), or None")
        if transform is not None or sql is not None:
            raise ConfigurationError(f"{owner}: pass shape= or a transform= / sql=, not both; "
                                     "select and derive the columns in the transform instead.")
    if transform is not None and sql is not None:
        raise ConfigurationError(f"{owner}: pass transform= or sql=, not both; fold the SQL "
                                 "into the transform (spark.sql over a view) or the other way "
                                 "round.")
    if transform is not None and not callable(transform):
        raise bad_argument(owner, "transform", transform,
                           "pass a function taking and returning a pyspark DataFrame")
    if checkable(sql, rendered=rendered):
        check_text(owner, "sql", sql, allow_none=True,
                   meaning=f"a Spark SQL query over the view '{SQL_VIEW}'")
