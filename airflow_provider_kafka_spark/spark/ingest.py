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

1. Check the arguments. Empty ranges stop here: nothing is read or written, no Spark job runs,
   and the result counts zero records (and the offsets lost at resolution).
2. On the driver, before the read: decode (``decode``) and transform (``transform`` or
   ``sql`` over the view ``kafka``) an empty DataFrame with the records' columns, and hand the
   result's schema to ``sink.prepare``. A bad transform, query, format or sink fails here.
3. One pass: read the ranges (``read_kafka``), decode, transform and ``sink.write``; each
   record is read from Kafka once and never cached. The statistics are gathered in that
   pass: per partition by the readers (:class:`ReadSummary`), the decode counts and the first
   corrupt record by ``DataFrame.observe``. Where they cannot be (Spark Connect,
   ``engine="spark-kafka"``, a transform that stops reading early), a second read counts them.
   An exactly-once ``KafkaSink`` gets the records as read with each split's end marked by
   the readers (its tasks check the mark before they commit: a split cut short by a failure
   upstream is never committed); after a ``transform``, ``sql`` or ``decode`` there is no such
   mark, and ``write_kafka`` counts each partition in a read of its own first.
   ``on_corrupt="fail"``: a sink whose write stays invisible until its commit
   (``stages_write``: files) fails after its write, before the commit; any other sink gets
   the check in a read of its own before the write. ``on_corrupt="dead_letter"`` caches the
   decoded slice (two outputs, two Spark jobs).
4. ``sink.commit`` with the manifest: the ranges and the statistics (what it returns
   completes the output's description: a table sink's commit, which is also its write
   (``writes_in_commit``): its statistics are known after it). After any failure in steps
   2-4, ``sink.abort`` instead. A long write logs its progress (``progress_every``).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from airflow_provider_kafka_spark.arguments import check_stages
from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    CorruptRecordError,
    error_line,
    kafka_errors,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.options import (
    REGISTRY_FORMATS,
    SQL_VIEW,
    Engine,
    ReadOptions,
    bad_argument,
    check_mapping,
    check_progress_every,
    shown,
)
from airflow_provider_kafka_spark.spark.formats import Subject, frozen_config, resolve_schema
from airflow_provider_kafka_spark.spark.ingest_result import DecodeCounts, IngestResult
from airflow_provider_kafka_spark.spark.progress import report_progress
from airflow_provider_kafka_spark.spark.read.decode import (
    DEAD_LETTER_COLUMNS,
    decode_kafka,
)
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder, land_kafka
from airflow_provider_kafka_spark.spark.read.reader import read_kafka
from airflow_provider_kafka_spark.spark.read.summary import (
    LostOffsets,
    PartitionSummary,
    ReadSummary,
    summarize,
)
from airflow_provider_kafka_spark.spark.schema import kafka_schema, same_columns, spark_compares

__all__ = ["SQL_VIEW", "SinkProtocol", "ingest"]

log = logging.getLogger(__name__)

Transform = Callable[[DataFrame], DataFrame]


@runtime_checkable
class SinkProtocol(Protocol):
    """What :func:`ingest` needs of a sink: the steps of
    :class:`airflow_provider_kafka_spark.sinks.Sink` (``FileSink``, ``KafkaSink`` or your own
    subclass), whose docstring states what each step must do."""

    def describe(self) -> dict[str, Any]:
        """The JSON-ready description of the output before anything ran."""

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:
        """Checks before the read; ``shaped`` has the output's schema and no rows."""

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
            ``KafkaSink(topic, kafka_config=config)``
            (see :class:`SinkProtocol`); a new one per call.
        engine, max_records_per_split, include_headers, on_data_loss: as for ``read_kafka``.
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
            the output (``sink.prepare``); nothing was read or written.
        DecodeError: bad ``decode`` schemas. CorruptRecordError: ``on_corrupt="fail"`` and a
            record could not be decoded; nothing was written.
        KafkaReadError, DataLossError, SchemaRegistryError, KafkaWriteError, SinkError: the
            read, decoding or write failed (``sink.abort`` ran).
    """
    offset_ranges = _check_arguments(
        owner, spark, ranges, sink, engine=engine, max_records_per_split=max_records_per_split,
        include_headers=include_headers, on_data_loss=on_data_loss, decode=decode,
        transform=transform, sql=sql, manifest=manifest, progress_every=progress_every)
    on_corrupt = decode.on_corrupt if decode is not None else "fail"
    if offset_ranges.is_empty():
        return IngestResult.of(offset_ranges, sink.describe())
    transformation = _Transformation(spark, owner, transform, sql)
    began = time.monotonic()
    empty = spark.createDataFrame([], kafka_schema(include_headers))
    decoding = _decoding(owner, decode, offset_ranges)
    shaped = transformation.apply(_good(decoding(empty)) if decoding else empty, checking=True)
    config = KafkaConfig.of(kafka_config)

    def read(**counters: Any) -> DataFrame:
        return read_kafka(
            spark, offset_ranges, config, isolation_level=offset_ranges.isolation_level,
            max_records_per_split=max_records_per_split, engine=engine,
            include_headers=include_headers, on_data_loss=on_data_loss, **counters)

    def marked() -> DataFrame:  # the decoded slice again, in a read of its own
        assert decoding is not None
        return decoding(read())

    stages = bool(getattr(sink, "stages_write", False))
    in_commit = bool(getattr(sink, "writes_in_commit", False))
    decoded: _Decoded | None = None
    bind_input = getattr(sink, "bind_input", None)  # KafkaSink: its input is this slice
    split_ends = False  # whether the readers mark each split's end for the sink
    if callable(bind_input):
        split_ends = bind_input(json.dumps([offset_ranges.identity(), include_headers, sql]),
                                as_read=transform is None and sql is None) is True \
            and engine == "python" and decoding is None
    try:
        sink.prepare(spark, shaped)
        lost, summary = LostOffsets(), ReadSummary()
        folder = (_parquet_folder(sink) if engine == "python" and decoding is None
                  and transformation.is_identity() else None)
        with report_progress(spark, offset_ranges, owner=owner,
                             every=progress_every) as progress_to:
            if folder is not None:  # the readers write the files themselves
                with kafka_errors():
                    landing = land_kafka(read(lost=lost, landing=folder,
                                              progress_to=progress_to))
                assert isinstance(sink, ParquetFilesSink)
                output = sink.adopt(landing.files())
                summaries: list[PartitionSummary] | None = landing.summaries()
            else:
                records = read(lost=lost, summary=summary, split_ends=split_ends,
                               progress_to=progress_to)
                good, dead_letters = records, None
                if decoding:
                    decoded = _Decoded(decoding(records), on_corrupt, owner)
                    if on_corrupt == "fail" and not stages:  # nothing of it may be visible
                        decoded.check(marked)
                    good, dead_letters = decoded.good, decoded.dead_letters
                output = sink.write(transformation.apply(good, checking=False), dead_letters)
                summaries = None
                if not in_commit:
                    if decoded is not None:  # a staged write: corrupt records fail it here
                        decoded.check(marked)
                    summaries = _summaries(summary, read)
            counts = None if decoded is None or in_commit else decoded.counts(marked)
            result = _result(offset_ranges, output, summaries, lost, counts, began)
            committed = sink.commit({"version": 1, **(manifest or {}),
                                     "written_at": datetime.now(UTC).isoformat(),
                                     "ranges": offset_ranges.to_dict(), **result.to_dict()})
            if in_commit:  # the sink read the records in its commit
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


@runtime_checkable
class ParquetFilesSink(Protocol):
    """A sink that can take Parquet files the readers wrote themselves (the file sink)."""

    def parquet_folder(self) -> ParquetFolder | None:
        """After ``prepare``: the local folder to write them into, or None (Spark writes)."""

    def adopt(self, names: Sequence[str]) -> dict[str, Any]:
        """Instead of ``write``: keep these files of the folder; the output's description."""


def _parquet_folder(sink: SinkProtocol) -> ParquetFolder | None:
    """Where the readers may write the records as Parquet themselves, if ``sink`` takes that."""
    if not isinstance(sink, ParquetFilesSink):
        return None
    found = sink.parquet_folder()
    return found if isinstance(found, ParquetFolder) else None


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


def _check_arguments(owner: str, spark: Any, ranges: Any, sink: Any, *, engine: Any,
                     max_records_per_split: Any, include_headers: Any, on_data_loss: Any,
                     decode: Any, transform: Any, sql: Any, manifest: Any,
                     progress_every: Any) -> OffsetRanges:
    """The parsed ranges, once every argument is checked (no Spark action, no cluster call)."""
    if not isinstance(owner, str) or not owner.strip():
        raise ConfigurationError(f"owner={shown(owner)} is not valid; pass the name error "
                                 "messages start with, e.g. 'ingest'.")
    if not (hasattr(spark, "read") and callable(getattr(spark, "createDataFrame", None))):
        raise bad_argument(owner, "spark", spark, "pass a SparkSession (classic or Spark "
                           "Connect), e.g. spark_session() or the active one",
                           problem="is not a SparkSession")
    offset_ranges = OffsetRanges.from_json(ranges)
    ReadOptions(engine=engine, max_records_per_split=max_records_per_split,
                include_headers=include_headers, on_data_loss=on_data_loss, owner=owner)
    check_stages(owner, sink, decode, transform, sql)
    check_mapping(owner, "manifest", manifest, meaning="JSON-ready manifest fields")
    check_progress_every(owner, progress_every)
    return offset_ranges


def _decoding(owner: str, decoding: Decoding | None,
              ranges: OffsetRanges) -> Callable[[DataFrame], DataFrame] | None:
    """``decode_kafka`` with ``decoding``'s options and ``on_corrupt="dead_letter"`` (ingest
    applies its own policy to what it marks), a registry format's default subject filled in
    and a subject's ``latest`` version pinned now; None when nothing is decoded."""
    if decoding is None:
        return None
    registry = decoding.registry_config()
    topics = sorted({r.topic for r in ranges})
    schemas = {}
    for field, fmt, schema in (("key", decoding.key_format, decoding.key_schema),
                               ("value", decoding.value_format, decoding.value_schema)):
        if schema is None and fmt in REGISTRY_FORMATS:
            if len(topics) != 1:
                raise bad_argument(owner, f"{field}_schema", None,
                                   f"the ranges cover {len(topics)} topics {topics}; pass "
                                   f"the reader schema, e.g. Subject('<subject>')",
                                   problem="is missing")
            schema = Subject(f"{topics[0]}-{field}")
        if isinstance(schema, Subject) and schema.version == "latest" and \
                fmt in REGISTRY_FORMATS:
            resolved = resolve_schema(frozen_config(registry, f"{field}_format"),
                                      fmt, schema)
            schema = Subject(schema.name, resolved.version or "latest")
        schemas[field] = schema
    options: dict[str, Any] = {
        "key_format": decoding.key_format, "value_format": decoding.value_format,
        "key_schema": schemas["key"], "value_schema": schemas["value"],
        "schema_registry": registry, "on_corrupt": "dead_letter"}
    return lambda df: decode_kafka(df, **options)


class _Decoded:
    """A decoded slice (``decode_kafka``'s ``dead_letter`` output) after ``on_corrupt``: the
    records to write (``good``), the dead letters or None, and the counts.

    With ``skip`` and ``fail`` the counts and the first corrupt record are observed in the
    pass that writes the records (``DataFrame.observe``), with no job of their own.
    ``dead_letter`` hands the sink two outputs of one slice, which Spark writes in two jobs:
    the marked slice is cached and counted first (a slice without corrupt records then has no
    dead-letter output).
    """

    def __init__(self, marked: DataFrame, on_corrupt: str, owner: str) -> None:
        self.on_corrupt, self.owner = on_corrupt, owner
        self._row: dict[str, Any] | None = None
        self._cached: DataFrame | None = None
        self.dead_letters: DataFrame | None = None
        if on_corrupt == "dead_letter":
            self._cached = marked.persist(StorageLevel.MEMORY_AND_DISK)
            self._row = self._aggregate(self._cached)
            marked = self._cached
            if self._row["bad"]:
                kept = [c for c in ("topic", "partition", "offset", "timestamp", "headers")
                        if c in marked.columns]
                self.dead_letters = marked.where(_bad()).select(
                    F.col("raw_key").alias("key"), F.col("raw_value").alias("value"), *kept,
                    F.col("decode_error").alias("error"))
            self._observation = None
        else:
            self._observation = Observation(f"kafka_spark_decode_{uuid.uuid4().hex}")
            marked = marked.observe(self._observation, *_counts())
        self.good = _good(marked)

    def check(self, marked: Callable[[], DataFrame]) -> None:
        """With ``on_corrupt="fail"``, raise :class:`CorruptRecordError` when a record could not
        be decoded: from what the write's pass observed, else from an aggregation job over
        ``marked()`` (a second read: before the write, for a sink whose write is visible)."""
        if self.on_corrupt != "fail":
            return
        row = self._counted(marked)
        first = row["first"]
        if row["bad"]:
            raise CorruptRecordError(
                f"{self.owner}: {row['bad']} record(s) could not be decoded; the first is "
                f"{first['topic']}/{first['partition']} at offset {first['offset']}: "
                f"{first['decode_error']}. Nothing was written. Fix the producer or the reader "
                "schema, or pass on_corrupt='skip' or 'dead_letter'.",
                topic=first["topic"], partition=first["partition"], offset=first["offset"])

    def counts(self, marked: Callable[[], DataFrame]) -> DecodeCounts:
        """The counts, once the records were written (see :meth:`check` for ``marked``)."""
        row = self._counted(marked)
        good, corrupt = int(row["rows"]) - int(row["bad"]), int(row["bad"])
        return DecodeCounts(decoded=good, skipped=corrupt if self.on_corrupt == "skip" else 0,
                            dead_lettered=corrupt if self.dead_letters is not None else 0)

    def release(self) -> None:
        """Drop the cached slice (``dead_letter``)."""
        if self._cached is not None:
            self._cached.unpersist()

    def _counted(self, marked: Callable[[], DataFrame]) -> dict[str, Any]:
        if self._row is None:
            self._row = _observed(self._observation) if self._observation else None
        if self._row is None:
            log.info("Counting the decoded records in a job of their own.")
            self._row = self._aggregate(marked())
        return self._row

    @staticmethod
    def _aggregate(marked: DataFrame) -> dict[str, Any]:
        with kafka_errors():
            row = marked.agg(*_counts()).first()
        assert row is not None
        return row.asDict(recursive=False)


def _bad() -> Column:
    return F.col("decode_error").isNotNull()


def _counts() -> tuple[Column, ...]:
    """What a decoded slice's pass observes: its rows, the corrupt ones, the first of those."""
    return (F.count(F.lit(1)).alias("rows"), F.count_if(_bad()).alias("bad"),
            F.min(F.when(_bad(), F.struct("topic", "partition", "offset", "decode_error")))
            .alias("first"))


def _observed(observation: Observation) -> dict[str, Any] | None:
    """What ``observation`` saw, or None when the plan that carried it has not run (a
    transform that did not read it, or a sink that has not written yet)."""
    from pyspark.errors import PySparkAssertionError

    java = getattr(observation, "_jo", None)  # a classic session's; Spark Connect has none
    if java is not None and not java.future().isCompleted():
        return None
    try:
        return dict(observation.get)
    except PySparkAssertionError:
        return None


@dataclass(frozen=True)
class _Transformation:
    """An ingest's ``transform`` or ``sql`` (or neither), applied to the records."""

    spark: SparkSession
    owner: str
    transform: Transform | None
    sql: str | None

    def is_identity(self) -> bool:
        """Whether the records are written as read (no ``transform``, no ``sql``)."""
        return self.transform is None and not self.sql

    def apply(self, records: DataFrame, *, checking: bool) -> DataFrame:
        """``records`` through ``transform`` or ``sql``. With ``checking`` (``records`` is
        empty, before the read), a failure is a ConfigurationError about the argument."""
        if self.transform is not None:
            result = self._transformed(records, checking=checking)
        elif self.sql:
            records.createOrReplaceTempView(SQL_VIEW)
            if checking:
                self.check_sql(records.columns)
            result = self.spark.sql(self.sql)
        else:
            return records
        if checking:
            self.check_columns(result)
        return result

    def _transformed(self, records: DataFrame, *, checking: bool) -> DataFrame:
        assert self.transform is not None
        name = self._name()
        try:
            result = self.transform(records)
        except Exception as exc:
            if not checking:
                raise
            raise ConfigurationError(
                f"{self.owner}: transform={name} failed on an empty DataFrame with the "
                f"records' columns {records.columns} (called once before the read, to check "
                f"it): {error_line(exc)}. Fix the transform: it takes the records read and "
                "returns a pyspark DataFrame. Nothing was read or written."
            ) from exc
        if not isinstance(result, DataFrame):
            raise bad_argument(
                self.owner, "transform", name,
                "it must return a pyspark.sql.DataFrame (e.g. return df.select(...))",
                problem=f"returned {type(result).__name__}, not a DataFrame")
        return result

    def _name(self) -> str:
        return getattr(self.transform, "__qualname__", None) or shown(self.transform)

    def check_columns(self, shaped: DataFrame) -> None:
        """Columns of the output that Spark cannot tell apart fail here, before the read (no
        sink could write them)."""
        same = same_columns(shaped)
        if same:
            argument, value = (("transform", self._name()) if self.transform is not None
                               else ("sql", self.sql))
            raise bad_argument(
                self.owner, argument, value,
                "give each column its own name (e.g. .alias() or AS in the select that makes "
                "them), so that the sink can write them. Nothing was read or written",
                problem=f"returns the columns {same}, which Spark cannot tell apart "
                        f"({spark_compares(shaped)})")

    def check_sql(self, columns: list[str]) -> None:
        """Parse ``sql`` and analyse it as a subquery over the (empty) view: a syntax error,
        an unknown column, a command or several statements fail here, before the read."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import AnalysisException

        assert isinstance(self.sql, str)
        problem = "is not valid Spark SQL"
        try:
            jsession = getattr(self.spark, "_jsparkSession", None)
            if jsession is not None:  # the parser alone: positions as the user wrote them
                jsession.sessionState().sqlParser().parsePlan(self.sql)
            problem = "is not one query Spark can run over the records"
            query = self.sql.strip()
            while query.endswith(";"):
                query = query[:-1].rstrip()
            self.spark.sql(f"SELECT * FROM (\n{query}\n) AS _kafka_spark_sql").schema  # noqa: B018
        except (AnalysisException, Py4JJavaError) as exc:
            raise bad_argument(
                self.owner, "sql", self.sql,
                f"pass one query (SELECT, WITH ... SELECT, VALUES or TABLE; not a command nor "
                f"several statements) over the view '{SQL_VIEW}', whose columns are {columns}. "
                f"Spark said: {error_line(exc)}. Nothing was read or written",
                problem=problem) from exc


def _good(marked: DataFrame) -> DataFrame:
    """The decodable records of ``decode_kafka``'s ``dead_letter`` output, without its
    dead-letter columns."""
    return marked.where(F.col("decode_error").isNull()).drop(*DEAD_LETTER_COLUMNS)

