"""What a Kafka read counted, per partition, for logs and XCom: the statistics of its records,
gathered by the readers in the pass that reads them (:class:`ReadSummary`) or by one
aggregation job over a Kafka DataFrame (:func:`summarize`), and the offsets it could not read
because Kafka had deleted them (:class:`LostOffsets`). The readers' counts reach the driver in
Spark accumulators, one entry per split (:class:`SplitSummaries`, :class:`SplitLosses`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, StringType, TimestampNTZType, TimestampType

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.spark.schema import check_kafka_frame

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator

    from airflow_provider_kafka_spark.offsets.ranges import PartitionRange

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COLUMNS = ("topic", "partition", "offset", "timestamp")
_TYPES = (("topic", StringType, "a string"), ("partition", IntegralType, "an integer"),
          ("offset", IntegralType, "an integer"),
          ("timestamp", (TimestampType, TimestampNTZType), "a timestamp"))


@dataclass(frozen=True, order=True)
class PartitionSummary:
    """What a read returned for one topic partition.

    ``first_offset``/``last_offset`` are the smallest and largest offsets present (both
    inclusive; gaps are possible); the timestamps are the record timestamps' min and max (UTC);
    ``bytes`` is the size of the keys and values (headers not counted), or None when the
    DataFrame has no ``key``/``value`` columns.
    """

    topic: str
    partition: int
    records: int
    first_offset: int
    last_offset: int
    min_timestamp: datetime | None
    max_timestamp: datetime | None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: timestamps as ISO-8601 UTC strings."""
        def iso(ts: datetime | None) -> str | None:
            return None if ts is None else ts.isoformat()

        return {
            "topic": self.topic,
            "partition": self.partition,
            "records": self.records,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "min_timestamp": iso(self.min_timestamp),
            "max_timestamp": iso(self.max_timestamp),
            "bytes": self.bytes,
        }


def summarize(df: DataFrame) -> list[PartitionSummary]:
    """One :class:`PartitionSummary` per (topic, partition) present in ``df``, sorted.

    ``df`` needs the ``topic``, ``partition``, ``offset`` and ``timestamp`` columns of
    :func:`~airflow_provider_kafka_spark.spark.read_kafka`. Runs one aggregation job;
    partitions without records are absent. Timestamps come back in UTC whatever the session
    time zone (Spark returns naive datetimes in the driver's local time; they are converted).

    Raises:
        ConfigurationError: ``df`` is not a DataFrame with those columns, of those types, that
            Spark can tell apart from the DataFrame's other columns.
    """
    df = check_kafka_frame(df, _COLUMNS, caller="summarize", once=(*_COLUMNS, "key", "value"))
    for name, types, meaning in _TYPES:
        found = df.schema[name].dataType
        if not isinstance(found, types):
            raise ConfigurationError(
                f"summarize needs the column {name!r} as {meaning}, as read_kafka returns it; "
                f"got {found.simpleString()}. Pass the DataFrame of read_kafka, or cast the "
                "column back.")
    sized = {"key", "value"} <= set(df.columns)
    size = (F.coalesce(F.octet_length("key"), F.lit(0))
            + F.coalesce(F.octet_length("value"), F.lit(0))) if sized else F.lit(None)
    rows = (
        df.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.min(F.unix_micros("timestamp")).alias("min_us"),
            F.max(F.unix_micros("timestamp")).alias("max_us"),
            F.sum(size).cast("long").alias("bytes"),
        )
        .collect()
    )
    return sorted(
        PartitionSummary(
            topic=row["topic"],
            partition=row["partition"],
            records=row["records"],
            first_offset=row["first_offset"],
            last_offset=row["last_offset"],
            min_timestamp=_from_micros(row["min_us"]),
            max_timestamp=_from_micros(row["max_us"]),
            bytes=row["bytes"],
        )
        for row in rows
    )


def _from_micros(micros: int | None) -> datetime | None:
    if micros is None:
        return None
    return _EPOCH + timedelta(microseconds=micros)


@dataclass(frozen=True)
class SplitCounts:
    """What the reader of one split returned, counted over its Arrow batches as they passed:
    ``records``; the smallest and largest offsets and record timestamps (microseconds since
    the epoch; None without records); ``bytes`` of the keys and values."""

    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    min_us: int | None = None
    max_us: int | None = None
    bytes: int = 0

    def add(self, batch: pa.RecordBatch) -> SplitCounts:
        """These counts with ``batch`` (the reader's schema) added; ``bytes`` counts the keys
        and values that are still bytes (a decoded one is not counted)."""
        if batch.num_rows == 0:
            return self
        offsets = pc.min_max(batch.column("offset"))
        times = pc.min_max(batch.column("timestamp").cast(pa.int64()))
        size = sum(pc.sum(pc.binary_length(batch.column(name))).as_py() or 0
                   for name in ("key", "value")
                   if pa.types.is_binary(batch.schema.field(name).type))
        return SplitCounts(
            self.records + batch.num_rows,
            _least(self.first_offset, offsets["min"].as_py()),
            _most(self.last_offset, offsets["max"].as_py()),
            _least(self.min_us, times["min"].as_py()),
            _most(self.max_us, times["max"].as_py()),
            self.bytes + size)


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _most(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def combine(splits: Iterable[tuple[tuple[str, int], SplitCounts]]) -> list[PartitionSummary]:
    """The :class:`PartitionSummary` of each ``(topic, partition)`` from the counts of its
    splits; partitions without records are absent; sorted."""
    totals: dict[tuple[str, int], SplitCounts] = {}
    for key, counts in splits:
        before = totals.get(key, SplitCounts())
        totals[key] = SplitCounts(
            before.records + counts.records,
            _least(before.first_offset, counts.first_offset),
            _most(before.last_offset, counts.last_offset),
            _least(before.min_us, counts.min_us), _most(before.max_us, counts.max_us),
            before.bytes + counts.bytes)
    return sorted(
        PartitionSummary(topic, partition, c.records, c.first_offset, c.last_offset,
                         _from_micros(c.min_us), _from_micros(c.max_us), c.bytes)
        for (topic, partition), c in totals.items()
        if c.first_offset is not None and c.last_offset is not None)


class SplitSummaries(AccumulatorParam[dict["PartitionRange", SplitCounts]]):
    """Accumulator values ``{split: SplitCounts}`` of the splits read to their end. A split
    whose task Spark runs again (a retry, a recomputed stage, a speculative copy) reads the
    same records and counts once: merging keeps one entry per split."""

    def zero(self, value: dict[PartitionRange, SplitCounts]) -> dict[PartitionRange, SplitCounts]:
        return {}

    def addInPlace(self, value1: dict[PartitionRange, SplitCounts],
                   value2: dict[PartitionRange, SplitCounts]) -> dict[PartitionRange, SplitCounts]:
        value1.update(value2)
        return value1


def counted(batches: Iterable[pa.RecordBatch], split: PartitionRange,
            accumulator: Accumulator[dict[PartitionRange, SplitCounts]],
            ) -> Iterator[pa.RecordBatch]:
    """``batches`` of ``split`` passed through; once the last one has passed, their counts go
    to ``accumulator`` (a split that is not read to its end reports nothing)."""
    counts = SplitCounts()
    for batch in batches:
        counts = counts.add(batch)
        yield batch
    accumulator.add({split: counts})


class ReadSummary:
    """The per-partition statistics of a :func:`~airflow_provider_kafka_spark.spark.read_kafka`
    gathered by the readers in the pass that reads the records, with no job of their own.

    Pass a new one as ``read_kafka(..., summary=ReadSummary())`` and call
    :meth:`partitions` after an action that read the whole DataFrame (the write). A Spark
    accumulator brings each split's counts to the driver as its task ends. Gathered only by
    ``engine="python"`` on a classic session (Spark Connect has no accumulators);
    :meth:`partitions` is None otherwise, and when any split was not read to its end (a
    transform that stops early, like ``limit``): then use :func:`summarize`.
    """

    def __init__(self) -> None:
        self._ranges: tuple[PartitionRange, ...] | None = None
        self._accumulator: Accumulator[dict[PartitionRange, SplitCounts]] | None = None

    def partitions(self) -> list[PartitionSummary] | None:
        """One :class:`PartitionSummary` per partition with records, sorted, as
        :func:`summarize` gives them; None unless the splits that reported cover every range
        read, offset by offset."""
        if self._ranges is None:
            return None
        reported = {} if self._accumulator is None else self._accumulator.value
        ends: dict[tuple[str, int], dict[int, int]] = {}  # per partition: split start -> stop
        for split in reported:
            ends.setdefault((split.topic, split.partition), {})[split.start] = split.stop
        for r in self._ranges:
            position, stops = r.start, ends.get((r.topic, r.partition), {})
            while position < r.stop and position in stops:
                position = stops[position]
            if position < r.stop:
                return None
        return combine(((split.topic, split.partition), counts)
                       for split, counts in reported.items())

    def _track(self, ranges: Iterable[PartitionRange],
               accumulator: Accumulator[dict[PartitionRange, SplitCounts]] | None) -> None:
        self._ranges = tuple(ranges)
        self._accumulator = accumulator


SplitKey = tuple[str, int, int]
"""``(topic, partition, split start)``: one split of a read."""


class SplitLosses(AccumulatorParam[dict[SplitKey, int]]):
    """Accumulator values ``{(topic, partition, split start): offsets skipped}``.

    Merging keeps the larger count of a split, never the sum: a split whose task Spark runs
    again (a retry, a recomputed cache block) counts once.
    """

    def zero(self, value: dict[SplitKey, int]) -> dict[SplitKey, int]:
        return {}

    def addInPlace(self, value1: dict[SplitKey, int],
                   value2: dict[SplitKey, int]) -> dict[SplitKey, int]:
        for key, skipped in value2.items():
            value1[key] = max(value1.get(key, 0), skipped)
        return value1


class LostOffsets:
    """What a :func:`~airflow_provider_kafka_spark.spark.read_kafka` with
    ``on_data_loss="skip"`` did not return because Kafka had already deleted it: a count of
    offsets per ``(topic, partition)``.

    Pass a new one as ``read_kafka(..., lost=LostOffsets())`` and read it after an action on
    the DataFrame (a ``count()``, the write). Per partition it sums the offsets lost

    * at resolution: the ranges' own ``OffsetRanges.lost`` (``resolve_offsets`` moved the
      start up);
    * before the read: range starts below the log start offset when ``read_kafka`` is called
      (found on the driver, known at once);
    * during the read (``engine="python"`` on a classic session): offsets deleted while the
      executors read them. A Spark accumulator brings these counts to the driver as the tasks
      finish; a split counts once even when Spark runs its task again.

    Offsets, not records: a deleted transaction marker counts too. Not counted, only logged:
    offsets deleted during the read with ``engine="spark-kafka"`` (Spark's kafka source skips
    them without a count). On Spark Connect (no accumulators) ``read_kafka`` refuses
    ``lost=`` with ``on_data_loss="skip"`` and ``engine="python"`` before reading.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[str, int], int] = {}
        self._during_read: Accumulator[dict[SplitKey, int]] | None = None

    def by_partition(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): offsets lost}``, sorted; partitions without loss are absent."""
        counts = dict(self._known)
        if self._during_read is not None:
            for (topic, partition, _start), skipped in self._during_read.value.items():
                counts[(topic, partition)] = counts.get((topic, partition), 0) + skipped
        return dict(sorted(counts.items()))

    def total(self) -> int:
        """All offsets lost, over every partition."""
        return sum(self.by_partition().values())

    def _track(self, known: Mapping[tuple[str, int], int],
               during_read: Accumulator[dict[SplitKey, int]] | None) -> None:
        self._known = {key: n for key, n in known.items() if n > 0}
        self._during_read = during_read
