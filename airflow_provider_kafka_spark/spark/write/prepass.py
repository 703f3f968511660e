"""``write_kafka``'s pre-pass: one Spark stage over the input that finds every bad row before
anything is written, and fingerprints each partition's input for ``exactly_once``.

:func:`scan_input` aggregates, per Spark partition index and target topic, the row count, the
range of the ``partition`` column, the rows with a null header key and (``exactly_once``) the
sum of the rows' hashes; :func:`check_rows` refuses the first bad row it found;
:meth:`InputScan.inputs` gives each partition's :class:`TaskInput` for the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import KafkaWriteError, WriteConfigError, kafka_errors
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.spark.write.checks import ACCEPTED_COLUMNS, rows_text
from airflow_provider_kafka_spark.spark.write.cluster import Cluster, check_topics_exist
from airflow_provider_kafka_spark.spark.write.ledger import TaskInput

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class _Group:
    """One row of the pre-pass: the rows of Spark partition ``index`` that go to ``topic``
    (``None``: a null ``topic`` column)."""

    index: int
    topic: str | None
    rows: int
    min_partition: int | None  # of the 'partition' column, nulls ignored
    max_partition: int | None
    null_header_key_rows: int  # rows with a header whose key (or the header itself) is null
    hash_sum: int | None  # the sum of the rows' xxhash64 (exactly_once only)


@dataclass(frozen=True)
class InputScan:
    """What the pre-pass found in the DataFrame, by Spark partition index and topic, and how
    many partitions the DataFrame has (empty ones included)."""

    groups: tuple[_Group, ...]
    num_partitions: int
    digested: bool = True  # whether the rows' hashes were summed (else no digest is known)

    def rows_per_index(self) -> tuple[int, ...]:
        """The row count of each Spark partition index."""
        counts = [0] * self.num_partitions
        for g in self.groups:
            counts[g.index] += g.rows
        return tuple(counts)

    def inputs(self) -> list[TaskInput]:
        """Each partition's input fingerprint (see :class:`TaskInput` for the digest)."""
        n = self.num_partitions
        rows = self.rows_per_index()
        topics: list[set[str]] = [set() for _ in range(n)]
        sums = [0] * n
        for g in self.groups:
            if g.topic is not None:
                topics[g.index].add(g.topic)
            sums[g.index] += g.hash_sum or 0
        return [TaskInput(rows[i], tuple(sorted(topics[i])),
                          f"{sums[i] % 2**64:016x}" if self.digested else None)
                for i in range(n)]

    def first_index_of_topics(self) -> dict[str | None, int]:
        """Every topic the rows go to, with the first Spark partition index holding one."""
        first: dict[str | None, int] = {}
        for g in self.groups:
            first[g.topic] = min(first.get(g.topic, g.index), g.index)
        return first


_SCAN_SCHEMA = ("index int, topic string, rows long, min_partition int, max_partition int, "
                "null_header_keys long, hash_high long, hash_low long")


def scan_input(df: DataFrame, topic: str | None, *, digest: bool) -> InputScan:
    """The pre-pass: one narrow Spark stage over ``df`` (no RDD API, so it runs on Spark
    Connect too). The JVM projects what each row contributes (its target topic, with
    ``digest`` the row's ``xxhash64``, its ``partition``, whether a header key is null); a
    ``mapInArrow`` task per Spark partition aggregates its rows by topic and always answers,
    so empty partitions are counted too. See :class:`TaskInput` for the digest.

    Raises:
        KafkaWriteError: Spark lost a task's answer.
    """
    from pyspark.sql import functions as F

    columns = set(df.columns)
    target = F.lit(topic) if topic is not None else F.col("topic")
    projected = [] if topic is not None else [F.col("topic")]
    if digest:
        hashed = [target, *(F.col(c) for c in ACCEPTED_COLUMNS if c != "topic" and c in columns)]
        projected.append(F.xxhash64(*hashed).alias("hash"))
    if "partition" in columns:
        projected.append(F.col("partition").cast("int").alias("partition"))
    if "headers" in columns:
        projected.append(F.exists(
            "headers", lambda h: h.isNull() | h["key"].isNull()).alias("null_header_key"))
    if not projected:  # over no column the scanner counted no rows: give it one
        projected.append(F.lit(True).alias("row"))
    with kafka_errors():
        rows = df.select(*projected).mapInArrow(_partition_scanner(topic), _SCAN_SCHEMA) \
            .collect()
    indices = {r["index"] for r in rows}
    num_partitions = max(indices, default=-1) + 1
    if indices != set(range(num_partitions)):  # every task answers, even for no rows
        raise KafkaWriteError(
            f"the pre-pass got answers from Spark partitions {sorted(indices)}, not from each of "
            f"0..{num_partitions - 1}; Spark lost a task's result. Run the write again. "
            "Nothing was written.")
    groups = [
        _Group(index=r["index"], topic=r["topic"], rows=r["rows"],
               min_partition=r["min_partition"], max_partition=r["max_partition"],
               null_header_key_rows=r["null_header_keys"],
               hash_sum=r["hash_high"] * 2**32 + r["hash_low"] if digest else None)
        for r in rows if r["rows"] > 0
    ]
    return InputScan(tuple(sorted(groups, key=lambda g: (g.index, g.topic or ""))),
                     num_partitions, digest)


def _partition_scanner(topic: str | None) -> Callable[[Iterator[pa.RecordBatch]],
                                                      Iterator[pa.RecordBatch]]:
    """The pre-pass task: one row per topic of its Spark partition (one row with 0 rows when
    the partition is empty). Hashes are summed exactly as two int64 halves (``hash >> 32``
    and ``hash & 0xFFFFFFFF``), which cannot overflow below 2**31 rows per partition."""

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        totals: dict[str | None, list[Any]] = {}
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            keys = [] if topic is not None else ["topic"]
            aggregates: list[tuple[Any, str]] = [([], "count_all")]
            if "hash" in table.column_names:
                table = table.append_column("hi", pc.shift_right(table["hash"], 32)) \
                    .append_column("lo", pc.bit_wise_and(table["hash"], 0xFFFFFFFF))
                aggregates += [("hi", "sum"), ("lo", "sum")]
            if "partition" in table.column_names:
                aggregates += [("partition", "min"), ("partition", "max")]
            if "null_header_key" in table.column_names:
                aggregates.append(("null_header_key", "sum"))
            for g in table.group_by(keys, use_threads=False).aggregate(aggregates).to_pylist():
                name = topic if topic is not None else g["topic"]
                acc = totals.setdefault(name, [0, None, None, 0, 0, 0])
                acc[0] += g["count_all"]
                low, high = g.get("partition_min"), g.get("partition_max")
                if low is not None:
                    acc[1] = low if acc[1] is None else min(acc[1], low)
                    acc[2] = high if acc[2] is None else max(acc[2], high)
                acc[3] += g.get("null_header_key_sum") or 0
                acc[4] += g.get("hi_sum") or 0
                acc[5] += g.get("lo_sum") or 0
        if not totals:
            totals[None] = [0, None, None, 0, 0, 0]
        names = list(totals)
        values = list(zip(*totals.values(), strict=True))
        yield pa.RecordBatch.from_pydict(
            {"index": pa.array([context.partitionId()] * len(names), pa.int32()),
             "topic": pa.array(names, pa.string()),
             "rows": pa.array(values[0], pa.int64()),
             "min_partition": pa.array(values[1], pa.int32()),
             "max_partition": pa.array(values[2], pa.int32()),
             "null_header_keys": pa.array(values[3], pa.int64()),
             "hash_high": pa.array(values[4], pa.int64()),
             "hash_low": pa.array(values[5], pa.int64())})

    return scan


def check_rows(admin: AdminClient, scan: InputScan, topic: str | None, cluster: Cluster,
               kafka_config: KafkaConfig) -> None:
    """Refuse the first bad row the pre-pass found, naming its column, value and Spark
    partition index (bad rows in other partitions are counted).

    Raises:
        WriteConfigError: a null ``topic``, a topic that does not exist, a ``partition`` that
            is negative or not in its topic, a header with a null key.
    """
    nothing = "Nothing was written."
    null_topics = [g for g in scan.groups if g.topic is None]
    if topic is None and null_topics:
        first = null_topics[0]
        raise WriteConfigError(
            f"column 'topic' is null in {rows_text(first.rows)} of Spark partition "
            f"{first.index}{_elsewhere(g.index for g in null_topics[1:])}: every row needs a "
            "topic. Fill the column (e.g. coalesce(topic, lit('fallback'))) or pass topic=. "
            f"{nothing}"
        )
    cluster = check_topics_exist(admin, cluster, scan.first_index_of_topics(), kafka_config)
    for g in scan.groups:
        if g.topic is None or g.min_partition is None or g.max_partition is None:
            continue
        count = cluster.partitions[g.topic]
        if g.min_partition < 0:
            raise WriteConfigError(
                f"column 'partition' holds {g.min_partition} in Spark partition {g.index} (a "
                f"row for topic {g.topic!r}): a partition number must be >= 0; null lets the "
                f"partitioner choose. Fix the column. {nothing}"
            )
        if g.max_partition >= count:
            raise WriteConfigError(
                f"column 'partition' holds {g.max_partition} in Spark partition {g.index} (a "
                f"row for topic {g.topic!r}), but {g.topic!r} has partitions 0..{count - 1}. "
                "Use an existing partition, or null to let the partitioner choose (or add "
                f"partitions to the topic first). {nothing}"
            )
    bad_headers = [g for g in scan.groups if g.null_header_key_rows]
    if bad_headers:
        index = bad_headers[0].index
        rows = sum(g.null_header_key_rows for g in bad_headers if g.index == index)
        raise WriteConfigError(
            f"column 'headers' has a header with a null key in {rows_text(rows)} of Spark "
            f"partition {index}{_elsewhere(g.index for g in bad_headers if g.index != index)}: "
            "Kafka header keys must be strings (the Java client rejects a null key too). Fill "
            "or drop such headers, e.g. filter(headers, h -> h.key IS NOT NULL). "
            f"{nothing}"
        )


def _elsewhere(indices: Iterable[int]) -> str:
    others = sorted(set(indices))
    if not others:
        return ""
    shown = ", ".join(map(str, others[:10])) + (", ..." if len(others) > 10 else "")
    return f" (and in Spark partitions {shown})"
