"""``read_kafka``: a bounded Spark read of exactly the resolved offset ranges."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets.cluster import admin_client, readable_ranges
from airflow_provider_kafka_spark.offsets.config import (
    KafkaConfig,
    check_isolation_level,
    check_timeout,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.options import ENGINES, Engine
from airflow_provider_kafka_spark.spark.read.datasource import (
    DEFAULT_POLL_TIMEOUT,
    SPLIT_END_FIELD,
)
from airflow_provider_kafka_spark.spark.read.landing import REPORT_SCHEMA, ParquetFolder
from airflow_provider_kafka_spark.spark.read.marking import ReaderDecoding
from airflow_provider_kafka_spark.spark.read.sources import spark_read
from airflow_provider_kafka_spark.spark.read.splits import (
    check_max_records_per_split,
    default_max_records_per_split,
)
from airflow_provider_kafka_spark.spark.read.summary import (
    LostOffsets,
    ReadSummary,
    SplitLosses,
    SplitSummaries,
)
from airflow_provider_kafka_spark.spark.schema import kafka_schema

__all__ = ["LostOffsets", "read_kafka"]

log = logging.getLogger(__name__)


def read_kafka(
    spark: SparkSession,
    ranges: OffsetRanges | str | Mapping[str, Any],
    kafka_config: Mapping[str, Any],
    *,
    isolation_level: str = "read_committed",
    max_records_per_split: int | None = None,
    engine: Engine = "python",
    include_headers: bool = True,
    on_data_loss: Literal["fail", "skip"] = "fail",
    poll_timeout: float = DEFAULT_POLL_TIMEOUT,
    lost: LostOffsets | None = None,
    summary: ReadSummary | None = None,
    landing: ParquetFolder | None = None,
    timeout: float = 30.0,
    split_ends: bool = False,
    progress_to: str | None = None,
    decoding: ReaderDecoding | None = None,
) -> DataFrame:
    """A DataFrame of exactly the records in ``ranges``: offsets ``[start, stop)`` per partition.

    The schema is that of Spark's ``kafka`` source (see
    :func:`~airflow_provider_kafka_spark.spark.schema.kafka_schema`); ``headers`` only with
    ``include_headers``. Reading the same ranges again returns the same records, so a retried
    task is idempotent. Under ``read_committed`` aborted records and transaction markers are
    not returned; a range may therefore hold fewer records than ``stop - start``.

    Args:
        spark: the session to read with.
        ranges: an ``OffsetRanges``, its JSON string or its dict (e.g. from XCom).
        kafka_config: librdkafka settings; ``bootstrap.servers`` is required.
        isolation_level: ``"read_committed"`` or ``"read_uncommitted"``; use the level the
            ranges were resolved with.
        max_records_per_split: cut each range into contiguous Spark partitions of at most this
            many offsets. Default: ``ceil(total / default parallelism)`` over the ``ranges``
            given, at least 50,000, so one big partition still keeps every core busy.
        engine: ``"python"`` (a Python data source; needs no JVM jar) or ``"spark-kafka"``
            (Spark's own ``kafka`` source with numeric ``startingOffsets``/``endingOffsets``;
            needs the ``spark-sql-kafka-0-10`` package on the classpath; the connection's
            librdkafka security settings are translated for its Java client, see
            :mod:`~airflow_provider_kafka_spark.spark.read.sources`).
        include_headers: add the ``headers`` column.
        on_data_loss: ``"fail"``: offsets deleted before or during the read raise
            :class:`DataLossError`; ``"skip"``: log and count them and read what is left.
        poll_timeout: seconds a split may make no progress before it fails
            (``engine="python"``); a positive, finite number.
        lost: a new :class:`LostOffsets` to count what ``on_data_loss="skip"`` skipped, per
            partition: at resolution, before the read (known when ``read_kafka`` returns) and
            during it (known once an action on the DataFrame has run).
        summary: a new :class:`ReadSummary` to gather the per-partition statistics in the
            pass that reads the records (``engine="python"`` on a classic session; see there).
        landing: write the records as Parquet into this local folder in the readers
            themselves (``engine="python"``), and return one row per split that reports its
            file and counts instead of the records (:mod:`~airflow_provider_kafka_spark.
            spark.read.landing`).
        timeout: seconds the driver waits for the cluster before the read (the log start
            offsets of the ranges); a positive, finite number. The first request, for the
            cluster's metadata, waits at most ``CONNECT_TIMEOUT_S`` (10 s) of it for some
            broker to answer (:func:`~airflow_provider_kafka_spark.offsets.cluster.
            reach_cluster`).
        split_ends: for ``write_kafka``, which checks with them that each of its tasks got the
            whole of its split (``ingest`` sets it when it writes the records as read into an
            exactly-once ``KafkaSink``): add the column ``_kafka_spark_split_end``, null in
            every record, and after each split's last record one end row whose other columns
            are null (:mod:`~airflow_provider_kafka_spark.spark.split_ends`). ``write_kafka``
            strips the end rows; anything else would see them as records. ``engine="python"``,
            not with ``landing``. With ``landing`` or ``split_ends`` the read is one
            ``mapInArrow`` task per split rather than the ``kafka_bounded`` data source (no
            Python processes to plan it): Spark takes such a plan for a small one, so do not
            join it.
        progress_to: ``host:port`` where each reader reports its records read while its task
            runs (``ingest``'s progress lines give it: a ``SplitReports`` of
            :mod:`~airflow_provider_kafka_spark.spark.progress`); ``engine="python"``.
        decoding: the readers decode the records themselves and return them marked, as
            ``decode_kafka(..., on_corrupt="dead_letter")`` would
            (:class:`~airflow_provider_kafka_spark.spark.read.marking.ReaderDecoding`, which
            ``ingest`` builds); ``engine="python"``, not with ``landing`` (a landing folder
            has its own) or ``split_ends``.

    Empty ranges give an empty DataFrame with the schema, without contacting Kafka.
    Offsets already deleted when ``read_kafka`` is called are detected here on the driver;
    deletions during the Spark job are found on the executor, which fails the job (``"fail"``)
    or skips them (``"skip"``; pass ``lost=`` to count them). Wrap the action in
    :func:`kafka_errors` to get :class:`DataLossError` / :class:`KafkaReadError` back.

    Every argument is checked here, on the driver, before Spark or Kafka is asked anything
    (the translation of the client config for ``engine="spark-kafka"``: before Spark is).

    The steps, one way: the arguments checked and settled (the split size of the ranges
    asked for); the config turned into what each client needs (the executors' settings, an
    admin client); the ranges' starts checked against the cluster
    (:func:`~airflow_provider_kafka_spark.offsets.cluster.readable_ranges`); the counters
    given the ranges read; the engine's source given its options
    (:func:`~airflow_provider_kafka_spark.spark.read.sources.spark_read`).

    Raises:
        ConfigurationError: an invalid argument or client config (the message names it and
            what to pass); ``lost=`` with ``on_data_loss="skip"`` on a Spark Connect session
            (see :class:`LostOffsets`). OffsetSpecError: ``ranges`` are not offset ranges.
        OffsetResolutionError: no broker of ``bootstrap.servers`` answered within
            ``min(timeout, 10)`` seconds, or the cluster did not answer within ``timeout``.
        DataLossError: the start of a range is below the partition's log start offset and
            ``on_data_loss="fail"``.
        SparkKafkaSourceMissingError: ``engine="spark-kafka"`` without the package.
    """
    _check_session(spark)
    offset_ranges = OffsetRanges.from_json(ranges)
    level = check_isolation_level(isolation_level)
    if engine not in ENGINES:
        raise ConfigurationError(f"engine={shown(engine)} is not valid; use one of {ENGINES}.")
    if on_data_loss not in ("fail", "skip"):
        raise ConfigurationError(f"on_data_loss={shown(on_data_loss)} is not valid; use 'fail' "
                                 "or 'skip'.")
    if not isinstance(include_headers, bool):
        raise ConfigurationError(f"include_headers={shown(include_headers)} is not a bool; pass "
                                 "True or False.")
    check_max_records_per_split(max_records_per_split)
    if lost is not None and not isinstance(lost, LostOffsets):
        raise ConfigurationError(f"lost={shown(lost)} is not a LostOffsets; pass a new "
                                 "LostOffsets() (or None).")
    if landing is not None and (not isinstance(landing, ParquetFolder) or engine != "python"):
        raise ConfigurationError(f"landing={shown(landing)} needs a ParquetFolder and "
                                 "engine='python'.")
    if not isinstance(split_ends, bool) or (split_ends and (engine != "python" or landing)):
        raise ConfigurationError(f"split_ends={shown(split_ends)} is not valid; pass True (with "
                                 "engine='python' and no landing) or False.")
    if decoding is not None and (not isinstance(decoding, ReaderDecoding) or engine != "python"
                                 or landing is not None or split_ends):
        raise ConfigurationError(f"decoding={shown(decoding)} needs a ReaderDecoding and "
                                 "engine='python', without landing or split_ends.")
    if progress_to is not None and (not isinstance(progress_to, str) or ":" not in progress_to):
        raise ConfigurationError(f"progress_to={shown(progress_to)} is not valid; pass "
                                 "'host:port' (or None).")
    if summary is not None and not isinstance(summary, ReadSummary):
        raise ConfigurationError(f"summary={shown(summary)} is not a ReadSummary; pass a new "
                                 "ReadSummary() (or None).")
    poll_seconds = check_timeout(poll_timeout, "poll_timeout")
    seconds = check_timeout(timeout)
    context = getattr(spark, "_sc", None)  # a classic session's SparkContext; None on Connect
    if lost is not None and on_data_loss == "skip" and engine == "python" and context is None:
        raise ConfigurationError(
            "read_kafka(lost=LostOffsets(), on_data_loss='skip') cannot count on a Spark Connect "
            "session the offsets deleted while the executors read them (the counts travel in a "
            "Spark accumulator, which Spark Connect does not have), so they would be skipped "
            "without a count. Pass on_data_loss='fail' (a deletion during the read fails the "
            "read), or read with a classic session, or pass lost=None to skip deleted offsets "
            "uncounted (the executors log them). Nothing was read."
        )
    config = KafkaConfig.of(kafka_config)
    settings = config.native()  # the executors' client settings: checks they travel as strings
    if offset_ranges.is_empty():
        if lost is not None:
            lost._track(offset_ranges.lost, None)
        if summary is not None:
            summary._track((), None)
        schema = kafka_schema(include_headers)
        return spark.createDataFrame([], REPORT_SCHEMA if landing else StructType(
            [*schema.fields, SPLIT_END_FIELD]) if split_ends else
            decoding.spark_schema if decoding else schema)
    if offset_ranges.isolation_level != level:
        log.warning("The ranges were resolved with %s but are read with %s; a read_committed "
                    "read of read_uncommitted ranges can wait on open transactions.",
                    offset_ranges.isolation_level, level)
    if max_records_per_split is None:  # the ranges asked for, over every core
        max_records_per_split = default_max_records_per_split(offset_ranges.total(),
                                                              _parallelism(spark))
    during_read = summaries = None
    if engine == "python" and context is not None:  # the readers count in Spark accumulators
        if lost is not None and on_data_loss == "skip":
            during_read = context.accumulator({}, SplitLosses())
        if summary is not None and landing is None:
            summaries = context.accumulator({}, SplitSummaries())
    offset_ranges = readable_ranges(admin_client(config), config.cluster, offset_ranges,
                                    on_data_loss, seconds)
    if lost is not None:
        lost._track(offset_ranges.lost, during_read)
    if summary is not None and summaries is not None:
        summary._track(offset_ranges, summaries)
    return spark_read(
        spark, offset_ranges, settings, engine=engine, isolation_level=level,
        max_records_per_split=max_records_per_split, include_headers=include_headers,
        on_data_loss=on_data_loss, poll_timeout=poll_seconds, lost_offsets=during_read,
        summaries=summaries, landing=landing, split_ends=split_ends,
        progress_to=progress_to if engine == "python" else None, decoding=decoding)


def _check_session(spark: object) -> None:
    """A classic or Spark Connect session (they share no base class)."""
    if not (hasattr(spark, "read") and callable(getattr(spark, "createDataFrame", None))):
        raise ConfigurationError(f"spark={shown(spark)} is not a SparkSession; pass a "
                                 "SparkSession, e.g. spark_session() or the active one.")


def _parallelism(spark: SparkSession) -> int:
    try:
        return max(int(spark.sparkContext.defaultParallelism), 1)
    except Exception:  # Spark Connect has no SparkContext: fall back to the configured value.
        return max(int(spark.conf.get("spark.default.parallelism", "2") or 2), 1)
