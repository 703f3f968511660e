"""The checks of :func:`~airflow_provider_kafka_spark.spark.ingest.ingest`: its arguments,
before anything runs (:func:`check_ingest_arguments`), and its sink's answer to
``sink.intake`` (:func:`checked_intake`)."""

from __future__ import annotations

from typing import Any

from airflow_provider_kafka_spark.arguments import check_stages
from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.options import (
    ReadOptions,
    bad_argument,
    check_mapping,
    check_progress_every,
    shown,
)
from airflow_provider_kafka_spark.spark.intake import (
    Intake,
    LandedParquet,
    RowsWithSplitEnds,
    SinkInput,
    SparkRows,
)
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder


def check_ingest_arguments(owner: str, spark: Any, ranges: Any, sink: Any, *, engine: Any,
                           max_records_per_split: Any, include_headers: Any,
                           on_data_loss: Any, decode: Any, transform: Any, sql: Any,
                           manifest: Any, progress_every: Any, shape: Any = None
                           ) -> OffsetRanges:
    """The parsed ranges, once every argument is checked (no Spark action, no cluster call).

    Raises:
        ConfigurationError: the first bad argument, named with its value and a remedy.
    """
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
    check_stages(owner, sink, decode, transform, sql, shape=shape)
    check_mapping(owner, "manifest", manifest, meaning="JSON-ready manifest fields")
    check_progress_every(owner, progress_every)
    return offset_ranges


def checked_intake(owner: str, sink: Any, intake: Any, given: SinkInput) -> Intake:
    """``intake``, the sink's answer to ``given``, once it is one ``ingest`` can follow.

    Raises:
        ConfigurationError: not an :class:`Intake`, or files or split ends that the readers
            cannot give for this input (see :attr:`SinkInput.native_rows` and
            :attr:`SinkInput.native_as_read`); nothing was read.
    """
    if not isinstance(intake, Intake) or not isinstance(
            intake.takes, SparkRows | RowsWithSplitEnds | LandedParquet):
        raise ConfigurationError(
            f"{owner}: {shown(sink)}.intake() returned {shown(intake)}; return an Intake "
            "(airflow_provider_kafka_spark.spark.intake), e.g. Intake() for Spark rows "
            "through write(). Nothing was read.")
    if isinstance(intake.takes, SparkRows):
        return intake
    kind = type(intake.takes).__name__
    if not (given.native_rows if isinstance(intake.takes, LandedParquet)
            else given.native_as_read):
        raise ConfigurationError(
            f"{owner}: {shown(sink)}.intake() answered {kind} for records "
            f"{given.records!r} read with engine={given.engine!r}; the readers land files "
            "only for records as read or decoded by the readers (SinkInput.native_rows), and "
            "mark split ends only for records as read (SinkInput.native_as_read), with "
            "engine='python'. Answer SparkRows() for this input. Nothing was read.")
    if isinstance(intake.takes, RowsWithSplitEnds) and given.shape is not None:
        raise ConfigurationError(
            f"{owner}: {shown(sink)}.intake() answered RowsWithSplitEnds for records shaped by "
            f"{shown(given.shape)}; the shape drops the readers' end rows. Answer SparkRows() "
            "for this input. Nothing was read.")
    if isinstance(intake.takes, LandedParquet) and not (
            isinstance(intake.takes.folder, ParquetFolder) and callable(intake.takes.adopt)):
        raise ConfigurationError(
            f"{owner}: {shown(sink)}.intake() answered {shown(intake.takes)}; LandedParquet "
            "takes a ParquetFolder and the function that adopts the files. Nothing was read.")
    return intake
