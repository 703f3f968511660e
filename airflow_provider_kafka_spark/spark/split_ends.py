"""A split's end row: how a ``write_kafka`` task knows that it received the whole of what the
``kafka_bounded`` reader handed on, without looking into PySpark.

Spark ends a Python task's input quietly when a computation upstream of it in the same task
fails (the reader, or a projection in between): the task's iterator just stops, after fewer
rows, as if the partition had ended. So the reader says where a split ends. Asked to
(``read_kafka(split_ends=True)``; ``ingest`` asks when it writes the records as read into an
exactly-once ``KafkaSink``), it adds the column :data:`SPLIT_END_COLUMN`, null in every
record, and after the last record of each range of a split one end row: every record column
null, :data:`SPLIT_END_COLUMN` holding the range's ``topic``, ``partition``, ``start``,
``stop`` (its offsets ``[start, stop)``), the number of ``records`` the reader handed on, the
index of the ``split`` in the read and how many ``ranges`` the split has.

A writing task passes its input through :class:`SplitEnds`, which hands on the records
without the column and the end rows, and before the task commits :meth:`SplitEnds.check`
requires the end rows of exactly one split, one per range, the last as the input's last row,
each after exactly as many records as it says. Spark
keeps the order of the rows through the narrow steps between the reader and the writer
(projections, ``mapInArrow``) in one task; a step that drops, adds, moves or repartitions
rows is refused, since the end row no longer tells whether the input is whole.

Nothing here imports Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_kafka_spark.errors import InputTruncatedError, WriteConfigError
from airflow_provider_kafka_spark.offsets.ranges import PartitionRange

SPLIT_END_COLUMN = "_kafka_spark_split_end"
"""The column of the readers' end rows; null in every record."""

SPLIT_END_TYPE = pa.struct([("topic", pa.string()), ("partition", pa.int32()),
                            ("start", pa.int64()), ("stop", pa.int64()),
                            ("records", pa.int64()), ("split", pa.int64()),
                            ("ranges", pa.int32())])
"""The Arrow type of :data:`SPLIT_END_COLUMN`."""

SPLIT_END_DDL = ("struct<topic:string,partition:int,start:bigint,stop:bigint,records:bigint,"
                 "split:bigint,ranges:int>")
"""The Spark type of :data:`SPLIT_END_COLUMN`, as Spark's ``simpleString()`` shows it."""


@dataclass(frozen=True)
class SplitEnd:
    """What an end row says: the reader handed on ``records`` records of the range
    ``topic``/``partition`` offsets ``[start, stop)``, one of the ``ranges`` ranges of the
    read's ``split``-th split."""

    topic: str
    partition: int
    start: int
    stop: int
    records: int
    split: int = 0
    ranges: int = 1

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition} [{self.start}, {self.stop})"


def with_split_end(batches: Iterable[pa.RecordBatch], split: PartitionRange,
                   schema: pa.Schema, *, index: int = 0, ranges: int = 1
                   ) -> Iterator[pa.RecordBatch]:
    """The records of the range ``split`` (``batches``, the records' columns) with
    :data:`SPLIT_END_COLUMN` added (null), then, once the last has passed, the range's end row
    (of the read's ``index``-th split, of ``ranges`` ranges). ``schema``: the output's, the
    records' columns then :data:`SPLIT_END_COLUMN`. A range whose read fails has no end row."""
    end_type = schema.field(SPLIT_END_COLUMN).type
    no_end = pa.nulls(0, end_type)
    records = 0
    for batch in batches:
        records += batch.num_rows
        if len(no_end) != batch.num_rows:
            no_end = pa.nulls(batch.num_rows, end_type)
        yield pa.RecordBatch.from_arrays([*batch.columns, no_end], schema=schema)
    end = {"topic": split.topic, "partition": split.partition, "start": split.start,
           "stop": split.stop, "records": records, "split": index, "ranges": ranges}
    yield pa.RecordBatch.from_arrays(
        [pa.array([end], f.type) if f.name == SPLIT_END_COLUMN else pa.nulls(1, f.type)
         for f in schema], schema=schema)


class SplitEnds:
    """A task's input read with end rows: iterating (once) hands on its records without them
    and without :data:`SPLIT_END_COLUMN`; :meth:`check`, once every record was consumed, tells
    whether the input was whole."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = batches
        self._ends: list[tuple[SplitEnd, int]] = []  # each end row, and the records before it
        self._pending = 0  # records since the last end row (or the start)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            if SPLIT_END_COLUMN not in batch.schema.names:
                self._pending += batch.num_rows
                yield batch
                continue
            at = batch.schema.get_field_index(SPLIT_END_COLUMN)
            column = batch.column(at)
            records = pa.RecordBatch.from_arrays(
                [c for i, c in enumerate(batch.columns) if i != at], schema=batch.schema.remove(at))
            if column.null_count == len(column):  # records only: the usual batch
                self._pending += batch.num_rows
                yield records
                continue
            is_end = pc.is_valid(column)
            before = -1
            for position in pc.indices_nonzero(is_end).to_pylist():
                self._pending += position - before - 1
                self._ends.append((SplitEnd(**column[position].as_py()), self._pending))
                self._pending = 0
                before = position
            self._pending += batch.num_rows - before - 1
            yield records.filter(pc.invert(is_end))

    def check(self, task: str) -> None:
        """Refuse an input that was not whole, or not as the reader handed it on; ``task``
        names the task in the message (e.g. ``"task 3 of write 'w'"``).

        Raises:
            InputTruncatedError: no end row, or the end rows of fewer ranges than the split
                has: the input ended early (a computation upstream of the writer in the same
                Spark task failed). A retry can help.
            WriteConfigError: the end rows of more than one split, or more than it has,
                records after the last, or another number of records than an end row says: a
                step between the reader and the writer dropped, added or moved rows. A retry
                cannot help.
        """
        cut_short = ("its input was cut short (a computation upstream of the writer in the same "
                     "Spark task failed, and Spark then ends the writer's input early). The "
                     "transaction is aborted; Spark's task retry or a re-run of the write writes "
                     "the partition.")
        if self._ends and all((e.split, e.ranges) == (self._ends[0][0].split,
                                                      self._ends[0][0].ranges)
                              for e, _ in self._ends) \
                and len(self._ends) < self._ends[0][0].ranges:
            raise InputTruncatedError(
                f"{task} received the ends of {len(self._ends)} of the "
                f"{self._ends[0][0].ranges} ranges of its split and then "
                f"{self._pending} records: {cut_short}")
        if not self._ends:
            raise InputTruncatedError(
                f"{task} received {self._pending} records and no end of its split: its input "
                "was cut short (a computation upstream of the writer in the same Spark task "
                "failed, and Spark then ends the writer's input early). The transaction is "
                "aborted; Spark's task retry or a re-run of the write writes the partition."
            )
        end, _ = self._ends[0]
        problem = None
        others = [e for e, _ in self._ends if (e.split, e.ranges) != (end.split, end.ranges)]
        if others:
            problem = (f"holds the ends of several splits ({end}, {others[0]}"
                       f"{', ...' if len(others) > 1 else ''}): its partitions were merged or "
                       "repartitioned")
        elif len(self._ends) > end.ranges:
            problem = (f"holds the ends of {len(self._ends)} ranges of a split of {end.ranges} "
                       f"({end}, {self._ends[1][0]}{', ...' if len(self._ends) > 2 else ''}): "
                       "its partitions were merged or repartitioned")
        elif self._pending:
            problem = (f"holds {self._pending} records after the end of split "
                       f"{self._ends[-1][0]}: its rows were reordered")
        else:
            for each, counted in self._ends:
                if counted != each.records:
                    problem = (f"holds {counted} records of split {each} but the reader handed "
                               f"on {each.records}: rows were dropped or added")
                    break
        if problem is not None:
            raise WriteConfigError(
                f"{task}: its input, read with read_kafka(split_ends=True), {problem} on the "
                "way to the writer, so its end rows no longer tell whether it is whole. Write "
                "the records as read (projections only), or read them without split_ends (then "
                "write_kafka counts each partition in a pre-pass). The transaction is aborted."
            )
