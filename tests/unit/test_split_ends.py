"""The end rows of a split: the reader's side adds them, a writing task strips them and tells a
whole input from one cut short or changed on the way (no Spark job, no broker)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pyarrow as pa
import pytest

from airflow_provider_kafka_spark.errors import InputTruncatedError, WriteConfigError
from airflow_provider_kafka_spark.offsets.ranges import PartitionRange
from airflow_provider_kafka_spark.spark.split_ends import (
    SPLIT_END_COLUMN,
    SPLIT_END_DDL,
    SPLIT_END_TYPE,
    SplitEnds,
    with_split_end,
)

RECORDS = pa.schema([("key", pa.binary()), ("value", pa.binary())])
MARKED = RECORDS.append(pa.field(SPLIT_END_COLUMN, SPLIT_END_TYPE))
SPLIT = PartitionRange("orders", 2, 100, 110)


def _records(*sizes: int) -> list[pa.RecordBatch]:
    """Batches of ``sizes`` rows, values ``v0``, ``v1``... across them."""
    batches, n = [], 0
    for size in sizes:
        values = [f"v{n + i}".encode() for i in range(size)]
        batches.append(pa.RecordBatch.from_arrays([pa.array(values, pa.binary())] * 2,
                                                  schema=RECORDS))
        n += size
    return batches


def _rebatched(batches: list[pa.RecordBatch], rows: int) -> list[pa.RecordBatch]:
    """The rows of ``batches`` in batches of ``rows``, as Spark hands a writer its input."""
    return pa.Table.from_batches(batches).combine_chunks().to_batches(max_chunksize=rows)


def _consumed(ends: SplitEnds) -> list[bytes]:
    return [v for batch in ends for v in batch.column("value").to_pylist()]


def _failing(batches: list[pa.RecordBatch], after: int) -> Iterator[pa.RecordBatch]:
    yield from batches[:after]
    raise RuntimeError("the split's read failed")


def test_the_reader_adds_a_null_column_and_one_end_row_with_the_split_and_its_count() -> None:
    out = list(with_split_end(iter(_records(3, 0, 4)), SPLIT, MARKED))

    assert [b.schema for b in out] == [MARKED] * 4
    assert [b.num_rows for b in out] == [3, 0, 4, 1]
    assert all(b.column(SPLIT_END_COLUMN).null_count == b.num_rows for b in out[:3])
    end = out[-1]
    assert end.column(SPLIT_END_COLUMN).to_pylist() == [
        {"topic": "orders", "partition": 2, "start": 100, "stop": 110, "records": 7,
         "split": 0, "ranges": 1}]
    assert end.column("key").to_pylist() == end.column("value").to_pylist() == [None]


def test_a_split_whose_read_fails_has_no_end_row() -> None:
    out: list[pa.RecordBatch] = []
    with pytest.raises(RuntimeError, match="read failed"):
        out.extend(with_split_end(_failing(_records(3, 4), after=1), SPLIT, MARKED))

    assert [b.num_rows for b in out] == [3]


def test_an_empty_split_is_one_end_row_of_zero_records() -> None:
    ends = SplitEnds(with_split_end(iter(()), SPLIT, MARKED))

    assert _consumed(ends) == []
    ends.check("task 0")


@pytest.mark.parametrize("rows", [1, 3, 7, 8, 100])
def test_the_writer_gets_the_records_without_the_end_row_and_finds_them_whole(rows: int) -> None:
    """However Spark cuts the rows into batches: the end row alone, or after records in one
    batch."""
    marked = list(with_split_end(iter(_records(3, 4)), SPLIT, MARKED))
    ends = SplitEnds(_rebatched(marked, rows))

    batches = list(ends)

    assert all(b.schema == RECORDS for b in batches)
    assert [v for b in batches for v in b.column("value").to_pylist()] == [
        f"v{i}".encode() for i in range(7)]
    ends.check("task 0")


def test_an_input_cut_short_has_no_end_row() -> None:
    """What a writing task sees when a computation upstream of it in the same Spark task
    fails: its input ends early, as if the partition had ended."""
    marked = list(with_split_end(iter(_records(3, 4)), SPLIT, MARKED))
    ends = SplitEnds(_rebatched(marked, 2)[:2])

    assert len(_consumed(ends)) == 4
    with pytest.raises(InputTruncatedError) as caught:
        ends.check("task 5 of write 'w'")

    assert str(caught.value).startswith(
        "task 5 of write 'w' received 4 records and no end of its split: its input was cut "
        "short")
    assert caught.value.retryable


def test_an_input_without_any_batch_was_cut_short() -> None:
    ends = SplitEnds(iter(()))

    assert _consumed(ends) == []
    with pytest.raises(InputTruncatedError, match="received 0 records and no end"):
        ends.check("task 0")


def _table(*parts: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    return _rebatched([b for part in parts for b in part], 4)


@pytest.mark.parametrize(("input_", "problem"), [
    (lambda: _table(list(with_split_end(iter(_records(3)), SPLIT, MARKED)),
                    list(with_split_end(iter(_records(2)), PartitionRange("orders", 3, 0, 2),
                                        MARKED, index=1))),
     "holds the ends of several splits (orders/2 [100, 110), orders/3 [0, 2)): its partitions "
     "were merged or repartitioned"),
    (lambda: _table(list(with_split_end(iter(_records(3)), SPLIT, MARKED)),
                    list(with_split_end(iter(_records(2)), PartitionRange("orders", 3, 0, 2),
                                        MARKED))),
     "holds the ends of 2 ranges of a split of 1 (orders/2 [100, 110), orders/3 [0, 2)): its "
     "partitions were merged or repartitioned"),
    (lambda: _table(*(list(with_split_end(iter(_records(n)), PartitionRange("orders", p, 0, 9),
                                          MARKED, index=4, ranges=2))
                      for p, n in ((2, 3), (3, 2))),
                    [pa.RecordBatch.from_arrays([*_records(1)[0].columns,
                                                 pa.nulls(1, SPLIT_END_TYPE)], schema=MARKED)]),
     "holds 1 records after the end of split orders/3 [0, 9): its rows were reordered"),
    (lambda: _table(list(with_split_end(iter(_records(3)), SPLIT, MARKED)),
                    [pa.RecordBatch.from_arrays([*_records(2)[0].columns,
                                                 pa.nulls(2, SPLIT_END_TYPE)], schema=MARKED)]),
     "holds 2 records after the end of split orders/2 [100, 110): its rows were reordered"),
    (lambda: [b.slice(1) if b.column(SPLIT_END_COLUMN).null_count else b
              for b in with_split_end(iter(_records(3, 4)), SPLIT, MARKED)],
     "holds 5 records of split orders/2 [100, 110) but the reader handed on 7: rows were "
     "dropped or added"),
])
def test_an_input_changed_on_the_way_is_refused(input_: object, problem: str) -> None:
    assert callable(input_)
    ends = SplitEnds(input_())
    _consumed(ends)

    with pytest.raises(WriteConfigError) as caught:
        ends.check("task 1 of write 'w'")

    message = str(caught.value)
    assert message.startswith(
        "task 1 of write 'w': its input, read with read_kafka(split_ends=True), " + problem)
    assert "The transaction is aborted." in message
    assert not caught.value.retryable


def _ranges_of_one_split(*sizes: int) -> list[pa.RecordBatch]:
    """The marked batches of a split of ``len(sizes)`` ranges (partitions 0, 1...), the 7th of
    its read, as the reader hands them on."""
    return [b for p, n in enumerate(sizes)
            for b in with_split_end(iter(_records(n)), PartitionRange("orders", p, 0, 10), MARKED,
                                    index=7, ranges=len(sizes))]


@pytest.mark.parametrize("rows", [1, 4, 100])
def test_a_split_of_several_ranges_is_whole_with_the_end_of_each(rows: int) -> None:
    ends = SplitEnds(_rebatched(_ranges_of_one_split(3, 0, 4), rows))

    assert len(_consumed(ends)) == 7
    ends.check("task 7")


def test_a_split_of_several_ranges_cut_short_after_an_end_is_retried() -> None:
    marked = _ranges_of_one_split(3, 2, 4)
    ends = SplitEnds(_rebatched(marked, 1)[:8])  # 3 records, end, 2 records, end, 1 record

    assert len(_consumed(ends)) == 6
    with pytest.raises(InputTruncatedError) as caught:
        ends.check("task 7")

    assert str(caught.value).startswith(
        "task 7 received the ends of 2 of the 3 ranges of its split and then 1 records: its "
        "input was cut short")
    assert caught.value.retryable


def test_a_split_of_several_ranges_with_a_range_short_is_refused() -> None:
    marked = _ranges_of_one_split(3, 2)
    ends = SplitEnds([b.slice(1) if b.num_rows == 2 else b for b in marked])
    _consumed(ends)

    with pytest.raises(WriteConfigError, match=re.escape(
            "holds 1 records of split orders/1 [0, 10) but the reader handed on 2")):
        ends.check("task 7")


def test_the_reader_declares_the_column_spark_and_the_writer_agree_on() -> None:
    from airflow_provider_kafka_spark.spark.read.datasource import (
        SPLIT_END_FIELD,
        KafkaBoundedDataSource,
    )
    from airflow_provider_kafka_spark.spark.schema import kafka_schema, utc_arrow_type

    assert SPLIT_END_FIELD.dataType.simpleString() == SPLIT_END_DDL
    assert utc_arrow_type(SPLIT_END_FIELD.dataType) == SPLIT_END_TYPE
    marked = KafkaBoundedDataSource({"ranges": "{}", "splitEnds": "true"}).schema()
    assert marked.fieldNames() == [*kafka_schema().fieldNames(), SPLIT_END_COLUMN]
    assert KafkaBoundedDataSource({"ranges": "{}"}).schema() == kafka_schema()
