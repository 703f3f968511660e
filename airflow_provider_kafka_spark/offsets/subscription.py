"""What to read: named topics, a topic regex, or explicit partitions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from airflow_provider_kafka_spark.offsets.errors import OffsetResolutionError, OffsetSpecError

INTERNAL_TOPIC_PREFIX = "_kafka_spark_"
"""The name prefix of the topics this package keeps its own state in: the exactly-once write's
ledger (``_kafka_spark_ledger``) and the pinned run ranges (``_kafka_spark_pins``). A
``topic_pattern`` never matches them, as it never matches Kafka's ``__`` topics. Name one with
:meth:`Subscription.topics` to read it; a ledger or pins topic given another name is an
ordinary topic to a pattern."""


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
    def topics(cls, topics: str | Iterable[str]) -> Subscription:
        """Every partition of each named topic; an unknown topic is an error."""
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise OffsetSpecError(f"topics must be a non-empty list of topic names, got {topics!r}.")
        return cls("topics", topic_names=tuple(sorted(set(names))))

    @classmethod
    def pattern(cls, regex: str) -> Subscription:
        """Every partition of each topic whose whole name matches ``regex``.

        Internal topics are never matched: Kafka's (names starting with ``__``) and this
        package's (names starting with :data:`INTERNAL_TOPIC_PREFIX`, ``_kafka_spark_``).
        """
        if not isinstance(regex, str) or not regex:
            raise OffsetSpecError(f"topic_pattern must be a non-empty regex, got {regex!r}.")
        try:
            re.compile(regex)
        except re.error as exc:
            raise OffsetSpecError(f"topic_pattern {regex!r} is not a valid regex: {exc}.") from None
        return cls("pattern", regex=regex)

    @classmethod
    def partitions(cls, partitions: Iterable[tuple[str, int]]) -> Subscription:
        """Exactly these ``(topic, partition)`` pairs; unknown ones are an error."""
        pairs: set[tuple[str, int]] = set()
        for item in partitions:
            try:
                topic, partition = item
            except (TypeError, ValueError):
                raise OffsetSpecError(f"partition {item!r} must be a (topic, partition) pair.") from None
            if not isinstance(topic, str) or not topic or isinstance(partition, bool) or \
                    not isinstance(partition, int) or partition < 0:
                raise OffsetSpecError(
                    f"partition {item!r} must be a (topic name, non-negative int) pair."
                )
            pairs.add((topic, partition))
        if not pairs:
            raise OffsetSpecError("partitions must list at least one (topic, partition) pair.")
        return cls("partitions", partition_list=tuple(sorted(pairs)))

    def select(self, partition_counts: Mapping[str, int]) -> list[tuple[str, int]]:
        """The subscribed ``(topic, partition)`` pairs, sorted, given each topic's partition count.

        Raises:
            OffsetResolutionError: a named topic or partition does not exist, or the pattern
                matches no topic (internal topics left out, see :meth:`pattern`).
        """
        if self.kind == "topics":
            missing = [t for t in self.topic_names if t not in partition_counts]
            if missing:
                raise OffsetResolutionError(
                    f"unknown topic(s) {missing}: they do not exist on the cluster. Create them "
                    "or fix the names (topic auto-creation is not used for reads)."
                )
            return [(t, p) for t in self.topic_names for p in range(partition_counts[t])]
        if self.kind == "pattern":
            assert self.regex is not None
            compiled = re.compile(self.regex)
            matched = sorted(
                t for t in partition_counts
                if not t.startswith(("__", INTERNAL_TOPIC_PREFIX)) and compiled.fullmatch(t)
            )
            if not matched:
                raise OffsetResolutionError(
                    f"topic_pattern {self.regex!r} matches no topic on the cluster. Patterns "
                    "never match internal topics: names starting with '__' (Kafka's own) or "
                    f"{INTERNAL_TOPIC_PREFIX!r} (this package's ledger and run pins). Fix the "
                    "pattern (it must match whole names), or name an internal topic with "
                    "topics= to read it."
                )
            return [(t, p) for t in matched for p in range(partition_counts[t])]
        unknown = [
            (t, p) for t, p in self.partition_list
            if t not in partition_counts or p >= partition_counts[t]
        ]
        if unknown:
            raise OffsetResolutionError(f"unknown partition(s) {unknown}: not on the cluster.")
        return list(self.partition_list)

    def __str__(self) -> str:
        if self.kind == "topics":
            return "topics:" + ",".join(self.topic_names)
        if self.kind == "pattern":
            return f"pattern:{self.regex}"
        return "partitions:" + ",".join(f"{t}/{p}" for t, p in self.partition_list)
