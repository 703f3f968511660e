"""An exactly_once write whose input is a pinned slice (``input_identity``): the ledger records
the identity and another identity is refused; read with the readers' end rows
(``read_kafka(split_ends=True)``) the input is evaluated once (no pre-pass) and a task whose
input Spark cut short aborts; without them a pre-pass counts each partition; a bad row still
fails the write with nothing visible.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import InputTruncatedError, LedgerError, WriteConfigError
from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.spark.split_ends import SPLIT_END_COLUMN, SplitEnds
from airflow_provider_kafka_spark.spark.write.writer import write_kafka
from tools.kafka_records import produce
from tools.write_kafka_rows import read_committed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PREFIX = "test-identity"
ROWS = 3000
BIG = 60_000  # several Arrow batches before an upstream failure


def _identity(start: int = 0) -> str:
    return OffsetRanges((PartitionRange("input", 0, start, start + ROWS),)).identity()


def _counted(spark: Any, rows: int = ROWS, *, partition: Any = None) -> tuple[Any, Any]:
    """Rows ``k<i>``/``v<i>`` in 3 Spark partitions, and an accumulator counting the rows that
    were computed (every evaluation of the DataFrame adds its rows)."""
    from pyspark.sql import functions as F

    seen = spark.sparkContext.accumulator(0)

    def count(batches: Any) -> Any:
        for batch in batches:
            seen.add(batch.num_rows)
            yield batch

    df = spark.range(0, rows, numPartitions=3).mapInArrow(count, "id long")
    columns = [F.concat(F.lit("k"), df.id).cast("binary").alias("key"),
               F.concat(F.lit("v"), df.id).cast("binary").alias("value")]
    if partition is not None:
        columns.append(partition(df.id).alias("partition"))
    return df.select(*columns), seen


def _produced(kafka_config: dict[str, Any], topic: str, rows: range, partitions: int) -> None:
    """Records ``k<i>``/``v<i>`` for ``i`` in ``rows``, record ``i`` in partition
    ``i % partitions``."""
    ms = int(time.time() * 1000)
    produce(kafka_config, topic, [(i % partitions, f"k{i}".encode(), f"v{i}".encode(), ms)
                                  for i in rows])


def _slice(kafka_config: dict[str, Any], topic: str) -> OffsetRanges:
    return resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")


def _read(spark: Any, kafka_config: dict[str, Any], ranges: OffsetRanges, *,
          fail_at: int | None = None, grouped: bool = False) -> tuple[Any, Any]:
    """The records of ``ranges`` as read (``key``, ``value``) with the readers' end rows (one
    split, so one Spark partition, per Kafka partition; ``grouped``: one split of them all),
    and an accumulator counting the records read (every evaluation adds its records).
    ``fail_at``: the record at this offset fails the Spark task in the JVM, between the reader
    and what consumes the DataFrame."""
    from pyspark.sql import functions as F

    from airflow_provider_kafka_spark.spark import read_kafka

    seen = spark.sparkContext.accumulator(0)

    def count(batches: Any) -> Any:
        for batch in batches:
            seen.add(batch.column(SPLIT_END_COLUMN).null_count)
            yield batch

    size = ranges.total() if grouped else max(r.size for r in ranges.ranges)
    df = read_kafka(spark, ranges, kafka_config, include_headers=False, split_ends=True,
                    max_records_per_split=max(size, 1))
    df = df.select("key", "value", "offset", SPLIT_END_COLUMN)
    df = df.mapInArrow(count, df.schema)
    value = F.col("value")
    if fail_at is not None:
        value = F.when(F.col("offset") == fail_at, F.raise_error(F.lit("upstream failure"))) \
            .otherwise(value)
    return df.select("key", value.alias("value"), SPLIT_END_COLUMN), seen


def test_an_identity_write_of_one_split_of_several_partitions_checks_each_range(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """One split of the three partitions' ranges: one task, one transaction, three end rows;
    a re-run skips the task."""
    source, out, ledger = new_topic(partitions=3), new_topic(partitions=2), _ledger(new_topic)
    _produced(kafka_config, source, range(ROWS), 3)
    ranges = _slice(kafka_config, source)
    write_id = f"grouped-{uuid.uuid4().hex}"
    df, seen = _read(spark, kafka_config, ranges, grouped=True)

    first = _write(df, kafka_config, out, ledger, write_id, ranges.identity())

    assert seen.value == ROWS
    assert first.records_written == ROWS and first.records_per_task == {0: ROWS}
    assert _contents(kafka_config, out) == _expected()
    again = _write(df, kafka_config, out, ledger, write_id, ranges.identity())
    assert again.records_written == 0 and again.skipped_tasks == (0,)
    assert _contents(kafka_config, out) == _expected()


@pytest.fixture(scope="module")
def big_slice(kafka_config: dict[str, Any], kafka_admin: Any) -> Iterator[OffsetRanges]:
    """:data:`BIG` records in one Kafka partition: one split, one Spark task."""
    from tests.support.topics import create_topic

    topic = create_topic(kafka_admin, f"big-{uuid.uuid4().hex[:10]}", 1)
    _produced(kafka_config, topic, range(BIG), 1)
    yield _slice(kafka_config, topic)
    for future in kafka_admin.delete_topics([topic]).values():
        future.result(timeout=30)


def _ledger(new_topic: Any) -> str:
    return new_topic(partitions=1, prefix="ledger", **{"cleanup.policy": "compact"})


def _contents(kafka_config: dict[str, Any], topic: str) -> Counter[tuple[Any, Any]]:
    return Counter((r.key, r.value) for r in read_committed(kafka_config, topic))


def _expected(rows: int = ROWS) -> Counter[tuple[Any, Any]]:
    return Counter((f"k{i}".encode(), f"v{i}".encode()) for i in range(rows))


def _write(df: Any, kafka_config: dict[str, Any], out: str, ledger: str, write_id: str,
           identity: str | None) -> Any:
    return write_kafka(df, kafka_config, topic=out, transactional_id_prefix=PREFIX,
                       write_id=write_id, ledger_topic=ledger, input_identity=identity)


def test_an_identity_write_of_a_read_with_end_rows_reads_its_input_once(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """No pre-pass: each task checks by its split's end row that its input is whole; the end
    rows are not written; a re-run reads nothing."""
    source, out, ledger = new_topic(partitions=3), new_topic(partitions=2), _ledger(new_topic)
    _produced(kafka_config, source, range(ROWS), 3)
    ranges = _slice(kafka_config, source)
    write_id = f"identity-{uuid.uuid4().hex}"
    df, seen = _read(spark, kafka_config, ranges)

    first = _write(df, kafka_config, out, ledger, write_id, ranges.identity())

    assert seen.value == ROWS  # one evaluation: no pre-pass
    assert first.records_written == ROWS and first.skipped_tasks == ()
    assert first.records_per_task == {0: ROWS // 3, 1: ROWS // 3, 2: ROWS // 3}
    assert _contents(kafka_config, out) == _expected()

    again = _write(df, kafka_config, out, ledger, write_id, ranges.identity())

    assert seen.value == ROWS  # a complete write's re-run runs no Spark job
    assert again.records_written == 0 and again.skipped_tasks == (0, 1, 2)
    assert _contents(kafka_config, out) == _expected()


@pytest.mark.parametrize("identity", [None, _identity()], ids=["no identity", "identity"])
def test_without_end_rows_the_input_is_evaluated_twice(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any, identity: str | None
) -> None:
    """The price the end rows save: the pre-pass evaluates the DataFrame once more (to count
    each partition's rows, and without an identity to fingerprint them)."""
    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    df, seen = _counted(spark)

    result = _write(df, kafka_config, out, ledger, f"plain-{uuid.uuid4().hex}", identity)

    assert seen.value == 2 * ROWS
    assert result.records_written == ROWS
    assert _contents(kafka_config, out) == _expected()


def test_the_pre_pass_counts_rows_when_it_projects_no_column(spark: Any) -> None:
    """With ``topic=``, no fingerprints (an identity) and no ``partition`` or ``headers``
    column the pre-pass has nothing to project; it still counts each partition's rows (it
    counted 0, so a pinned write without end rows, e.g. on Spark Connect, wrote nothing)."""
    from airflow_provider_kafka_spark.spark.write.prepass import scan_input

    df, _ = _counted(spark)

    scan = scan_input(df, "out", digest=False)

    assert scan.num_partitions == 3
    assert scan.rows_per_index() == (1000, 1000, 1000)


def test_a_rerun_with_another_identity_is_refused_before_anything_is_written(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    source, out, ledger = new_topic(partitions=1), new_topic(partitions=1), _ledger(new_topic)
    _produced(kafka_config, source, range(ROWS), 1)
    ranges = _slice(kafka_config, source)
    write_id = f"identity-{uuid.uuid4().hex}"
    _write(_read(spark, kafka_config, ranges)[0], kafka_config, out, ledger, write_id,
           ranges.identity())
    _produced(kafka_config, source, range(ROWS, ROWS + 30), 1)
    longer = _slice(kafka_config, source)
    other, seen = _read(spark, kafka_config, longer)

    with pytest.raises(LedgerError) as caught:
        _write(other, kafka_config, out, ledger, write_id, longer.identity())

    message = str(caught.value)
    assert "already committed task 0 from other input (input identity: " in message
    assert "use a new write_id" in message and "Nothing was written" in message
    assert seen.value == 0
    assert _contents(kafka_config, out) == _expected()


@pytest.mark.parametrize("bad", ["partition out of range", "null header key"])
def test_a_bad_row_fails_an_identity_write_with_nothing_visible(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any, bad: str
) -> None:
    from pyspark.sql import functions as F

    out, ledger = new_topic(partitions=2), _ledger(new_topic)
    if bad == "partition out of range":  # the last row of the last Spark partition
        df, _ = _counted(spark, partition=lambda i: F.when(i == ROWS - 1, 7).otherwise(0))
        expected = r"column 'partition' holds 7 in Spark partition 2"
    else:
        df, _ = _counted(spark)
        df = df.withColumn("headers", F.array(F.struct(
            F.when(F.col("key") == F.lit(b"k2999"), F.lit(None)).otherwise(F.lit("h"))
            .cast("string").alias("key"), F.lit(b"x").alias("value"))))
        expected = r"header with a null key in 1 row of Spark partition 2"

    with pytest.raises(WriteConfigError, match=expected):
        _write(df, kafka_config, out, ledger, f"bad-{uuid.uuid4().hex}", _identity())

    assert _contents(kafka_config, out) == Counter()


def test_without_end_rows_an_upstream_failure_fails_the_pre_pass(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """An upstream failure in the writing task ends its input early as if the partition had
    ended; without end rows the pre-pass counts the rows first (and meets the failure)."""
    from pyspark.sql import functions as F

    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    rows = BIG
    df = spark.range(0, rows, numPartitions=1)
    df = df.select(F.when(df.id == rows - 5000, F.raise_error(F.lit("upstream failure")))
                   .otherwise(df.id).cast("string").cast("binary").alias("value"))

    with pytest.raises(Exception, match="upstream failure|was cut short"):
        _write(df, kafka_config, out, ledger, f"cut-{uuid.uuid4().hex}", _identity())

    assert _contents(kafka_config, out) == Counter()
    assert not [r for r in read_committed(kafka_config, ledger) if r.key.startswith(b'["v2"')]


def test_a_task_whose_input_spark_cut_short_commits_nothing(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any, big_slice: OffsetRanges
) -> None:
    """The records as read with end rows, no pre-pass: an upstream failure in the writing
    task (between the reader and the writer) ends the writer's input before its split's end
    row, so the task aborts instead of committing the records it got."""
    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    df, _ = _read(spark, kafka_config, big_slice, fail_at=BIG - 5000)

    with pytest.raises(Exception, match="upstream failure|no end of its split"):
        _write(df, kafka_config, out, ledger, f"cut-{uuid.uuid4().hex}", big_slice.identity())

    assert _contents(kafka_config, out) == Counter()
    assert not [r for r in read_committed(kafka_config, ledger) if r.key.startswith(b'["v2"')]


@pytest.mark.parametrize("upstream", ["complete", "failing"])
def test_a_task_tells_a_complete_input_from_one_spark_cut_short(
    spark: Any, kafka_config: dict[str, Any], tmp_path: Any, big_slice: OffsetRanges,
    upstream: str
) -> None:
    """What the previous test relies on, observed directly: after a JVM failure upstream the
    task's input iterator ends normally (after fewer rows), and only the split's end row tells
    the two apart."""
    import pyarrow as pa

    verdicts = tmp_path / "verdicts.txt"
    df, _ = _read(spark, kafka_config, big_slice,
                  fail_at=BIG - 5000 if upstream == "failing" else None)

    def task(batches: Any) -> Any:
        ends = SplitEnds(batches)
        seen = sum(batch.num_rows for batch in ends)
        try:
            ends.check("task")
            verdict = "whole"
        except InputTruncatedError:
            verdict = "cut"
        with open(verdicts, "a") as out:
            out.write(f"{seen} {verdict}\n")
        yield pa.RecordBatch.from_pydict({"n": pa.array([seen], pa.int64())})

    if upstream == "complete":
        assert df.mapInArrow(task, "n long").collect()[0]["n"] == BIG
        assert verdicts.read_text() == f"{BIG} whole\n"
    else:
        with pytest.raises(Exception, match="upstream failure"):
            df.mapInArrow(task, "n long").collect()
        seen, verdict = verdicts.read_text().split()
        assert 0 < int(seen) < BIG and verdict == "cut"


def test_rows_dropped_between_the_reader_and_the_writer_are_refused(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """A filter between the reader and the writer changes a split's records: its end row no
    longer tells whether the input is whole, so the write is refused with nothing visible."""
    from pyspark.sql import functions as F

    source, out, ledger = new_topic(partitions=1), new_topic(partitions=1), _ledger(new_topic)
    _produced(kafka_config, source, range(ROWS), 1)
    ranges = _slice(kafka_config, source)
    df, _ = _read(spark, kafka_config, ranges)

    with pytest.raises(WriteConfigError, match=r"holds 2999 records of split .* but the reader "
                                               r"handed on 3000: rows were dropped or added"):
        _write(df.where(F.col("value").isNull() | (F.col("value") != F.lit(b"v7"))),
               kafka_config, out, ledger, f"filtered-{uuid.uuid4().hex}", ranges.identity())

    assert _contents(kafka_config, out) == Counter()
