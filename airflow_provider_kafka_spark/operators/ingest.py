"""Read a run's offset ranges with Spark, transform them, write the sink, return statistics."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.hooks.spark import SparkHook
from airflow_provider_kafka_spark.offsets import OffsetRanges, OffsetSpecError
from airflow_provider_kafka_spark.operators.base import KafkaSparkBaseOperator, format_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_kafka_spark.spark import LostOffsets, PartitionSummary

MANIFEST_NAME = "_kafka_spark_manifest.json"
"""The manifest file in each output folder; Spark's readers skip names starting with ``_``."""
SQL_VIEW = "kafka"
"""The temporary view ``sql=`` queries: the records read, in the Kafka source's schema."""


class KafkaSparkIngestOperator(KafkaSparkBaseOperator):
    """Read ``ranges`` with Spark (``read_kafka``), transform, and write this run's output:
    files at ``output_path`` or records to the Kafka topic ``output_topic`` (exactly one).

    The ranges come from the resolve task's XCom, so a retry reads exactly the same records.

    **Files.** The output is idempotent per run: ``output_path`` (templated, e.g.
    ``s3a://lake/events/{{ data_interval_start | ds }}/{{ data_interval_start.hour }}``) is
    overwritten as a whole, never appended to, so a retry or a cleared run replaces that run's
    output. After the data, a manifest file ``_kafka_spark_manifest.json`` holding the ranges
    and the statistics is written into the folder: a folder without it is incomplete.

    **Kafka topic.** ``write_kafka`` writes the records; with the default
    ``delivery_guarantee="exactly_once"`` every Spark partition is one Kafka transaction
    recorded in a ledger under ``write_id``. The default ``write_id`` is stable for the run and
    its ranges (``<dag_id>/<task_id>/<run_id>/<digest of the ranges>``): a retry of this task,
    or a clear of the run (whose resolve task returns the run's pinned ranges), skips what an
    earlier attempt committed, so ``read_committed`` readers see every record once; ranges
    resolved anew on purpose (``re_resolve``) are a new write. Without ``transform``
    / ``sql`` the records keep their ``key``, ``value``, ``headers`` and ``timestamp``; the
    partitioner chooses the output partition.

    Empty ranges skip Spark entirely (nothing is written) and return zero statistics.

    Returns (XCom) ``{"records", "lost", "partitions": [...], "min_timestamp",
    "max_timestamp", "output": {...}, "seconds", "records_per_second"}``; each partition entry
    has ``topic, partition, start, stop, records, lost, first_offset, last_offset,
    min_timestamp, max_timestamp``; ``output`` is ``{"path", "format", "manifest"}`` for files
    and ``{"topic", "delivery_guarantee", "write_id", "records_written", "skipped_tasks"}`` for
    a topic. ``start``/``stop`` are the resolved range; ``lost`` counts the offsets skipped
    because Kafka had deleted them (``on_data_loss="skip"``, see ``LostOffsets``): at
    resolution, before the read and during it (not counted during the read with
    ``engine="spark-kafka"``); the top-level ``lost`` is their sum. The manifest holds the
    same statistics, and the task log shows them in its table and warns naming the partitions.

    :param ranges: the resolve task's XCom (``resolve.output``) or its JSON; templated. Read
        with the isolation level the ranges were resolved with.
    :param output_path: the folder of this run's output; templated.
    :param output_format: a Spark file format (``parquet``, ``json``, ``csv``, ``orc``,
        ``avro`` with its package...). Default ``parquet``.
    :param output_options: Spark writer options (e.g. ``{"compression": "zstd"}``).
    :param partition_by: columns to partition the output folder by.
    :param output_topic: the Kafka topic to write to; templated.
    :param output_kafka_conn_id: the connection of the output cluster (default: the input's
        ``kafka_conn_id``).
    :param delivery_guarantee: ``exactly_once`` (default), ``at_least_once`` or ``none``.
    :param transactional_id_prefix: for ``exactly_once``; default ``<dag_id>.<task_id>``.
    :param write_id: for ``exactly_once``; templated; default as described above.
    :param transform: ``callable(DataFrame) -> DataFrame`` applied to the records read.
    :param sql: a Spark SQL query over the view ``kafka`` (the records read); templated.
        At most one of ``transform`` and ``sql``.
    :param spark_conn_id: a ``spark``/``spark_connect`` connection, or ``None`` for a local
        session (see :class:`SparkHook`).
    :param spark_conf: extra Spark conf for the session.
    :param max_records_per_split: Spark partitions of at most this many offsets
        (default: ``read_kafka``'s).
    :param engine: ``python`` (default) or ``spark-kafka``, see ``read_kafka``.
    :param include_headers: read the ``headers`` column (default True).
    :param on_data_loss: ``fail`` (default) or ``skip`` offsets deleted since resolution;
        skipped offsets are counted in ``lost``.
    """

    template_fields: Sequence[str] = ("ranges", "output_path", "output_format", "output_topic",
                                      "write_id", "sql")
    template_fields_renderers = {"sql": "sql"}
    ui_color = "#fcecd7"

    def __init__(
        self,
        *,
        ranges: Any,
        output_path: str | None = None,
        output_format: str = "parquet",
        output_options: dict[str, str] | None = None,
        partition_by: Sequence[str] | None = None,
        output_topic: str | None = None,
        output_kafka_conn_id: str | None = None,
        delivery_guarantee: str = "exactly_once",
        transactional_id_prefix: str | None = None,
        write_id: str | None = None,
        transform: Callable[[DataFrame], DataFrame] | None = None,
        sql: str | None = None,
        spark_conn_id: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        max_records_per_split: int | None = None,
        engine: str = "python",
        include_headers: bool = True,
        on_data_loss: str = "fail",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (output_path is None) == (output_topic is None):
            raise OffsetSpecError(
                f"{self.task_id}: pass exactly one sink: output_path= (files) or output_topic= "
                "(Kafka)."
            )
        if transform is not None and sql is not None:
            raise OffsetSpecError(f"{self.task_id}: pass transform= or sql=, not both.")
        if transform is not None and not callable(transform):
            raise OffsetSpecError(f"{self.task_id}: transform must be a callable, got "
                                  f"{type(transform).__name__}.")
        if not isinstance(output_format, str) or not output_format:
            raise OffsetSpecError(f"{self.task_id}: output_format must be a non-empty string.")
        self.ranges = ranges
        self.output_path = output_path
        self.output_format = output_format
        self.output_options = dict(output_options or {})
        self.partition_by = list(partition_by or [])
        self.output_topic = output_topic
        self.output_kafka_conn_id = output_kafka_conn_id
        self.delivery_guarantee = delivery_guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.write_id = write_id
        self.transform = transform
        self.sql = sql
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.max_records_per_split = max_records_per_split
        self.engine = engine
        self.include_headers = include_headers
        self.on_data_loss = on_data_loss

    @cached_property
    def spark_hook(self) -> SparkHook:
        """The hook giving the SparkSession; built on first use."""
        return SparkHook(self.spark_conn_id, spark_conf=self.spark_conf,
                         app_name=f"airflow-{self.dag_id}-{self.task_id}")

    def execute(self, context: Any) -> dict[str, Any]:
        offset_ranges = OffsetRanges.from_json(self.ranges)
        output = self._planned_output(context, offset_ranges)
        if offset_ranges.is_empty():
            self.log.info("The ranges hold no offsets: nothing to read, nothing written.")
            stats = _stats(offset_ranges, [], output, lost=offset_ranges.lost, seconds=0.0)
            self._warn_lost(stats)
            return stats
        from airflow_provider_kafka_spark.spark import LostOffsets, kafka_errors, summarize

        began = time.monotonic()
        spark = self.spark_hook.get_conn()
        write_manifest = _text_writer(spark, output["manifest"]) if "path" in output else None
        lost = LostOffsets()
        records = self._read(spark, offset_ranges, lost)
        try:
            with kafka_errors():
                summaries = summarize(records)
            output = self._write(self._transformed(spark, records), output)
        finally:
            records.unpersist()
        stats = _stats(offset_ranges, summaries, output, lost=lost.by_partition(),
                       seconds=time.monotonic() - began)
        if write_manifest is not None:
            write_manifest(json.dumps({
                "version": 1,
                "dag_id": self.dag_id,
                "task_id": self.task_id,
                "run_id": context["run_id"],
                "written_at": datetime.now(UTC).isoformat(),
                "ranges": offset_ranges.to_dict(),
                **stats,
            }, indent=2, sort_keys=True))
        self.log.info("Wrote %d record(s) to %s in %.1fs, %.0f records/s:\n%s",
                      stats["records"], output.get("path") or output.get("topic"),
                      stats["seconds"], stats["records_per_second"],
                      _summary_table(stats["partitions"]))
        self._warn_lost(stats)
        return stats

    def _warn_lost(self, stats: dict[str, Any]) -> None:
        """One warning naming the partitions with skipped (deleted) offsets, if any."""
        if not stats["lost"]:
            return
        detail = ", ".join(f"{p['topic']}/{p['partition']}: {p['lost']}"
                           for p in stats["partitions"] if p["lost"])
        self.log.warning("%d offset(s) deleted before they could be read were skipped "
                         "(on_data_loss='skip'): %s. The output lacks them.",
                         stats["lost"], detail)

    def _planned_output(self, context: Any, ranges: OffsetRanges) -> dict[str, Any]:
        """The checked sink description, before anything is read or written."""
        if self.output_topic is None:
            path = self._checked_path()
            return {"path": path, "format": self.output_format,
                    "manifest": f"{path.rstrip('/')}/{MANIFEST_NAME}"}
        if not isinstance(self.output_topic, str) or not self.output_topic.strip():
            raise OffsetSpecError(
                f"{self.task_id}: output_topic rendered to {self.output_topic!r}; it must name "
                "a topic."
            )
        return {
            "topic": self.output_topic.strip(),
            "delivery_guarantee": self.delivery_guarantee,
            "write_id": self.write_id or default_write_id(self.dag_id, self.task_id,
                                                          context["run_id"], ranges),
            "records_written": 0,
            "skipped_tasks": [],
        }

    def _checked_path(self) -> str:
        if not isinstance(self.output_path, str) or not self.output_path.strip():
            raise OffsetSpecError(
                f"{self.task_id}: output_path rendered to {self.output_path!r}; it must name the "
                "folder of this run's output."
            )
        return self.output_path.strip()

    def _read(self, spark: SparkSession, ranges: OffsetRanges, lost: LostOffsets) -> DataFrame:
        """The records, cached so the summary and the write read Kafka once; ``lost`` counts
        the offsets skipped because they were deleted."""
        from pyspark import StorageLevel

        from airflow_provider_kafka_spark.spark import read_kafka

        return read_kafka(
            spark, ranges, self.kafka_hook.get_kafka_config(),
            isolation_level=ranges.isolation_level,
            max_records_per_split=self.max_records_per_split,
            engine=self.engine,  # type: ignore[arg-type]
            include_headers=self.include_headers,
            on_data_loss=self.on_data_loss,  # type: ignore[arg-type]
            lost=lost,
        ).persist(StorageLevel.MEMORY_AND_DISK)

    def _transformed(self, spark: SparkSession, records: DataFrame) -> DataFrame:
        if self.transform is not None:
            return self.transform(records)
        if self.sql:
            records.createOrReplaceTempView(SQL_VIEW)
            return spark.sql(self.sql)
        return records

    def _write(self, df: DataFrame, output: dict[str, Any]) -> dict[str, Any]:
        """Write ``df`` to the planned sink; return the output description with results."""
        from airflow_provider_kafka_spark.spark import kafka_errors

        if "path" in output:
            writer = df.write.mode("overwrite").format(self.output_format)
            if self.partition_by:
                writer = writer.partitionBy(*self.partition_by)
            with kafka_errors():
                writer.options(**self.output_options).save(output["path"])
            return output
        from airflow_provider_kafka_spark.spark.write import write_kafka

        if self.transform is None and not self.sql:
            df = df.select(*[c for c in ("key", "value", "headers", "timestamp")
                             if c in df.columns])
        output_hook = (KafkaHook(self.output_kafka_conn_id) if self.output_kafka_conn_id
                       else self.kafka_hook)
        with kafka_errors():
            result = write_kafka(
                df, output_hook.get_kafka_config(),
                topic=output["topic"],
                delivery_guarantee=self.delivery_guarantee,
                transactional_id_prefix=(self.transactional_id_prefix
                                         or f"{self.dag_id}.{self.task_id}"),
                write_id=output["write_id"],
            )
        return {**output, "records_written": result.records_written,
                "skipped_tasks": list(result.skipped_tasks)}


def default_write_id(dag_id: str, task_id: str, run_id: str, ranges: OffsetRanges) -> str:
    """``<dag_id>/<task_id>/<run_id>/<digest>``: the same for a retry of the task (same XCom
    ranges), different when the ranges were resolved again to other offsets."""
    bounds = json.dumps([[r.topic, r.partition, r.start, r.stop] for r in ranges])
    return f"{dag_id}/{task_id}/{run_id}/{hashlib.sha256(bounds.encode()).hexdigest()[:16]}"


def _stats(ranges: OffsetRanges, summaries: list[PartitionSummary], output: dict[str, Any],
           *, lost: Mapping[tuple[str, int], int], seconds: float) -> dict[str, Any]:
    by_key = {(s.topic, s.partition): s.to_dict() for s in summaries}
    partitions = []
    for r in ranges:
        entry: dict[str, Any] = {
            "topic": r.topic, "partition": r.partition, "start": r.start, "stop": r.stop,
            "records": 0, "lost": lost.get((r.topic, r.partition), 0),
            "first_offset": None, "last_offset": None,
            "min_timestamp": None, "max_timestamp": None,
        }
        entry.update(by_key.get((r.topic, r.partition), {}))
        partitions.append(entry)
    records = sum(p["records"] for p in partitions)
    timestamps = [p[k] for p in partitions for k in ("min_timestamp", "max_timestamp") if p[k]]
    return {
        "records": records,
        "lost": sum(lost.values()),
        "partitions": partitions,
        "min_timestamp": min(timestamps, default=None),
        "max_timestamp": max(timestamps, default=None),
        "output": output,
        "seconds": round(seconds, 3),
        "records_per_second": round(records / seconds, 1) if seconds > 0 else 0.0,
    }


def _summary_table(partitions: list[dict[str, Any]]) -> str:
    columns = ("topic", "partition", "start", "stop", "records", "lost", "min_timestamp",
               "max_timestamp")
    return format_table(columns, [[p[c] for c in columns] for p in partitions])


def _text_writer(spark: SparkSession, path: str) -> Callable[[str], None]:
    """A function writing a text file at ``path`` on any Hadoop file system the session
    reaches (local, HDFS, S3A...). Fails at once, before any output, without a driver JVM."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise OffsetSpecError(
            "the file sink's manifest is written through the Spark driver's JVM; Spark Connect "
            "sessions are not supported for file output yet."
        )
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration())

    def write(text: str) -> None:
        stream = fs.create(hadoop_path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    return write
