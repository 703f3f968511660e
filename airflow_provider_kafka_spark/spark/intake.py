"""What :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` and its sink say to each other
once, right after ``sink.prepare``: ``intake = sink.intake(SinkInput(...))``.

ingest describes the records the sink will get (:class:`SinkInput`); the sink answers how it
takes them and when they are visible (:class:`Intake`)::

    takes                   how ingest hands the records over        which sink
    SparkRows()             sink.write(df, dead_letters)              the default, tables,
                                                                      files in other formats
    RowsWithSplitEnds()     sink.write(df) with the readers' end      an exactly-once KafkaSink
                            row after each split                      of records as read
    LandedParquet(folder,   the readers write Parquet files into      FileSink (Parquet, local
      adopt)                ``folder``; then adopt(the files)         or S3), Iceberg and Delta
                                                                      tables that can take them
                                                                      (also partitioned), of
                                                                      records as read or decoded
                                                                      by the readers, shaped

    staged                  nothing of the write is visible before    files, tables
                            ``sink.commit``: ingest finds corrupt
                            records in the write's own pass
    statistics_after_commit ``sink.commit`` writes the records: the   tables of Spark rows
                            statistics are known after it

Nothing here imports Spark (the sinks import it while a DAG file is parsed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.options import Engine

if TYPE_CHECKING:
    from airflow_provider_kafka_spark.shaping import Shape
    from airflow_provider_kafka_spark.spark.read.landing import LandedFile, ParquetFolder

Records = Literal["as_read", "decoded", "transformed"]
"""What the records a sink gets are: ``as_read`` (the read's columns and bytes), ``decoded``
(the read's columns, ``key``/``value`` decoded) or ``transformed`` (what ``transform`` or
``sql`` returned)."""


@dataclass(frozen=True)
class SinkInput:
    """The records ``ingest`` will hand a sink, as it asks the sink how it takes them.

    :param identity: text naming the input exactly (the pinned ranges' identity,
        ``include_headers`` and ``sql``): the sink's input is a deterministic function of it.
    :param records: see :data:`Records`.
    :param engine: which readers read them (``read_kafka``'s ``engine``).
    :param ranges: the pinned ranges read (None: not given, e.g. a sink asked on its own).
    :param shape: the columns the sink gets of the records (``ingest``'s ``shape``), which the
        readers apply themselves when they land files (:class:`LandedParquet`); None: the
        records' own columns.
    :param readers_decode: (``decoded`` records) the native readers decode them themselves
        (every field's format and schema has a native decoder).
    :param dead_letters: the records that cannot be decoded go to the sink's dead-letter
        output (``on_corrupt="dead_letter"``): a sink without one (a table) refuses the input
        in its answer, before anything is read.
    """

    identity: str
    records: Records
    engine: Engine
    ranges: OffsetRanges | None = None
    shape: Shape | None = None
    readers_decode: bool = False
    dead_letters: bool = False

    @property
    def native_as_read(self) -> bool:
        """Whether the native readers (``engine="python"``) hand on the records as read: only
        then can they land them as Parquet files (:class:`LandedParquet`) or mark each split's
        end (:class:`RowsWithSplitEnds`)."""
        return self.records == "as_read" and self.engine == "python"

    @property
    def native_rows(self) -> bool:
        """Whether the native readers hand on the records themselves, as read or decoded by
        them (:attr:`readers_decode`): then they can land them as Parquet files
        (:class:`LandedParquet`), decoded, with the corrupt ones as ``ingest``'s
        ``on_corrupt`` says (dead letters into the folder's ``_dead_letter/``)."""
        return self.engine == "python" and (
            self.records == "as_read" or (self.records == "decoded" and self.readers_decode))


@dataclass(frozen=True)
class SparkRows:
    """The records as a Spark DataFrame, through ``sink.write(df, dead_letters)``."""


@dataclass(frozen=True)
class RowsWithSplitEnds:
    """As :class:`SparkRows`, with the readers' end row after each split's records
    (``read_kafka(..., split_ends=True)``, :mod:`~airflow_provider_kafka_spark.spark.split_ends`):
    for a sink whose tasks check that their input is whole before they commit (an exactly-once
    ``KafkaSink``). Only for :attr:`SinkInput.native_as_read`."""


@dataclass(frozen=True)
class LandedParquet:
    """The readers write the records as Parquet files into ``folder`` themselves (the records
    never become Spark rows); then ``adopt(files)`` instead of ``sink.write``: the files the
    readers reported (:class:`~airflow_provider_kafka_spark.spark.read.landing.LandedFile`:
    name, size and Parquet footer each), the rest of the folder is not the output; it returns
    the output's description. Only for :attr:`SinkInput.native_rows`."""

    folder: ParquetFolder
    adopt: Callable[[Sequence[LandedFile]], dict[str, Any]]


@dataclass(frozen=True)
class Intake:
    """A sink's answer to :class:`SinkInput`: how it takes the records and when they are
    visible. The default (``Intake()``) is what a sink of your own gets: Spark rows through
    ``write``, visible as written, the statistics known after the write.

    :param takes: :class:`SparkRows`, :class:`RowsWithSplitEnds` or :class:`LandedParquet`.
    :param staged: nothing ``write`` (or the readers' files) makes is visible before
        ``commit``: ``ingest`` then finds corrupt records (``on_corrupt="fail"``) in the
        write's own pass; otherwise in a read of their own before the write.
    :param statistics_after_commit: ``commit`` writes the records (a table's one commit):
        ``ingest`` knows the statistics after it, and the manifest it passes holds the ranges
        but no counts.
    """

    takes: SparkRows | RowsWithSplitEnds | LandedParquet = field(default_factory=SparkRows)
    staged: bool = False
    statistics_after_commit: bool = False
