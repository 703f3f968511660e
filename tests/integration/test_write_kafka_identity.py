"""An exactly_once write whose input is a pinned slice (``input_identity``) evaluates its input
once: no pre-pass; the ledger records the identity; another identity is refused; a task whose
input Spark cut short aborts; a bad row still fails the write with nothing visible.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import LedgerError, WriteConfigError
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.spark.write.writer import write_kafka
from tools.write_kafka_rows import read_committed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PREFIX = "test-identity"
ROWS = 3000


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


def test_an_identity_write_reads_its_input_once_and_a_rerun_reads_nothing(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    out, ledger = new_topic(partitions=2), _ledger(new_topic)
    write_id = f"identity-{uuid.uuid4().hex}"
    df, seen = _counted(spark)

    first = _write(df, kafka_config, out, ledger, write_id, _identity())

    assert seen.value == ROWS  # one evaluation: no pre-pass
    assert first.records_written == ROWS and first.skipped_tasks == ()
    assert _contents(kafka_config, out) == _expected()

    again = _write(df, kafka_config, out, ledger, write_id, _identity())

    assert seen.value == ROWS  # a complete write's re-run runs no Spark job
    assert again.records_written == 0 and again.skipped_tasks == (0, 1, 2)
    assert _contents(kafka_config, out) == _expected()


def test_without_an_identity_the_input_is_evaluated_twice(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """The price the identity saves: the pre-pass evaluates the DataFrame once more."""
    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    df, seen = _counted(spark)

    _write(df, kafka_config, out, ledger, f"plain-{uuid.uuid4().hex}", None)

    assert seen.value == 2 * ROWS
    assert _contents(kafka_config, out) == _expected()


def test_a_rerun_with_another_identity_is_refused_before_anything_is_written(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    write_id = f"identity-{uuid.uuid4().hex}"
    _write(_counted(spark)[0], kafka_config, out, ledger, write_id, _identity())
    other, seen = _counted(spark, ROWS + 30)

    with pytest.raises(LedgerError) as caught:
        _write(other, kafka_config, out, ledger, write_id, _identity(start=30))

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


def test_a_task_whose_input_spark_cut_short_commits_nothing(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """An upstream failure in the writing task ends its input early as if the partition had
    ended; without a pre-pass's count the task finds out from the worker's input stream."""
    from pyspark.sql import functions as F

    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    rows = 60_000  # several Arrow batches before the failure
    df = spark.range(0, rows, numPartitions=1)
    df = df.select(F.when(df.id == rows - 5000, F.raise_error(F.lit("upstream failure")))
                   .otherwise(df.id).cast("string").cast("binary").alias("value"))

    with pytest.raises(Exception, match="upstream failure|was cut short|did not mark the end"):
        _write(df, kafka_config, out, ledger, f"cut-{uuid.uuid4().hex}", _identity())

    assert _contents(kafka_config, out) == Counter()
    assert not [r for r in read_committed(kafka_config, ledger) if r.key.startswith(b'["v2"')]


@pytest.mark.parametrize("upstream", ["complete", "failing"])
def test_a_task_tells_a_complete_input_from_one_spark_cut_short(
    spark: Any, tmp_path: Any, upstream: str
) -> None:
    """What the previous test relies on, observed directly: after a JVM failure upstream the
    task's input iterator ends normally (after fewer rows), and only the worker's input stream
    tells the two apart."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from airflow_provider_kafka_spark.spark.write.task import input_reached_end

    rows, verdicts = 60_000, tmp_path / "verdicts.txt"
    df = spark.range(0, rows, numPartitions=1)
    if upstream == "failing":
        df = df.select(F.when(df.id == rows - 5000, F.raise_error(F.lit("upstream failure")))
                       .otherwise(df.id).alias("id"))

    def task(batches: Any) -> Any:
        seen = sum(batch.num_rows for batch in batches)
        with open(verdicts, "a") as out:
            out.write(f"{seen} {input_reached_end()}\n")
        yield pa.RecordBatch.from_pydict({"n": pa.array([seen], pa.int64())})

    if upstream == "complete":
        assert df.mapInArrow(task, "n long").collect()[0]["n"] == rows
        assert verdicts.read_text() == f"{rows} True\n"
    else:
        with pytest.raises(Exception, match="upstream failure"):
            df.mapInArrow(task, "n long").collect()
        seen, verdict = verdicts.read_text().split()
        assert int(seen) < rows and verdict == "False"
