"""``ingest``: one bounded Kafka read into one sink, with its statistics. No Airflow import::

    from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
    from airflow_provider_kafka_spark.sinks import FileSink
    from airflow_provider_kafka_spark.spark import ingest, spark_session

    config = {"bootstrap.servers": "127.0.0.1:9092"}
    ranges = resolve_offsets(config, Subscription.topics(["orders"]), "earliest", "latest")
    result = ingest(spark_session(), ranges, config, FileSink("/data/orders/2024-05-01T00"))
    print(result.records, result.partitions)

The steps, in order (the ingest operator is this function plus Airflow's arguments, logging,
metrics and lineage):

1. Check the arguments (:mod:`~airflow_provider_kafka_spark.spark.ingest_checks`). Empty ranges
   stop here: nothing is read or written, no Spark job runs, and the result counts zero
   records (and the offsets lost at resolution).
2. On the driver, before the read: decode (``decode``,
   :mod:`~airflow_provider_kafka_spark.spark.decoded`) and transform (``transform`` or ``sql``
   over the view ``kafka``, :mod:`~airflow_provider_kafka_spark.spark.transformation`) an
   empty DataFrame with the records' columns, and hand the result's schema to
   ``sink.prepare``. A bad transform, query, format or sink fails here. Then ask the sink
   once how it takes the records: ``sink.intake(SinkInput(...))`` answers with an
   :class:`~airflow_provider_kafka_spark.spark.intake.Intake`.
3. One pass, as the answer says: the readers land Parquet files into the sink's folder
   (``LandedParquet``: records as read, the file sink), or read the ranges (``read_kafka``),
   decode, transform and ``sink.write`` (``SparkRows``; ``RowsWithSplitEnds`` for an
   exactly-once ``KafkaSink`` of records as read: each task checks by the readers' end row
   that its split is whole before it commits). Each record is read from Kafka once and never
   cached. The statistics are gathered in that pass: per partition by the readers (their
   reports: :class:`ReadSummary` or the landed files'), the decode counts and the first
   corrupt record by ``DataFrame.observe``. Where they cannot be (Spark Connect,
   ``engine="spark-kafka"``, a transform that stops reading early), a second read counts
   them. ``on_corrupt="fail"``: a sink whose write stays invisible until its commit
   (``Intake.staged``: files) fails after its write, before the commit; any other sink gets
   the check in a read of its own before the write. ``on_corrupt="dead_letter"`` caches the
   decoded slice (two outputs, two Spark jobs).
4. ``sink.commit`` with the manifest: the ranges and the statistics (what it returns
   completes the output's description). A sink whose commit is also its write
   (``Intake.statistics_after_commit``: tables) gets a manifest without counts, and the
   statistics are gathered after it. After any failure in steps 2-4, ``sink.abort``
   instead. A long write logs its progress (``progress_every``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.errors import kafka_errors
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.options import SQL_VIEW, Engine
from airflow_provider_kafka_spark.shaping import Shape
from airflow_provider_kafka_spark.spark.decoded import (
    DecodedSlice,
    decoding_of,
    good_records,
    landed_counts,
)
from airflow_provider_kafka_spark.spark.ingest_checks import check_ingest_arguments, checked_intake
from airflow_provider_kafka_spark.spark.ingest_result import DecodeCounts, IngestResult
from airflow_provider_kafka_spark.spark.intake import (
    Intake,
    LandedParquet,
    RowsWithSplitEnds,
    SinkInput,
)
from airflow_provider_kafka_spark.spark.progress import report_progress
from airflow_provider_kafka_spark.spark.read.landing import land_kafka
from airflow_provider_kafka_spark.spark.read.reader import read_kafka
from airflow_provider_kafka_spark.spark.read.summary import (
    LostOffsets,
    PartitionSummary,
    ReadSummary,
    summarize,
)
from airflow_provider_kafka_spark.spark.schema import kafka_schema
from airflow_provider_kafka_spark.spark.shape import checked_shape, shape_frame
from airflow_provider_kafka_spark.spark.transformation import Transform, Transformation

__all__ = ["SQL_VIEW", "SinkProtocol", "ingest"]

log = logging.getLogger(__name__)


@runtime_checkable
class SinkProtocol(Protocol):
    """What :func:`ingest` needs of a sink: the steps of
    :class:`airflow_provider_kafka_spark.sinks.Sink` (``FileSink``, ``KafkaSink`` or your own
    subclass), whose docstring states what each step must do."""

    def describe(self) -> dict[str, Any]:
        """The JSON-ready description of the output before anything ran."""

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:
        """Checks before the read; ``shaped`` has the output's schema and no rows."""

    def intake(self, given: SinkInput) -> Intake:
        """Right after ``prepare``: how the sink takes the records ``given`` describes."""

    def write(self, df: DataFrame, dead_letters: DataFrame | None = None) -> dict[str, Any]:
        """Write the records (and the dead letters); the output's description."""

    def commit(self, manifest: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Make the write visible, with the run's manifest; optionally what the commit adds to
        the output's description."""

    def abort(self) -> None:
        """Undo what ``prepare`` and ``write`` left behind; never raises."""


def ingest(
    spark: SparkSession,
    ranges: OffsetRanges | str | Mapping[str, Any],
    kafka_config: KafkaConfig | Mapping[str, Any],
    sink: SinkProtocol,
    *,
    engine: Engine = "python",
    max_records_per_split: int | None = None,
    include_headers: bool = True,
    on_data_loss: Literal["fail", "skip"] = "fail",
    decode: Decoding | None = None,
    transform: Transform | None = None,
    sql: str | None = None,
    shape: Shape | None = None,
    manifest: Mapping[str, Any] | None = None,
    owner: str = "ingest",
    progress_every: float | None = 30.0,
) -> IngestResult:
    """Read ``ranges`` with ``read_kafka``, decode, transform and write them to ``sink``; the
    statistics. The steps are in the module docs; every argument is checked before anything is
    read, and so are the transformation and the sink (``sink.prepare``).

    Args:
        spark: the session to read and write with.
        ranges: an ``OffsetRanges``, its JSON string or its dict (a resolve task's XCom);
            read with the isolation level they were resolved with.
        kafka_config: the input cluster's librdkafka config.
        sink: where the records go, e.g. ``FileSink(path)`` or
            ``KafkaSink(topic, kafka_config=config)`` (see :class:`SinkProtocol`); a new one
            per call.
        engine: as for ``read_kafka``.
        max_records_per_split: as for ``read_kafka``.
        include_headers: as for ``read_kafka``.
        on_data_loss: as for ``read_kafka``.
        decode: how ``key``/``value`` are decoded, and what an undecodable record does
            (:class:`~airflow_provider_kafka_spark.decoding.Decoding`); None: kept as bytes.
            Its ``on_corrupt``: ``fail`` (the ingest fails with :class:`CorruptRecordError`
            before anything is written), ``skip`` (dropped and counted) or ``dead_letter``
            (handed to ``sink.write`` as ``dead_letters``: ``key``, ``value`` as read,
            ``topic``, ``partition``, ``offset``, ``timestamp``, ``headers``, and the reason
            in ``error``).
        transform: ``callable(DataFrame) -> DataFrame`` applied to the records read. It is
            also called once on an empty DataFrame before the read, to check it: keep it
            free of side effects.
        sql: instead of ``transform``, one Spark SQL query (``SELECT``, ``WITH ... SELECT``,
            ``VALUES``, ``TABLE``) over the view ``kafka`` of the records read.
        shape: instead of ``transform`` or ``sql``, the columns to land, declared
            (:class:`~airflow_provider_kafka_spark.shaping.Shape`: Kafka columns and decoded
            fields, renamed, and columns derived from a timestamp, e.g. its hour). The readers
            apply it themselves when they land the records as read into a ``FileSink`` of
            Parquet, also one partitioned by the shape's columns (``partition_by``: a folder
            per value); other writes apply it through Spark, with the same result.
        manifest: JSON-ready fields the manifest holds besides its ``version``, ``written_at``,
            the ``ranges`` and the statistics (the operator's ``dag_id``, ``task_id``,
            ``run_id``).
        owner: the name error messages start with (the operator's task id).
        progress_every: while the write runs, log every this many seconds how far it is
            (records read of the slice's size, rate, time left, the Spark UI); None or 0:
            never. A write shorter than that logs nothing extra.

    Raises:
        ConfigurationError: a bad argument, a transform that fails or does not return a
            DataFrame, a query Spark cannot run over the records, or a sink that refuses
            the output (``sink.prepare``) or answers ``sink.intake`` with what the readers
            cannot give; nothing was read or written.
        DecodeError: bad ``decode`` schemas.
        CorruptRecordError: ``on_corrupt="fail"`` and a record could not be decoded; nothing
            was written.
        KafkaReadError, DataLossError, SchemaRegistryError, KafkaWriteError, SinkError: the
            read, decoding or write failed (``sink.abort`` ran).
    """
    offset_ranges = check_ingest_arguments(
        owner, spark, ranges, sink, engine=engine, max_records_per_split=max_records_per_split,
        include_headers=include_headers, on_data_loss=on_data_loss, decode=decode,
        transform=transform, sql=sql, manifest=manifest, progress_every=progress_every,
        shape=shape)
    on_corrupt = decode.on_corrupt if decode is not None else "fail"
    if offset_ranges.is_empty():
        return IngestResult.of(offset_ranges, sink.describe())
    transformation = Transformation(spark, owner, transform, sql)
    began = time.monotonic()
    empty = spark.createDataFrame([], kafka_schema(include_headers))
    decoding = decoding_of(owner, decode, offset_ranges)
    marked_empty = decoding(empty) if decoding else None
    shaped = transformation.apply(good_records(marked_empty) if marked_empty else empty,
                                  checking=True)
    in_readers = (decoding.in_readers(marked_empty.schema)
                  if decoding and marked_empty and engine == "python" else None)
    if shape is not None:
        with checked_shape(owner, shape):
            shaped = shape_frame(shaped, shape)
    config = KafkaConfig.of(kafka_config)
    identity: list[Any] = [offset_ranges.identity(), include_headers, sql]
    if shape is not None:  # (an input without one is named as before shapes existed)
        identity.append(shape.to_json())
    given = SinkInput(identity=json.dumps(identity),
                      records=("transformed" if not transformation.is_identity()
                               else "decoded" if decoding else "as_read"),
                      engine=engine, ranges=offset_ranges, shape=shape,
                      readers_decode=in_readers is not None,
                      dead_letters=decoding is not None and on_corrupt == "dead_letter")

    def read(**counters: Any) -> DataFrame:
        return read_kafka(
            spark, offset_ranges, config, isolation_level=offset_ranges.isolation_level,
            max_records_per_split=max_records_per_split, engine=engine,
            include_headers=include_headers, on_data_loss=on_data_loss, **counters)

    def marked(**counters: Any) -> DataFrame:  # the decoded slice, marked
        assert decoding is not None
        if in_readers is None:
            return decoding(read(**counters))
        records = read(decoding=in_readers, **counters)
        return decoding.settled(records) if in_readers.settle_in_spark else records

    decoded: DecodedSlice | None = None
    try:
        sink.prepare(spark, shaped)
        intake = checked_intake(owner, sink, sink.intake(given), given)
        after_commit = intake.statistics_after_commit
        in_write_pass = intake.staged and not after_commit  # corrupt records found in the write
        lost, summary = LostOffsets(), ReadSummary()
        summaries: list[PartitionSummary] | None = None
        landed: DecodeCounts | None = None  # the readers decoded what they landed
        with report_progress(spark, offset_ranges, owner=owner,
                             every=progress_every) as progress_to:
            takes = intake.takes
            if decoding and not isinstance(takes, LandedParquet):  # rows to Spark
                in_readers = decoding.for_rows(in_readers)
            landing = None
            if isinstance(takes, LandedParquet):  # the readers write the files themselves
                folder = takes.folder if in_readers is None else replace(
                    takes.folder, decoding=in_readers, on_corrupt=on_corrupt)
                with kafka_errors():
                    landing = land_kafka(read(lost=lost, landing=folder,
                                              progress_to=progress_to))
                if landing.left_to_spark():
                    log.warning("%s: %d record(s) hold JSON only Spark's from_json decodes "
                                "exactly (a string field given a fraction); decoding the "
                                "slice through Spark instead.", owner, landing.left_to_spark())
                    landing, in_readers, lost = None, None, LostOffsets()
            if landing is not None:
                assert isinstance(takes, LandedParquet)
                if in_readers is not None:  # fail: raises before anything is adopted
                    landed = landed_counts(landing, on_corrupt, owner)
                output, summaries = takes.adopt(landing.files()), landing.summaries()
            elif decoding:  # Spark rows, decoded, through sink.write
                decoded = DecodedSlice(marked(lost=lost, summary=summary,
                                              progress_to=progress_to), on_corrupt, owner)
                if on_corrupt == "fail" and not in_write_pass:
                    decoded.check(marked)  # nothing of it may be visible
                written = transformation.apply(decoded.good, checking=False)
                output = sink.write(written if shape is None else shape_frame(written, shape),
                                    decoded.dead_letters)
                if not after_commit:
                    decoded.check(marked)  # in_write_pass: corrupt records fail it here
                    summaries = _summaries(summary, read)
            else:  # Spark rows, as read, through sink.write
                records = read(lost=lost, summary=summary, progress_to=progress_to,
                               split_ends=isinstance(takes, RowsWithSplitEnds))
                written = transformation.apply(records, checking=False)
                output = sink.write(written if shape is None else shape_frame(written, shape))
                if not after_commit:
                    summaries = _summaries(summary, read)
            counts = (decoded.counts(marked) if decoded is not None and not after_commit
                      else landed)
            result = _result(offset_ranges, output, summaries, lost, counts, began)
            committed = sink.commit({"version": 1, **(manifest or {}),
                                     "written_at": datetime.now(UTC).isoformat(),
                                     "ranges": offset_ranges.to_dict(), **result.to_dict()})
            if after_commit:  # the sink wrote the records in its commit
                counts = None if decoded is None else decoded.counts(marked)
                result = _result(offset_ranges, output, _summaries(summary, read), lost, counts,
                                 began)
        if committed:  # what the commit adds to the output's description (table sinks)
            result = replace(result, output={**result.output, **committed})
    except BaseException:
        sink.abort()
        raise
    finally:
        if decoded is not None:
            decoded.release()
    return result


def _summaries(summary: ReadSummary, read: Callable[[], DataFrame]) -> list[PartitionSummary]:
    """The per-partition statistics the readers gathered in the write's pass; when they could
    not (Spark Connect, ``engine="spark-kafka"``, a transform that stopped reading early), one
    aggregation job over a second read of the ranges."""
    summaries = summary.partitions()
    if summaries is None:
        log.info("The readers could not count the slice in the write's pass; counting it in "
                 "a second read.")
        with kafka_errors():
            summaries = summarize(read())
    return summaries


def _result(ranges: OffsetRanges, output: Mapping[str, Any],
            summaries: list[PartitionSummary] | None, lost: LostOffsets,
            counts: DecodeCounts | None, began: float) -> IngestResult:
    if counts is not None and "dead_letter" in output:
        output = {**output, "dead_letter": {**output["dead_letter"],
                                            "records": counts.dead_lettered}}
    return IngestResult.of(ranges, output, summaries=summaries or (),
                           lost=lost.by_partition(), decode=counts,
                           seconds=time.monotonic() - began)
