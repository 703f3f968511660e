"""What to read: named topics, a topic regex, or explicit partitions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from airflow_provider_kafka_spark.errors import OffsetSpecError, UnknownTopicError
from airflow_provider_kafka_spark.offsets.specs import check_partition, check_topic_name, shown

INTERNAL_TOPIC_PREFIX = "_kafka_spark_"
"""The name prefix of the topics this package keeps its own state in: the exactly-once write's
ledger (``_kafka_spark_ledger``) and the pinned run ranges (``_kafka_spark_pins``). A
``topic_pattern`` never matches them, as it never matches Kafka's ``__`` topics. Name one with
:meth:`Subscription.topics` and ``allow_internal=True`` to read it; a ledger or pins topic
given another name is an ordinary topic."""

def is_internal_topic(name: str) -> bool:
    """True for Kafka's internal topics (``__*``) and this package's (``_kafka_spark_*``)."""
    return name.startswith(("__", INTERNAL_TOPIC_PREFIX))


@dataclass(frozen=True)
class Subscription:
    """A set of topic partitions, resolved against the cluster's metadata at run time.

    Build one with :meth:`topics`, :meth:`pattern` or :meth:`partitions`.
    """

    kind: Literal["topics", "pattern", "partitions"]
    topic_names: tuple[str, ...] = ()
    regex: str | None = None
    partition_list: tuple[tuple[str, int], ...] = ()

    @classmethod
    def topics(cls, topics: str | Iterable[str], *, allow_internal: bool = False) -> Subscription:
        """Every partition of each named topic; an unknown topic is an error at resolution.

        Naming an internal topic (see :func:`is_internal_topic`) needs ``allow_internal=True``.
        """
        if isinstance(topics, str):
            names: tuple[object, ...] = (topics,)
        elif isinstance(topics, Iterable) and not isinstance(topics, bytes | Mapping):
            names = tuple(topics)
        else:
            names = ()
        if not names:
            raise OffsetSpecError(
                f"topics must be a non-empty list of topic names, got {shown(topics)}; pass a "
                "topic name or a list of them, e.g. ['orders', 'payments']."
            )
        checked = [check_topic_name(n, "topics") for n in names]
        _check_internal(checked, allow_internal, "Subscription.topics")
        return cls("topics", topic_names=tuple(sorted(set(checked))))

    @classmethod
    def pattern(cls, regex: str) -> Subscription:
        """Every partition of each topic whose whole name matches ``regex``.

        Internal topics are never matched: Kafka's (names starting with ``__``) and this
        package's (names starting with :data:`INTERNAL_TOPIC_PREFIX`, ``_kafka_spark_``).
        """
        if not isinstance(regex, str) or not regex:
            raise OffsetSpecError(f"topic_pattern={shown(regex)} is not a regex; pass a "
                                  "non-empty Python regex matching whole topic names, e.g. "
                                  "'orders-.*'.")
        try:
            re.compile(regex)
        except re.error as exc:
            raise OffsetSpecError(
                f"topic_pattern {shown(regex)} is not a valid regex: {exc}. Fix it (Python "
                "regex syntax, matching whole names; escape literal dots as '\\.'), or list "
                "the topics with topics= instead."
            ) from None
        return cls("pattern", regex=regex)

    @classmethod
    def partitions(cls, partitions: Iterable[tuple[str, int]], *,
                   allow_internal: bool = False) -> Subscription:
        """Exactly these ``(topic, partition)`` pairs; unknown ones are an error at resolution.

        Naming an internal topic (see :func:`is_internal_topic`) needs ``allow_internal=True``.
        """
        if isinstance(partitions, str | bytes | Mapping) or not isinstance(partitions, Iterable):
            raise OffsetSpecError(
                f"partitions={shown(partitions)} is not a list of (topic, partition) pairs; "
                "pass e.g. [('orders', 0), ('orders', 1)]."
            )
        pairs: set[tuple[str, int]] = set()
        for item in partitions:
            where = f"partition {shown(item)} must be a (topic name, partition number) pair"
            if isinstance(item, str | bytes) or not isinstance(item, Sequence) or len(item) != 2:
                raise OffsetSpecError(f"{where}, e.g. ('orders', 0).")
            pairs.add((check_topic_name(item[0], where), check_partition(item[1], where)))
        if not pairs:
            raise OffsetSpecError("partitions=[] names no partition; list at least one "
                                  "(topic, partition) pair, e.g. [('orders', 0)].")
        _check_internal([t for t, _ in pairs], allow_internal, "Subscription.partitions")
        return cls("partitions", partition_list=tuple(sorted(pairs)))

    def missing_topics(self, partition_counts: Mapping[str, int]) -> list[str]:
        """The topics this subscription names (:meth:`topics`, :meth:`partitions`) that are not
        in ``partition_counts``, sorted; none for a :meth:`pattern`, which names no topic."""
        if self.kind == "topics":
            return [t for t in self.topic_names if t not in partition_counts]
        return sorted({t for t, _ in self.partition_list if t not in partition_counts})

    def select(self, partition_counts: Mapping[str, int], *,
               waited_s: float = 0.0) -> list[tuple[str, int]]:
        """The subscribed ``(topic, partition)`` pairs, sorted, given each topic's partition count.
        ``waited_s``: how long missing named topics were looked up again before (said in the
        error).

        Raises:
            UnknownTopicError: a named topic or partition does not exist, or the pattern
                matches no topic (internal topics left out, see :meth:`pattern`).
        """
        waited = (f" (looked up again for {round(waited_s, 1):g}s: a topic created a moment "
                  "ago shows within that)" if waited_s > 0 else "")
        if self.kind == "topics":
            missing = self.missing_topics(partition_counts)
            if missing:
                raise UnknownTopicError(
                    f"unknown topic(s) {missing}: they do not exist on the cluster{waited}. "
                    "Create them or fix the names (topic auto-creation is not used for reads)."
                )
            return [(t, p) for t in self.topic_names for p in range(partition_counts[t])]
        if self.kind == "pattern":
            assert self.regex is not None
            compiled = re.compile(self.regex)
            matched = sorted(
                t for t in partition_counts
                if not is_internal_topic(t) and compiled.fullmatch(t)
            )
            if not matched:
                raise UnknownTopicError(
                    f"topic_pattern {self.regex!r} matches no topic on the cluster. Patterns "
                    "never match internal topics: names starting with '__' (Kafka's own) or "
                    f"{INTERNAL_TOPIC_PREFIX!r} (this package's ledger and run pins). Fix the "
                    "pattern (it must match whole names), or name an internal topic with "
                    "Subscription.topics(..., allow_internal=True) to read it."
                )
            return [(t, p) for t in matched for p in range(partition_counts[t])]
        unknown = [
            (t, p) for t, p in self.partition_list
            if t not in partition_counts or p >= partition_counts[t]
        ]
        if unknown:
            have = "; ".join(
                f"{t}: " + (f"partitions 0..{partition_counts[t] - 1}" if t in partition_counts
                            else "no such topic")
                for t in sorted({t for t, _ in unknown}))
            if not self.missing_topics(partition_counts):
                waited = ""
            raise UnknownTopicError(
                f"unknown partition(s) {unknown}: not on the cluster ({have}){waited}. Fix the "
                "partition numbers or topic names, or add partitions to the topic first."
            )
        return list(self.partition_list)

    def __str__(self) -> str:
        if self.kind == "topics":
            return "topics:" + ",".join(self.topic_names)
        if self.kind == "pattern":
            return f"pattern:{self.regex}"
        return "partitions:" + ",".join(f"{t}/{p}" for t, p in self.partition_list)


def _check_internal(topics: Iterable[str], allow_internal: bool, method: str) -> None:
    internal = sorted({t for t in topics if is_internal_topic(t)})
    if internal and allow_internal is not True:
        raise OffsetSpecError(
            f"{internal}: internal topic(s) (Kafka's own are named '__*', this package's "
            f"ledger and run pins '{INTERNAL_TOPIC_PREFIX}*') hold state, not user data, and "
            "patterns never match them. To read them anyway, opt in with "
            f"{method}(..., allow_internal=True)."
        )


def check_subscription(subscription: object) -> Subscription:
    """``subscription`` if it is a :class:`Subscription`.

    Raises:
        OffsetSpecError: it is not one (the message says how to build one).
    """
    if not isinstance(subscription, Subscription):
        raise OffsetSpecError(
            f"subscription={shown(subscription)} is not a Subscription; build one with "
            "Subscription.topics([...]), Subscription.pattern('...') or "
            "Subscription.partitions([...])."
        )
    return subscription
