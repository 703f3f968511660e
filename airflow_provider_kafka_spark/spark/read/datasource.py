"""The ``kafka_bounded`` reader: reads exact offset ranges as Arrow batches, as the PySpark
Python Data Source :class:`KafkaBoundedDataSource` (``spark.read.format("kafka_bounded")``,
what ``read_kafka`` returns) or, for the reads whose rows only this package consumes (landing,
split ends), in the tasks of :func:`bounded_frame`.

Driver side, :class:`KafkaBoundedReader` turns the ``ranges`` option into splits
(:func:`~airflow_provider_kafka_spark.spark.read.splits.plan_splits`). Executor side,
:func:`read_ranges` reads one split (ranges of one or more partitions) with one native
reader (librdkafka, ``assign()``-ed at the ranges' starts, never ``subscribe()``) and yields
``pyarrow.RecordBatch`` es in the schema of
:func:`~airflow_provider_kafka_spark.spark.schema.kafka_schema`.

Options (all strings, as Spark passes them):

``ranges``
    An ``OffsetRanges`` JSON document (required).
``kafka.<librdkafka key>``
    The client config, e.g. ``kafka.bootstrap.servers``; the consumer is built by
    :func:`~airflow_provider_kafka_spark.offsets.consumer_config`.
``isolationLevel``
    ``read_committed`` (default) or ``read_uncommitted``.
``maxRecordsPerSplit``
    Cut ranges into splits of at most this many offsets (default: one split per range).
``includeHeaders``
    ``true`` (default) or ``false``.
``onDataLoss``
    ``fail`` (default) or ``skip``.
``pollTimeout``
    Seconds a split may make no progress before it fails (default 60).
``summaryAccumulator``
    The id of a driver-side Spark accumulator with :class:`SplitSummaries` (optional): each
    split read to its end adds its counts (records, offsets, timestamps, bytes), gathered as
    its batches pass (``read_kafka(..., summary=ReadSummary())`` sets it).
``landFolder``, ``landCompression``
    Land the records instead of returning them: each task writes its split's batches into one
    Parquet file of this local folder (with this codec, default ``snappy``) and returns one
    row of :data:`~airflow_provider_kafka_spark.spark.read.landing.REPORT_SCHEMA`
    (:mod:`~airflow_provider_kafka_spark.spark.read.landing`).
``lostOffsetsAccumulator``
    The id of a driver-side Spark accumulator with :class:`SplitLosses` (optional): with
    ``onDataLoss=skip`` each split adds the offsets it skipped, so the driver can count them
    (``read_kafka(..., lost=LostOffsets())`` sets it).
``decodeSecret``
    How the readers decode the records (``ReaderDecoding.to_json()``,
    :mod:`~airflow_provider_kafka_spark.spark.read.marking`): the read returns the marked
    records (``decode_kafka(..., on_corrupt="dead_letter")``'s columns), or with
    ``landFolder`` the landing writes the good ones and reports the corrupt ones.
``landOnCorrupt``
    With ``landFolder`` and ``decodeSecret``: ``fail`` (default), ``skip`` or
    ``dead_letter`` (the corrupt records as read into ``_dead_letter/`` files).
``splitEnds``
    ``true``: add the column ``_kafka_spark_split_end`` (null in every record) and, after each
    split's last record, one end row that holds the split and the number of records handed on
    (:mod:`~airflow_provider_kafka_spark.spark.split_ends`), for ``write_kafka`` to check that
    its input is whole (``read_kafka(..., split_ends=True)`` sets it); ``false`` (default).
    Not with ``landFolder``.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError
from pyspark.accumulators import Accumulator
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from airflow_provider_kafka_spark.errors import ConfigurationError, DataLossError, KafkaReadError
from airflow_provider_kafka_spark.offsets.config import (
    ISOLATION_LEVELS,
    MAX_TIMEOUT,
    AuthenticationWatch,
    KafkaConfig,
    check_timeout,
    native_settings,
    new_client,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.offsets.specs import MAX_OFFSET, shown
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.shaping import Shape
from airflow_provider_kafka_spark.spark.native import SliceReader
from airflow_provider_kafka_spark.spark.progress import reported
from airflow_provider_kafka_spark.spark.read.landing import REPORT_SCHEMA, ParquetFolder
from airflow_provider_kafka_spark.spark.read.marking import ReaderDecoding
from airflow_provider_kafka_spark.spark.read.splits import Split, plan_splits
from airflow_provider_kafka_spark.spark.read.summary import (
    SplitLosses,
    SplitSummaries,
    counted,
)
from airflow_provider_kafka_spark.spark.schema import kafka_schema, utc_arrow_schema
from airflow_provider_kafka_spark.spark.split_ends import SPLIT_END_COLUMN, with_split_end

log = logging.getLogger(__name__)

FORMAT_NAME = "kafka_bounded"
LOST_OFFSETS_OPTION = "lostOffsetsAccumulator"
SUMMARY_OPTION = "summaryAccumulator"
LAND_FOLDER_OPTION = "landFolder"
LAND_COMPRESSION_OPTION = "landCompression"
LAND_CONSTANTS_OPTION = "landConstants"
"""The constant columns of the landed files (JSON ``[[name, value], ...]``)."""
LAND_SHAPE_OPTION = "landShape"
"""The columns of the landed files (JSON: ``Shape.to_json()``)."""
LAND_PARTITION_BY_OPTION = "landPartitionBy"
"""The columns of the shape whose values name the landed files' folders (JSON list)."""
LAND_SPLIT_BY_OPTION = "landSplitBy"
"""The Iceberg partition transforms the landed files are split by (JSON ``[[name, column,
transform], ...]``)."""
SPLIT_ENDS_OPTION = "splitEnds"
DECODE_OPTION = "decodeSecret"
"""How the readers decode the records (JSON: ``ReaderDecoding.to_json()``): the read returns
the marked records (:mod:`~airflow_provider_kafka_spark.spark.read.marking`), or the landing
writes the good ones (its ``on_corrupt`` in ``landOnCorrupt``). Named with ``Secret``: it holds
the registry's client config."""
LAND_ON_CORRUPT_OPTION = "landOnCorrupt"
PROGRESS_OPTION = "progressTo"
"""``host:port`` where each reader reports its records read while its task runs
(:func:`~airflow_provider_kafka_spark.spark.progress.reported`)."""
LAND_S3_OPTION = "landS3Secret"
"""The S3 settings of an ``s3://`` landing folder (JSON, keys included): named with ``Secret``
so that Spark redacts its value wherever it shows a plan's options."""
KAFKA_OPTION_PREFIX = "kafka."
SPLIT_END_FIELD = StructField(SPLIT_END_COLUMN, StructType([
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("start", LongType()), StructField("stop", LongType()),
    StructField("records", LongType()), StructField("split", LongType()),
    StructField("ranges", IntegerType())]))
"""The column of the end rows (``splitEnds``): Spark's form of
:data:`~airflow_provider_kafka_spark.spark.split_ends.SPLIT_END_TYPE`."""
DEFAULT_POLL_TIMEOUT = 60.0
# Records per Arrow batch handed to Spark (at most; a batch ends when the consumer's queue is
# empty).
ARROW_BATCH_RECORDS = 20_000
# The longest wait for a first record of a batch; progress is checked between waits.
_CONSUME_WAIT = 0.5
_DATA_LOSS_CODES = frozenset({KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET})
# Errors that cannot heal by waiting: fail the split at once.
_PERMANENT_CODES = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError._INVALID_ARG,
})


def _config_from_options(options: Mapping[str, str]) -> dict[str, str]:
    # Spark may lower-case option keys; librdkafka keys are lower-case anyway.
    return {k[len(KAFKA_OPTION_PREFIX):]: v for k, v in options.items()
            if k.lower().startswith(KAFKA_OPTION_PREFIX)}


@dataclass(frozen=True)
class ReadOptions:
    """The checked options of one ``kafka_bounded`` read (see the module docs)."""

    ranges: OffsetRanges
    kafka_config: dict[str, str]
    isolation_level: str
    max_records_per_split: int | None
    include_headers: bool
    on_data_loss: str
    poll_timeout: float
    lost_offsets_accumulator: int | None
    summary_accumulator: int | None = None
    landing: ParquetFolder | None = None
    split_ends: bool = False
    progress_to: str | None = None
    decoding: ReaderDecoding | None = None


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse and check the options of format ``kafka_bounded``: the reader calls it inside
    Spark (``read_kafka`` passes values it checked itself, and Spark gives a user's
    ``spark.read.format("kafka_bounded")`` options as they are).

    Raises:
        ConfigurationError: a missing or invalid option; the message names it and its valid
            values. OffsetSpecError: the ``ranges`` option is not offset ranges.
    """
    if "ranges" not in options:
        raise ConfigurationError(
            f"format {FORMAT_NAME!r} needs the 'ranges' option: an OffsetRanges JSON document "
            "(OffsetRanges.to_json()); read_kafka sets it."
        )
    level = options.get("isolationLevel", "read_committed")
    if level not in ISOLATION_LEVELS:
        raise _bad_option("isolationLevel", level, f"use one of {ISOLATION_LEVELS}")
    on_data_loss = options.get("onDataLoss", "fail")
    if on_data_loss not in ("fail", "skip"):
        raise _bad_option("onDataLoss", on_data_loss, "use 'fail' or 'skip'")
    split_ends = _bool_option(options, SPLIT_ENDS_OPTION, False)
    if split_ends and LAND_FOLDER_OPTION in options:
        raise _bad_option(SPLIT_ENDS_OPTION, "true", f"a read with {LAND_FOLDER_OPTION} returns "
                          "no records to mark the ends of; leave it out")
    if split_ends and DECODE_OPTION in options:
        raise _bad_option(SPLIT_ENDS_OPTION, "true", f"a read with {DECODE_OPTION} returns "
                          "decoded records, which have no split ends; leave it out")
    decoding = options.get(DECODE_OPTION)
    return ReadOptions(
        ranges=OffsetRanges.from_json(options["ranges"]),
        kafka_config=_config_from_options(options),
        isolation_level=level,
        max_records_per_split=_int_option(options, "maxRecordsPerSplit",
                                          "pass a positive int (offsets per split)", minimum=1),
        include_headers=_bool_option(options, "includeHeaders", True),
        on_data_loss=on_data_loss,
        poll_timeout=_seconds_option(options, "pollTimeout", DEFAULT_POLL_TIMEOUT),
        lost_offsets_accumulator=_int_option(options, LOST_OFFSETS_OPTION,
                                             "pass an int (the id of a Spark accumulator)",
                                             minimum=0),
        summary_accumulator=_int_option(options, SUMMARY_OPTION,
                                        "pass an int (the id of a Spark accumulator)", minimum=0),
        landing=_landing_option(options),
        split_ends=split_ends,
        progress_to=options.get(PROGRESS_OPTION) or None,
        decoding=None if decoding is None else ReaderDecoding.from_json(decoding),
    )


def _landing_option(options: Mapping[str, str]) -> ParquetFolder | None:
    folder = options.get(LAND_FOLDER_OPTION)
    if folder is None:
        return None
    s3 = options.get(LAND_S3_OPTION)
    constants = json.loads(options.get(LAND_CONSTANTS_OPTION, "[]"))
    shape = options.get(LAND_SHAPE_OPTION)
    decoding = options.get(DECODE_OPTION)
    return ParquetFolder(folder, options.get(LAND_COMPRESSION_OPTION, "snappy").lower(),
                         None if s3 is None else S3Settings.from_json(s3),
                         tuple((str(n), str(v)) for n, v in constants),
                         None if shape is None else Shape.from_json(json.loads(shape)),
                         tuple(json.loads(options.get(LAND_PARTITION_BY_OPTION, "[]"))),
                         None if decoding is None else ReaderDecoding.from_json(decoding),
                         options.get(LAND_ON_CORRUPT_OPTION, "fail"),
                         tuple((str(n), str(c), str(t)) for n, c, t in
                               json.loads(options.get(LAND_SPLIT_BY_OPTION, "[]"))))


def _bad_option(name: str, value: object, expected: str) -> ConfigurationError:
    return ConfigurationError(
        f"option {name}={shown(value)} of format {FORMAT_NAME!r} is not valid; {expected}.")


def _int_option(options: Mapping[str, str], name: str, expected: str,
                minimum: int) -> int | None:
    value = options.get(name)
    if not value:
        return None
    if not re.fullmatch(r"[0-9]{1,19}", value) or not minimum <= int(value) <= MAX_OFFSET:
        raise _bad_option(name, value, expected)
    return int(value)


def _seconds_option(options: Mapping[str, str], name: str, default: float) -> float:
    value = options.get(name)
    if value is None:
        return default
    try:
        return check_timeout(float(value), name)
    except (ValueError, ConfigurationError):  # not a number, or not a timeout
        raise _bad_option(name, value, f"pass a positive number of seconds (at most "
                                       f"{MAX_TIMEOUT:.0f})") from None


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise _bad_option(name, value, "use 'true' or 'false'")
    return value.lower() == "true"


class KafkaSplit(InputPartition):
    """One Spark input partition: a :class:`~airflow_provider_kafka_spark.spark.read.splits.
    Split` (contiguous ``[start, stop)`` ranges of distinct Kafka partitions), the
    ``index``-th of the read."""

    def __init__(self, split: Split, index: int = 0) -> None:
        super().__init__(split)
        self.split = split
        self.index = index


def read_schema(options: Mapping[str, str]) -> StructType:
    """The schema of a read with ``options``: the records' (with the end column of
    ``splitEnds``; marked, with ``decodeSecret``), or the landing's reports
    (``landFolder``)."""
    if LAND_FOLDER_OPTION in options:
        return REPORT_SCHEMA
    if DECODE_OPTION in options:
        return ReaderDecoding.from_json(options[DECODE_OPTION]).spark_schema
    schema = kafka_schema(_bool_option(options, "includeHeaders", True))
    if _bool_option(options, SPLIT_ENDS_OPTION, False):
        schema = StructType([*schema.fields, SPLIT_END_FIELD])
    return schema


def bounded_frame(spark: Any, options: Mapping[str, str], *,
                  lost_offsets: Accumulator[Any] | None = None,
                  summaries: Accumulator[Any] | None = None) -> Any:
    """The DataFrame of format ``kafka_bounded``'s read with ``options``, planned here and read
    by one ``mapInArrow`` task per split (the same :class:`KafkaBoundedReader`), on a classic
    or a Spark Connect session: what ``read_kafka`` runs for the reads whose rows only this
    package consumes (landing reports, ``write_kafka``'s input with split ends). The
    accumulators are the driver's own objects (the options' ids are for a data source, planned
    elsewhere).

    Not through the data source: Spark plans a Python data source in daemons of its own (one
    looks up the installed sources, one creates the source, one plans each read), each starting
    an interpreter that imports PySpark from Spark's ``pyspark.zip``, which Python compiles anew
    each time (measured on PySpark 4.3: a new driver's Python processes for one read, 13-15 ->
    8 CPU seconds). But Spark sizes this plan by its input, one row per split, small enough to
    broadcast in a join: never hand it to code that may join it.
    """
    schema = read_schema(options)
    reader = KafkaBoundedReader(options, schema, lost_offsets=lost_offsets,
                                summaries=summaries)
    splits = reader.partitions()
    tasks = spark.range(0, len(splits), 1, max(len(splits), 1))
    return tasks.mapInArrow(_SplitTasks(reader, splits), schema)


class _SplitTasks:
    """The ``mapInArrow`` function of :func:`bounded_frame`: each input row is the index of a
    split, read by the reader."""

    def __init__(self, reader: KafkaBoundedReader, splits: list[InputPartition]) -> None:
        self.reader = reader
        self.splits = splits

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from self.reader.read(self.splits[index])


class KafkaBoundedDataSource(DataSource):
    """``spark.read.format("kafka_bounded")``: a bounded read of exact offset ranges."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return read_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBoundedReader(self.options, schema)


class KafkaBoundedReader(DataSourceReader):
    """Plans splits on the driver; reads each one on an executor with :func:`read_ranges`."""

    def __init__(self, options: Mapping[str, str], schema: StructType, *,
                 lost_offsets: Accumulator[Any] | None = None,
                 summaries: Accumulator[Any] | None = None) -> None:
        checked = read_options(options)
        self.ranges = checked.ranges
        self.kafka_config = checked.kafka_config
        self.isolation_level = checked.isolation_level
        self.max_records_per_split = checked.max_records_per_split
        self.landing = checked.landing
        self.decoding = None if self.landing else checked.decoding  # (the landing decodes)
        self.include_headers = (checked.include_headers if self.landing
                                else "headers" in schema.fieldNames())
        self.on_data_loss = checked.on_data_loss
        self.poll_timeout = checked.poll_timeout
        self.schema = (kafka_schema(self.include_headers) if self.landing or self.decoding
                       else schema)
        self.split_ends = checked.split_ends
        self.progress_to = checked.progress_to
        # Pickled with the reader: each task registers it and Spark sends its adds back.
        accumulator_id = checked.lost_offsets_accumulator
        self.lost_offsets = (Accumulator(accumulator_id, {}, SplitLosses())
                             if accumulator_id is not None else lost_offsets)
        summary_id = checked.summary_accumulator
        self.summaries = (Accumulator(summary_id, {}, SplitSummaries())
                          if summary_id is not None else summaries)

    def partitions(self) -> list[InputPartition]:
        return [KafkaSplit(s, i) for i, s in
                enumerate(plan_splits(self.ranges, self.max_records_per_split))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaSplit)
        split, index = partition.split, partition.index
        ranges = self._ranges(split, index)
        if self.landing is not None:
            return self.landing.write(split, index, ranges)
        return (batch for _, batches in ranges for batch in batches)

    def _ranges(self, split: Split, index: int
                ) -> Iterator[tuple[PartitionRange, Iterator[pa.RecordBatch]]]:
        """Each range of ``split`` with its batches, as the read hands them on (counted,
        reported, ended)."""
        schema = utc_arrow_schema(self.schema)
        for r, batches in read_ranges(
            split,
            self.kafka_config,
            isolation_level=self.isolation_level,
            include_headers=self.include_headers,
            on_data_loss=self.on_data_loss,
            poll_timeout=self.poll_timeout,
            arrow_schema=utc_arrow_schema(StructType(
                [f for f in self.schema.fields if f.name != SPLIT_END_COLUMN])),
            on_skip=None if self.lost_offsets is None else self._count_skipped,
        ):
            if self.progress_to is not None:
                batches = reported(batches, self.progress_to, f"{r.topic}/{r.partition}/{r.start}")
            if self.landing is None and self.summaries is not None:
                batches = counted(batches, r, self.summaries)
            if self.decoding is not None:
                batches = map(self.decoding.mark, batches)
            if self.split_ends:
                batches = with_split_end(batches, r, schema, index=index,
                                         ranges=len(split.ranges))
            yield r, batches

    def _count_skipped(self, split: PartitionRange, skipped: int) -> None:
        assert self.lost_offsets is not None
        self.lost_offsets.add({(split.topic, split.partition, split.start): skipped})


def read_split(
    split: Split | PartitionRange,
    kafka_config: KafkaConfig | Mapping[str, Any],
    *,
    isolation_level: str = "read_committed",
    include_headers: bool = True,
    on_data_loss: str = "fail",
    poll_timeout: float = DEFAULT_POLL_TIMEOUT,
    arrow_schema: pa.Schema | None = None,
    on_skip: Callable[[PartitionRange, int], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Read exactly the records of ``split`` (a :class:`~airflow_provider_kafka_spark.spark.
    read.splits.Split`, or one range: offsets ``[start, stop)``) as Arrow batches, range after
    range, each batch of one range; see :func:`read_ranges`."""
    for _, batches in read_ranges(split, kafka_config, isolation_level=isolation_level,
                                  include_headers=include_headers, on_data_loss=on_data_loss,
                                  poll_timeout=poll_timeout, arrow_schema=arrow_schema,
                                  on_skip=on_skip):
        yield from batches


def read_ranges(
    split: Split | PartitionRange,
    kafka_config: KafkaConfig | Mapping[str, Any],
    *,
    isolation_level: str = "read_committed",
    include_headers: bool = True,
    on_data_loss: str = "fail",
    poll_timeout: float = DEFAULT_POLL_TIMEOUT,
    arrow_schema: pa.Schema | None = None,
    on_skip: Callable[[PartitionRange, int], None] | None = None,
) -> Iterator[tuple[PartitionRange, Iterator[pa.RecordBatch]]]:
    """Each non-empty range of ``split`` with an iterator of exactly its records as Arrow
    batches, in the split's order; iterate each range's batches to the end before the next
    range (the ranges share one consumer).

    The records are consumed and put into Arrow columns by the native reader
    (:class:`~airflow_provider_kafka_spark._native.SliceReader`, librdkafka): one consumer
    assigned to every range at its start, fetching them all in the same requests, each
    partition into a queue of its own; this function decides what its events mean. A fetch
    never waits long for data that cannot come (``fetch.wait.max.ms`` defaults to 10 ms for a
    bounded reader: the end of a range at the log's end is known at once). A range that is read
    stops being fetched.

    A range is complete once the consumer's position reaches ``stop``: a record at an offset
    ``>= stop`` arrives (it is dropped) or the end of the partition is reported at or after
    ``stop``. It never waits for a record at ``stop - 1``: transaction markers, aborted records
    (under ``read_committed``) and compaction leave gaps.

    Raises:
        ConfigurationError: librdkafka refused ``kafka_config`` (an unknown key, a bad value).
        DataLossError: offsets of a range were deleted (``OFFSET_OUT_OF_RANGE``) and
            ``on_data_loss="fail"``. With ``"skip"`` the reader logs a warning, counts the lost
            offsets, calls ``on_skip`` with the range and its count so far, and continues at
            the log start offset (with a consumer of that range alone).
        KafkaAuthenticationError: librdkafka reported an authentication failure.
        KafkaReadError: no progress for ``poll_timeout`` seconds (broker down, an open
            transaction holding the last stable offset below ``stop``), or a permanent error.
    """
    poll_seconds = check_timeout(poll_timeout, "poll_timeout")
    ranges = [r for r in (split.ranges if isinstance(split, Split) else (split,)) if r.size > 0]
    if not ranges:
        return
    schema = arrow_schema or utc_arrow_schema(kafka_schema(include_headers))
    watch = AuthenticationWatch(
        KafkaConfig.of(kafka_config).consumer(isolation_level=isolation_level))
    settings = native_settings(watch.settings)
    settings.update(_queue_limits(watch.settings, len(ranges)))
    reader = new_client(lambda _: SliceReader(
        settings, [(r.topic, r.partition, r.start, r.stop) for r in ranges], schema),
        watch.settings)
    try:
        for index, r in enumerate(ranges):
            alone = functools.partial(_alone, settings, r, schema=schema)
            yield r, _RangeReader(reader, index, r, on_data_loss, poll_seconds,
                                  isolation_level, on_skip, watch, alone).batches()
            if len(ranges) > 1:
                reader.pause(index)
    finally:
        reader.close()


_QUEUE_KBYTES = 65_536
"""librdkafka's default ``queued.max.messages.kbytes`` (per partition queue): a reader of many
ranges shares it out among them."""


def _queue_limits(user: Mapping[str, Any], ranges: int) -> dict[str, str]:
    """Prefetch limits for a consumer of ``ranges`` partition queues, unless the config sets
    them: each queue keeps ``64 MiB / ranges`` (at least 256 KiB), each fetch brings at most
    as much of a partition (at least 64 KiB), so the reader's prefetch stays near 64 MiB."""
    if ranges <= 1:
        return {}
    share = _QUEUE_KBYTES // ranges
    limits = {"queued.max.messages.kbytes": str(max(share, 256)),
              "max.partition.fetch.bytes": str(max(share, 64) * 1024)}
    return {k: v for k, v in limits.items() if k not in user}


def _alone(settings: dict[str, str], r: PartitionRange, at: int, *,
           schema: pa.Schema) -> SliceReader:
    """A consumer of what is left of range ``r`` from ``at``, alone (after data loss)."""
    return SliceReader(settings, [(r.topic, r.partition, at, r.stop)], schema)


class _RangeReader:
    """The position bookkeeping of one range of a reader (``index``) over its fills."""

    def __init__(self, reader: SliceReader, index: int, split: PartitionRange,
                 on_data_loss: str, poll_timeout: float, isolation_level: str,
                 on_skip: Callable[[PartitionRange, int], None] | None,
                 watch: AuthenticationWatch,
                 alone: Callable[[int], SliceReader]) -> None:
        self.reader = reader
        self.index = index
        self.own: SliceReader | None = None  # the range's own consumer, after data loss
        self.alone = alone
        self.watch = watch
        self.split = split
        self.on_data_loss = on_data_loss
        self.poll_timeout = poll_timeout
        self.isolation_level = isolation_level
        self.on_skip = on_skip
        self.position = split.start  # the next offset this range still needs
        self.end_of_log: int | None = None  # last end-of-partition offset seen below stop
        self.last_error: KafkaError | None = None
        self.skipped = 0

    def batches(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._batches()
        finally:
            if self.own is not None:
                self.own.close()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        stop = self.split.stop
        last_progress = time.monotonic()
        while self.position < stop:
            before = self.position
            if self.own is not None:
                batch, next_offset, event = self.own.fill(0, ARROW_BATCH_RECORDS, _CONSUME_WAIT)
            else:
                batch, next_offset, event = self.reader.fill(self.index, ARROW_BATCH_RECORDS,
                                                             _CONSUME_WAIT)
            if batch is not None:
                yield batch
            self.position = max(self.position, next_offset)
            if event is not None:
                code, reason, offset = event
                self._event(KafkaError(code, reason), offset)
            for code, reason in self._errors():
                self.watch.record(KafkaError(code, reason))
            if self.position > before:
                last_progress = time.monotonic()
            elif self.watch.failure is not None:  # reported through error_cb, at once
                self.watch.check(f"reading {self._where()}")
            elif time.monotonic() - last_progress > self.poll_timeout:
                raise KafkaReadError(self._stalled_message())
        if self.skipped:
            log.warning("%s/%d: skipped %d deleted offset(s) (on_data_loss='skip').",
                        self.split.topic, self.split.partition, self.skipped)

    def _event(self, error: KafkaError, offset: int) -> None:
        """Handle a consumer event: end of partition, data loss, or an error."""
        stop = self.split.stop
        if error.code() == KafkaError._PARTITION_EOF:
            if offset >= stop:
                self.position = stop
                return
            # Skipped markers or aborted records count as progress; the end of the
            # readable log below stop does not.
            self.position = max(self.position, offset)
            self.end_of_log = offset
        elif error.code() in _DATA_LOSS_CODES:
            self._data_lost(error)
        elif error.fatal() or error.code() in _PERMANENT_CODES:
            raise KafkaReadError(
                f"reading {self._where()} failed at offset {self.position}: {error.str()}. "
                "Check that the topic exists and the client config (security, ACLs)."
            )
        else:
            # Transient (broker down, timeouts): librdkafka retries; poll_timeout bounds it.
            self.last_error = error

    def _errors(self) -> list[tuple[int, str]]:
        errors = self.reader.take_errors()
        return errors if self.own is None else [*errors, *self.own.take_errors()]

    def _data_lost(self, error: KafkaError) -> None:
        low, _high = self.reader.watermarks(self.index, 10.0)
        lost = max(min(low, self.split.stop) - self.position, 0)
        detail = (f"{self._where()}: offsets {self.position}..{min(low, self.split.stop) - 1} "
                  f"were deleted while the range was being read (log start offset is now {low})")
        if self.on_data_loss == "fail":
            raise DataLossError(
                f"data loss in {detail}; broker said: {error.str()}. Retention or "
                "delete_records removed them. Pass on_data_loss='skip' to read what is left, "
                "or resolve the offsets again. "
                f"[lost: {self.split.topic}/{self.split.partition}={lost}]",
                {(self.split.topic, self.split.partition): lost},
            )
        log.warning("skipping lost data (on_data_loss='skip'): %s.", detail)
        self.skipped += lost
        if self.on_skip is not None:
            self.on_skip(self.split, self.skipped)
        self.position = max(self.position, low)
        if self.position < self.split.stop:  # the rest of the range, with a consumer of its own
            if self.own is not None:
                self.own.close()
            else:
                self.reader.pause(self.index)
            self.own = self.alone(self.position)

    def _where(self) -> str:
        return f"{self.split.topic}/{self.split.partition} [{self.split.start}, {self.split.stop})"

    def _stalled_message(self) -> str:
        reason = (f"the last error was: {self.last_error.str()}" if self.last_error
                  else "no error was reported")
        end = ("" if self.end_of_log is None else
               f" The readable end of the partition ({self.isolation_level}) is "
               f"{self.end_of_log}, below the range's stop: an open transaction holds the last "
               "stable offset, or the range was resolved with another isolation level.")
        return (f"reading {self._where()} made no progress for {self.poll_timeout:.0f}s at "
                f"offset {self.position}; {reason}.{end} Check the brokers, or raise "
                "poll_timeout.")
