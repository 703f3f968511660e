"""``read_kafka``: a bounded Spark read of exactly the resolved offset ranges."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame, SparkSession

from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    DataLossError,
    OffsetResolutionError,
    SparkKafkaSourceMissingError,
)
from airflow_provider_kafka_spark.offsets.cluster import (
    RESULT_MARGIN,
    admin_client,
    cluster_failure,
    reach_cluster,
)
from airflow_provider_kafka_spark.offsets.config import (
    KafkaConfig,
    check_isolation_level,
    check_timeout,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.options import ENGINES, Engine
from airflow_provider_kafka_spark.spark.read.datasource import (
    DEFAULT_POLL_TIMEOUT,
    FORMAT_NAME,
    LAND_COMPRESSION_OPTION,
    LAND_FOLDER_OPTION,
    LOST_OFFSETS_OPTION,
    SUMMARY_OPTION,
    KafkaBoundedDataSource,
    SplitLosses,
    kafka_options,
    read_options,
)
from airflow_provider_kafka_spark.spark.read.java_client import java_client_settings
from airflow_provider_kafka_spark.spark.read.landing import REPORT_SCHEMA, ParquetFolder
from airflow_provider_kafka_spark.spark.read.splits import (
    check_max_records_per_split,
    default_max_records_per_split,
    plan_splits,
)
from airflow_provider_kafka_spark.spark.read.summary import (
    ReadSummary,
    SplitKey,
    SplitSummaries,
)
from airflow_provider_kafka_spark.spark.schema import kafka_schema
from airflow_provider_kafka_spark.spark.session import spark_kafka_package

log = logging.getLogger(__name__)

SPARK_KAFKA_FORMAT = "kafka"  # Spark's built-in Kafka source
# Settings Spark's kafka source owns or rejects; never forwarded to it.
_SPARK_KAFKA_OWNED = frozenset({
    "group.id", "auto.offset.reset", "enable.auto.commit", "isolation.level",
    "key.deserializer", "value.deserializer", "interceptor.classes",
})


class LostOffsets:
    """What a :func:`read_kafka` with ``on_data_loss="skip"`` did not return because Kafka had
    already deleted it: a count of offsets per ``(topic, partition)``.

    Pass a new one as ``read_kafka(..., lost=LostOffsets())`` and read it after an action on
    the DataFrame (a ``count()``, the write). Per partition it sums the offsets lost

    * at resolution: the ranges' own ``OffsetRanges.lost`` (``resolve_offsets`` moved the
      start up);
    * before the read: range starts below the log start offset when ``read_kafka`` is called
      (found on the driver, known at once);
    * during the read (``engine="python"`` on a classic session): offsets deleted while the
      executors read them. A Spark accumulator brings these counts to the driver as the tasks
      finish; a split counts once even when Spark runs its task again.

    Offsets, not records: a deleted transaction marker counts too. Not counted, only logged:
    offsets deleted during the read with ``engine="spark-kafka"`` (Spark's kafka source skips
    them without a count). On Spark Connect (no accumulators) ``read_kafka`` refuses
    ``lost=`` with ``on_data_loss="skip"`` and ``engine="python"`` before reading.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[str, int], int] = {}
        self._during_read: Accumulator[dict[SplitKey, int]] | None = None

    def by_partition(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): offsets lost}``, sorted; partitions without loss are absent."""
        counts = dict(self._known)
        if self._during_read is not None:
            for (topic, partition, _start), skipped in self._during_read.value.items():
                counts[(topic, partition)] = counts.get((topic, partition), 0) + skipped
        return dict(sorted(counts.items()))

    def total(self) -> int:
        """All offsets lost, over every partition."""
        return sum(self.by_partition().values())

    def _track(self, known: Mapping[tuple[str, int], int],
               during_read: Accumulator[dict[SplitKey, int]] | None) -> None:
        self._known = {key: n for key, n in known.items() if n > 0}
        self._during_read = during_read


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
            many offsets. Default: ``ceil(total / default parallelism)``, at least 50,000, so
            one big partition still keeps every core busy.
        engine: ``"python"`` (a Python data source; needs no JVM jar) or ``"spark-kafka"``
            (Spark's own ``kafka`` source with numeric ``startingOffsets``/``endingOffsets``;
            needs the ``spark-sql-kafka-0-10`` package on the classpath; the connection's
            librdkafka security settings are translated for its Java client, see
            :mod:`~airflow_provider_kafka_spark.spark.read.java_client`).
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

    Empty ranges give an empty DataFrame with the schema, without contacting Kafka.
    Offsets already deleted when ``read_kafka`` is called are detected here on the driver;
    deletions during the Spark job are found on the executor, which fails the job (``"fail"``)
    or skips them (``"skip"``; pass ``lost=`` to count them). Wrap the action in
    :func:`kafka_errors` to get :class:`DataLossError` / :class:`KafkaReadError` back.

    Every argument is checked here, on the driver, before Spark or Kafka is asked anything.

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
    client_options = kafka_options(config)  # checks that the config can travel to executors
    if offset_ranges.is_empty():
        if lost is not None:
            lost._track(offset_ranges.lost, None)
        if summary is not None:
            summary._track((), None)
        return spark.createDataFrame([], REPORT_SCHEMA if landing else
                                     kafka_schema(include_headers))
    if offset_ranges.isolation_level != level:
        log.warning("The ranges were resolved with %s but are read with %s; a read_committed "
                    "read of read_uncommitted ranges can wait on open transactions.",
                    offset_ranges.isolation_level, level)
    offset_ranges = _drop_deleted(config, offset_ranges, on_data_loss, seconds)
    if max_records_per_split is None:
        max_records_per_split = default_max_records_per_split(
            offset_ranges.total(), _parallelism(spark))
    during_read = None
    # Executors can only count for the python engine, through a classic session's context.
    if lost is not None and on_data_loss == "skip" and engine == "python" and context is not None:
        during_read = context.accumulator({}, SplitLosses())
    if lost is not None:
        lost._track(offset_ranges.lost, during_read)
    if engine == "spark-kafka":
        return _read_spark_kafka(spark, offset_ranges, config, level, max_records_per_split,
                                 include_headers, on_data_loss)
    options = {
        "ranges": offset_ranges.to_json(),
        "isolationLevel": level,
        "maxRecordsPerSplit": str(max_records_per_split),
        "includeHeaders": str(include_headers).lower(),
        "onDataLoss": on_data_loss,
        "pollTimeout": str(poll_seconds),
        **client_options,
    }
    if during_read is not None:
        options[LOST_OFFSETS_OPTION] = str(during_read.aid)
    if landing is not None:
        options[LAND_FOLDER_OPTION] = landing.path
        options[LAND_COMPRESSION_OPTION] = landing.compression
    elif summary is not None and context is not None:
        summaries = context.accumulator({}, SplitSummaries())
        summary._track(plan_splits(offset_ranges, max_records_per_split), summaries)
        options[SUMMARY_OPTION] = str(summaries.aid)
    read_options(options)  # the data source's own checks, before Spark sees the options
    _register(spark)
    return spark.read.format(FORMAT_NAME).options(**options).load()


_REGISTERING = threading.Lock()


def _register(spark: Any) -> None:
    """Register the data source with the session; reads started at once from several threads
    of one session (concurrent ingests) register it once, not racing each other."""
    with _REGISTERING:
        try:
            spark.dataSource.register(KafkaBoundedDataSource)
        except Exception as exc:
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
                raise


def _check_session(spark: object) -> None:
    """A classic or Spark Connect session (they share no base class)."""
    if not (hasattr(spark, "read") and callable(getattr(spark, "createDataFrame", None))):
        raise ConfigurationError(f"spark={shown(spark)} is not a SparkSession; pass a "
                                 "SparkSession, e.g. spark_session() or the active one.")


def _drop_deleted(config: KafkaConfig, ranges: OffsetRanges,
                  on_data_loss: str, timeout: float) -> OffsetRanges:
    """Check range starts against log start offsets: one metadata request, answered within
    ``min(timeout, CONNECT_TIMEOUT_S)`` seconds, then one batched offsets request, all within
    ``timeout`` seconds.

    With ``on_data_loss="skip"``: the ranges with deleted starts moved up to the log start
    offset and the skipped offsets added to ``lost``.
    """
    todo = [r for r in ranges if r.size > 0]
    deadline = time.monotonic() + timeout
    admin = admin_client(config)
    what = "reading the log start offsets of the ranges"
    otherwise = ("Check that the topics still exist and that this client may describe them "
                 "(ACLs), or resolve the offsets again.")
    # No broker answering, or a refused authentication, fails here.
    reach_cluster(admin, config.cluster, timeout, what)
    try:
        left = max(deadline - time.monotonic(), 0.001)
        futures = admin.list_offsets(
            {TopicPartition(r.topic, r.partition): KafkaOffsetSpec.earliest() for r in todo},
            request_timeout=left)
        earliest = {(tp.topic, tp.partition): f.result(timeout=left + RESULT_MARGIN).offset
                    for tp, f in futures.items()}
    except KafkaException as exc:
        raise cluster_failure(exc.args[0], what, config.cluster, otherwise,
                              OffsetResolutionError) from None
    except TimeoutError:  # concurrent.futures.TimeoutError is TimeoutError
        raise cluster_failure(None, what, config.cluster, otherwise,
                              OffsetResolutionError) from None
    lost: dict[tuple[str, int], int] = {}
    kept: list[PartitionRange] = []
    for r in ranges:
        low = earliest.get((r.topic, r.partition), r.start)
        gone = min(low, r.stop) - r.start
        if gone > 0:
            lost[(r.topic, r.partition)] = gone
            kept.append(PartitionRange(r.topic, r.partition, r.start + gone, r.stop))
        else:
            kept.append(r)
    if not lost:
        return ranges
    detail = ", ".join(f"{t}/{p}: {n} offset(s)" for (t, p), n in sorted(lost.items()))
    if on_data_loss == "fail":
        raise DataLossError(
            f"data in the ranges was deleted after they were resolved ({detail}): the start is "
            "below the log start offset (retention or delete_records). Pass "
            "on_data_loss='skip' to read what is left, or resolve the offsets again.", lost)
    log.warning("Skipping deleted offsets (on_data_loss='skip'): %s", detail)
    merged = dict(ranges.lost)
    for key, n in lost.items():
        merged[key] = merged.get(key, 0) + n
    return dataclasses.replace(ranges, ranges=tuple(kept), lost=merged)


def _parallelism(spark: SparkSession) -> int:
    try:
        return max(int(spark.sparkContext.defaultParallelism), 1)
    except Exception:  # Spark Connect has no SparkContext: fall back to the configured value.
        return max(int(spark.conf.get("spark.default.parallelism", "2") or 2), 1)


def _read_spark_kafka(spark: SparkSession, ranges: OffsetRanges, config: KafkaConfig,
                      isolation_level: str, max_records_per_split: int,
                      include_headers: bool, on_data_loss: str) -> DataFrame:
    """Spark's ``kafka`` source over the same ranges, with numeric offsets only."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        if r.size == 0:
            continue
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.stop
    client = java_client_settings(
        {k: v for k, v in config.items() if k not in _SPARK_KAFKA_OWNED})
    reader = (
        spark.read.format(SPARK_KAFKA_FORMAT)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("kafka.isolation.level", isolation_level)
        .option("includeHeaders", str(include_headers).lower())
        .option("failOnDataLoss", str(on_data_loss == "fail").lower())
        .option("maxRecordsPerPartition", str(max_records_per_split))
        .options(**kafka_options(client))
    )
    try:
        return reader.load()
    except Exception as exc:
        # Spark answers "kafka" with a dedicated AnalysisException, other names with
        # DATA_SOURCE_NOT_FOUND (through Py4J); anything else is not ours to translate.
        text = str(exc)
        if "DATA_SOURCE_NOT_FOUND" not in text and "Failed to find data source" not in text:
            raise
        raise SparkKafkaSourceMissingError(
            "engine='spark-kafka' needs Spark's kafka source, which is not on this session's "
            f"classpath. Start the session with spark.jars.packages={spark_kafka_package()} "
            "(spark_session(spark_kafka=True) does that), or add the jar with spark.jars; or use "
            "engine='python', which needs no jar."
        ) from None
