"""The ingest task: :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` (read a run's
offset ranges with Spark, decode, transform, write the sink, statistics) with Airflow's
arguments, connections, logging, metrics, lineage and assets."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.arguments import checkable, parse_ranges
from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
from airflow_provider_kafka_spark.hooks.spark import SparkHook
from airflow_provider_kafka_spark.offsets import ConfigurationError, OffsetRanges
from airflow_provider_kafka_spark.operators import metrics
from airflow_provider_kafka_spark.operators.base import KafkaSparkBaseOperator, format_table
from airflow_provider_kafka_spark.operators.lineage import (
    Lineage,
    dataset_of_path,
    kafka_authority,
    output_asset_uri,
)
from airflow_provider_kafka_spark.operators.lineage_facets import OpenLineageMixin
from airflow_provider_kafka_spark.options import (
    DATA_LOSS_CHOICES,
    DECODE_FORMATS,
    DELIVERY_GUARANTEES,
    ENGINES,
    ON_CORRUPT,
    REGISTRY_FORMATS,
    SQL_VIEW,
    bad_argument,
    check_bool,
    check_choice,
    check_column_names,
    check_data_source_name,
    check_mapping,
    check_positive_int,
    check_seconds,
    check_text,
    check_topic_name,
    check_writer_options,
)
from airflow_provider_kafka_spark.sinks import MANIFEST_NAME, FileSink, KafkaSink, Sink, TableSink
from airflow_provider_kafka_spark.sinks.tables import TABLE_FORMATS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_kafka_spark.spark.ingest import Decoding

__all__ = ["MANIFEST_NAME", "SQL_VIEW", "KafkaSparkIngestOperator", "default_write_id"]

FILE_ONLY = ("output_options", "partition_by")
KAFKA_ONLY = ("output_kafka_conn_id", "transactional_id_prefix", "write_id")
TABLE_ONLY = ("table_format", "table_application", "table_schema_evolution")
SINK_ONLY = {"files": FILE_ONLY + ("output_format",),
             "kafka": KAFKA_ONLY + ("delivery_guarantee", "dead_letter_topic"),
             "table": TABLE_ONLY}
SINK_ARGUMENT = {"files": "output_path= (files)", "kafka": "output_topic= (Kafka)",
                 "table": "output_table= (an Iceberg or Delta table)"}


class KafkaSparkIngestOperator(OpenLineageMixin, KafkaSparkBaseOperator):
    """Read ``ranges`` with Spark (``read_kafka``), transform, and write this run's output:
    files at ``output_path``, records to the Kafka topic ``output_topic``, or rows into the
    Iceberg or Delta table ``output_table`` (exactly one).

    The ranges come from the resolve task's XCom, so a retry reads exactly the same records.
    The pipeline is :func:`~airflow_provider_kafka_spark.spark.ingest.ingest`, which a plain
    PySpark job can call too: it checks the transformation and prepares the
    :class:`~airflow_provider_kafka_spark.sinks.Sink` before the read, then reads, decodes,
    writes and commits (or aborts the sink after any failure). The operator checks the
    arguments, builds the sink and the decoding from them and its connections, calls it, and
    logs, counts and announces the result.

    **Bad arguments fail before anything is read.** Literal arguments are checked when the
    DAG file is parsed (a bad one is an import error of the DAG); templated ones
    (``ranges``, ``output_path``, ``output_format``, ``output_topic``, ``write_id``, ``sql``)
    once rendered, at the start of ``execute``. Then, on the Spark driver and before the read:
    ``transform`` is called once on an empty DataFrame with the records' columns (it must
    return a DataFrame; keep it free of side effects), ``sql`` is parsed and analysed over an
    empty view ``kafka``, and the sink is prepared (see below). Each failure is a
    ``ConfigurationError`` naming the task, the argument, the value and what to pass. Empty
    ranges skip Spark, so these Spark-side checks too.

    **Files.** The output is idempotent per run: ``output_path`` (templated, e.g.
    ``s3a://lake/events/{{ data_interval_start | ds }}/{{ data_interval_start.hour }}``) is
    replaced as a whole, never appended to, so a retry or a cleared run replaces that run's
    output. The new output is written to a hidden staging folder next to it
    (``.<name>._kafka_spark_staging-<token>``) with the manifest
    ``_kafka_spark_manifest.json`` (the ranges and the statistics), and swapped in by two
    renames only once complete: the previous output stays readable and unchanged until then,
    and a failed run leaves it as it was. Before the read, the format is looked up among the
    session's data sources and an empty DataFrame with the output's columns is written to the
    staging folder (format vs. columns, ``output_options``, ``partition_by``, permissions).
    Which renames are atomic on which file system: ``airflow_provider_kafka_spark.sinks.files``
    and ``docs/airflow.md``.

    **Kafka topic.** ``write_kafka`` writes the records; with the default
    ``delivery_guarantee="exactly_once"`` every Spark partition is one Kafka transaction
    recorded in a ledger under ``write_id``. The default ``write_id`` is stable for the run and
    its ranges (``<dag_id>/<task_id>/<run_id>/<digest of the ranges>``): a retry of this task,
    or a clear of the run (whose resolve task returns the run's pinned ranges), skips what an
    earlier attempt committed, so ``read_committed`` readers see every record once; ranges
    resolved anew on purpose (``re_resolve``) are a new write. Without ``transform``
    / ``sql`` the records keep their ``key``, ``value``, ``headers`` and ``timestamp``; the
    partitioner chooses the output partition. Before the read, the output's column names are
    checked against what ``write_kafka`` takes.

    **Table.** ``output_table`` (``table_format="iceberg"``: ``catalog.namespace.table`` of
    an Iceberg catalog; ``"delta"``: a path or a table name) gets each run in **one** table
    commit that records the application (``table_application``, default
    ``<dag_id>.<task_id>``), the run (its run id, and map index) and its ranges in the table's
    own metadata, and every row carries the commit's write id in the column
    ``_kafka_spark_write``. A try that finds its run's write in the table writes nothing and
    says so; a cleared run (the dag run's clear number grew, e.g. ``airflow backfill create
    --reprocess-behavior completed``) or ranges resolved anew replace the run's rows in one
    commit. The ``table`` start spec of the resolve task starts where the application's
    commits stopped. Before the read: the format's runtime, the catalog, the table and the
    output's columns are checked (a column the table lacks needs
    ``table_schema_evolution=True``). See ``docs/tables.md``.

    Empty ranges skip Spark entirely (nothing is written) and return zero statistics.

    Returns (XCom) ``{"records", "bytes", "lost", "lag", "partitions": [...],
    "min_timestamp", "max_timestamp", "output": {...}, "seconds", "records_per_second",
    "bytes_per_second"}``; each partition entry has ``topic, partition, start, stop, records,
    bytes, lost, lag, first_offset, last_offset, min_timestamp, max_timestamp`` (``bytes``:
    keys and values; ``lag``: the partition's end at resolution minus ``stop``, None for
    ranges resolved before lag was recorded); ``output`` is ``{"path", "format",
    "manifest"}`` for files, ``{"topic", "delivery_guarantee", "write_id",
    "records_written", "skipped_tasks"}`` for a topic and ``{"table", "format", "location",
    "application", "run", "write_id", "committed", "skipped", "commit", "records_written",
    "replaced"}`` for a table. ``start``/``stop`` are the resolved
    range; ``lost`` counts the offsets skipped because Kafka had deleted them
    (``on_data_loss="skip"``, see ``LostOffsets``): at resolution, before the read and during
    it (not counted during the read with ``engine="spark-kafka"``); the top-level ``lost`` is
    their sum. The manifest holds the
    same statistics, and the task log ends with them as a table and a line of totals with the
    throughput (and warns naming the partitions with lost offsets). The counters of
    :mod:`~airflow_provider_kafka_spark.operators.metrics` go to Airflow's ``Stats``.

    :param ranges: the resolve task's XCom (``resolve.output``) or its JSON; templated. Read
        with the isolation level the ranges were resolved with.
    :param output_path: the folder of this run's output; templated.
    :param output_format: a Spark data source name (``parquet``, ``json``, ``csv``, ``orc``,
        ``avro`` with its package...); templated. Default ``parquet``. Files only.
    :param output_options: Spark writer options (e.g. ``{"compression": "zstd"}``). Files only.
    :param partition_by: a list of columns to partition the output folder by. Files only.
    :param output_topic: the Kafka topic to write to; templated.
    :param output_kafka_conn_id: the connection of the output cluster (default: the input's
        ``kafka_conn_id``). Kafka only.
    :param delivery_guarantee: ``exactly_once`` (default), ``at_least_once`` or ``none``.
        Kafka only.
    :param transactional_id_prefix: for ``exactly_once``; default ``<dag_id>.<task_id>``.
    :param write_id: for ``exactly_once``; templated; default as described above.
    :param transform: ``callable(DataFrame) -> DataFrame`` applied to the records read.
    :param sql: a Spark SQL query over the view ``kafka`` (the records read); templated.
        One query (``SELECT``, ``WITH ... SELECT``, ``VALUES``, ``TABLE``), not a command.
        At most one of ``transform`` and ``sql``.
    :param spark_conn_id: a ``spark``/``spark_connect`` connection, or ``None`` for a local
        session (see :class:`SparkHook`). On Spark Connect (a ``spark_connect`` connection)
        everything works the same, except that ``output_path`` must be a local path of the
        cluster's machines (``file:`` or absolute) and ``on_data_loss="skip"`` is refused;
        both are ConfigurationErrors before the read (``docs/spark-connect.md``).
    :param spark_conf: extra Spark conf for the session.
    :param max_records_per_split: Spark partitions of at most this many offsets, a positive
        int (default: ``read_kafka``'s).
    :param engine: ``python`` (default) or ``spark-kafka``, see ``read_kafka``.
    :param include_headers: read the ``headers`` column (default True).
    :param on_data_loss: ``fail`` (default) or ``skip`` offsets deleted since resolution;
        skipped offsets are counted in ``lost``.
    :param key_format: how ``key`` is decoded before ``transform``/``sql``: ``bytes``
        (default: not decoded), ``string``, ``json``, or a Schema Registry format ``avro``,
        ``protobuf``, ``json_schema`` (see ``decode_kafka``).
    :param value_format: likewise for ``value``.
    :param key_schema: ``json``: a DDL string; registry formats: the reader schema, a
        ``Subject(name, version)`` or the schema inline; default ``Subject('<topic>-key')``
        when the ranges have one topic.
    :param value_schema: likewise for ``value`` (default ``Subject('<topic>-value')``).
    :param schema_registry_conn_id: the registry's connection (see
        :class:`~airflow_provider_kafka_spark.hooks.schema_registry.SchemaRegistryHook`);
        required by the registry formats. A registry that cannot be reached fails the task
        (``SchemaRegistryError``) before anything is written; a retry decodes again.
    :param on_corrupt: records that cannot be decoded: ``fail`` (default: the task fails
        before anything is written, naming the first one's topic/partition/offset and the
        reason), ``skip`` (dropped, counted) or ``dead_letter`` (written, as read, with the
        reason, topic, partition, offset and timestamp, to the dead-letter output: the folder
        ``<output_path>/_dead_letter`` (Parquet) published with the output and covered by its
        manifest, or ``dead_letter_topic`` for a Kafka sink, written by the same
        ``write_kafka`` call). The counts are in the XCom and the manifest (``decode``:
        ``decoded``, ``skipped``, ``dead_lettered``) and the task log.
    :param dead_letter_topic: the dead-letter topic of a Kafka sink with
        ``on_corrupt="dead_letter"`` (on the output cluster).
    :param output_table: the Iceberg or Delta table to write; templated.
    :param table_format: ``iceberg`` or ``delta``; required with ``output_table``.
    :param table_application: the application name the table's commits record (and the
        resolve task's ``table`` start spec looks for); default ``<dag_id>.<task_id>``.
    :param table_schema_evolution: add the output's columns the table lacks (default False:
        such a column fails the task before the read).
    :param progress_every: while the write runs, log every this many seconds (a number or a
        ``timedelta``; default 30) how far it is: records read of the slice's size, the rate,
        the time left and the Spark UI's address; None or 0: never. A write shorter than that
        logs nothing extra (README, "Observability").
    """

    template_fields: Sequence[str] = ("ranges", "output_path", "output_format", "output_topic",
                                      "output_table", "write_id", "sql")
    template_fields_renderers = {"sql": "sql"}
    ui_color = "#fcecd7"

    def __init__(
        self,
        *,
        ranges: Any,
        output_path: str | None = None,
        output_format: str = "parquet",
        output_options: dict[str, Any] | None = None,
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
        key_format: str = "bytes",
        value_format: str = "bytes",
        key_schema: Any = None,
        value_schema: Any = None,
        schema_registry_conn_id: str | None = None,
        on_corrupt: str = "fail",
        dead_letter_topic: str | None = None,
        output_table: str | None = None,
        table_format: str | None = None,
        table_application: str | None = None,
        table_schema_evolution: bool = False,
        progress_every: float | timedelta | None = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        given = [name for name, value in (("output_path", output_path),
                                          ("output_topic", output_topic),
                                          ("output_table", output_table)) if value is not None]
        if len(given) != 1:
            raise ConfigurationError(
                f"{self.task_id}: pass exactly one sink: output_path= (a folder of files), "
                f"output_topic= (a Kafka topic) or output_table= (an Iceberg or Delta table); "
                f"got {_several(given)}."
            )
        if transform is not None and sql is not None:
            raise ConfigurationError(f"{self.task_id}: pass transform= or sql=, not both; fold "
                                     "the SQL into the transform (spark.sql over a view) or the "
                                     "other way round.")
        self.ranges = ranges
        self.output_path = output_path
        self.output_format = output_format
        self.output_options = output_options
        self.partition_by = partition_by
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
        self.key_format = key_format
        self.value_format = value_format
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.schema_registry_conn_id = schema_registry_conn_id
        self.on_corrupt = on_corrupt
        self.dead_letter_topic = dead_letter_topic
        self.output_table = output_table
        self.table_format = table_format
        self.table_application = table_application
        self.table_schema_evolution = table_schema_evolution
        self.progress_every = None if progress_every == 0 and not isinstance(
            progress_every, bool) else check_seconds(
                self.task_id, "progress_every", progress_every, allow_none=True, example=30,
                meaning="how often a long write logs its progress")
        self.check_arguments(rendered=False)
        if self.has_dag():
            from airflow.sdk import AssetAlias

            self.outlets = [*self.outlets, AssetAlias(name=self.output_alias_name)]

    def check_arguments(self, *, rendered: bool) -> None:
        """Check every argument; before rendering (``rendered=False``, from ``__init__``) the
        template fields only when they are literals.

        Raises:
            ConfigurationError: the first bad argument, named with its value and a remedy.
            OffsetSpecError: literal or rendered ``ranges`` that are not offset ranges.
        """
        task = self.task_id
        kind = self.sink_kind
        if checkable(self.ranges, rendered=rendered):
            self.offset_ranges()
        if kind == "files":
            if checkable(self.output_path, rendered=rendered):
                check_text(task, "output_path", self.output_path,
                           meaning="the folder of this run's output, e.g. "
                                   "'s3a://lake/events/2024-05-01T00'")
        elif kind == "kafka":
            if checkable(self.output_topic, rendered=rendered):
                check_topic_name(task, "output_topic", self.output_topic)
        else:
            self._check_table(rendered)
        if checkable(self.output_format, rendered=rendered):
            check_data_source_name(task, "output_format", self.output_format)
        if checkable(self.write_id, rendered=rendered):
            check_text(task, "write_id", self.write_id, allow_none=True,
                       meaning="an id that stays the same when the same write is retried")
        if checkable(self.sql, rendered=rendered):
            check_text(task, "sql", self.sql, allow_none=True,
                       meaning=f"a Spark SQL query over the view '{SQL_VIEW}'")
        if self.transform is not None and not callable(self.transform):
            raise bad_argument(task, "transform", self.transform,
                               "pass a function taking and returning a pyspark DataFrame")
        check_writer_options(task, "output_options", self.output_options)
        check_column_names(task, "partition_by", self.partition_by)
        check_text(task, "output_kafka_conn_id", self.output_kafka_conn_id, allow_none=True,
                   meaning="an Airflow connection id")
        check_choice(task, "delivery_guarantee", self.delivery_guarantee, DELIVERY_GUARANTEES,
                     ignore_case=True)
        check_text(task, "transactional_id_prefix", self.transactional_id_prefix,
                   allow_none=True, meaning="a prefix unique to this application on the cluster")
        check_text(task, "spark_conn_id", self.spark_conn_id, allow_none=True,
                   meaning="an Airflow connection id")
        check_mapping(task, "spark_conf", self.spark_conf, meaning="Spark conf")
        check_positive_int(task, "max_records_per_split", self.max_records_per_split,
                           meaning="the most offsets one Spark partition reads", example=100_000,
                           allow_none=True)
        check_choice(task, "engine", self.engine, ENGINES)
        check_bool(task, "include_headers", self.include_headers)
        check_choice(task, "on_data_loss", self.on_data_loss, DATA_LOSS_CHOICES)
        self._check_decoding(kind)
        self._check_sink_only_arguments(kind)

    @property
    def sink_kind(self) -> str:
        """``files``, ``kafka`` or ``table``: which of the output arguments is given."""
        if self.output_table is not None:
            return "table"
        return "files" if self.output_topic is None else "kafka"

    def _check_table(self, rendered: bool) -> None:
        task = self.task_id
        if checkable(self.output_table, rendered=rendered):
            check_text(task, "output_table", self.output_table,
                       meaning="the table to write, e.g. 'lake.db.orders' (Iceberg) or a Delta "
                               "table's path")
        if self.table_format is None:
            raise bad_argument(task, "table_format", None,
                               "output_table= needs the table's format: pass "
                               "table_format='iceberg' or 'delta'", problem="is missing")
        check_choice(task, "table_format", self.table_format, TABLE_FORMATS)
        check_text(task, "table_application", self.table_application, allow_none=True,
                   meaning="the application name the table's commits record")
        check_bool(task, "table_schema_evolution", self.table_schema_evolution)
        if self.on_corrupt == "dead_letter":
            raise bad_argument(task, "on_corrupt", self.on_corrupt,
                               "a table sink has no dead-letter output; pass 'fail' or 'skip'",
                               problem="does not apply to output_table=")

    def _check_decoding(self, kind: str) -> None:
        task = self.task_id
        check_choice(task, "key_format", self.key_format, DECODE_FORMATS)
        check_choice(task, "value_format", self.value_format, DECODE_FORMATS)
        check_choice(task, "on_corrupt", self.on_corrupt, ON_CORRUPT)
        check_text(task, "schema_registry_conn_id", self.schema_registry_conn_id,
                   allow_none=True, meaning="an Airflow connection id of a Schema Registry")
        registry = [f for f in (self.key_format, self.value_format) if f in REGISTRY_FORMATS]
        if registry and self.schema_registry_conn_id is None:
            raise bad_argument(task, "schema_registry_conn_id", None,
                               f"the format {registry[0]!r} needs a Schema Registry: pass "
                               "schema_registry_conn_id='schema_registry_default' (or yours)",
                               problem="is missing")
        if not registry and self.schema_registry_conn_id is not None:
            raise bad_argument(task, "schema_registry_conn_id", self.schema_registry_conn_id,
                               f"it is used only with key_format/value_format in "
                               f"{REGISTRY_FORMATS}; remove it", problem="is not used")
        decoding = self.key_format != "bytes" or self.value_format != "bytes"
        if self.on_corrupt != "fail" and not decoding:
            raise bad_argument(task, "on_corrupt", self.on_corrupt,
                               "it applies to decoded records; pass key_format/value_format, "
                               "or remove it", problem="does not apply without decoding")
        if self.dead_letter_topic is not None:
            if kind != "kafka" or self.on_corrupt != "dead_letter":
                raise bad_argument(task, "dead_letter_topic", self.dead_letter_topic,
                                   "it applies to a Kafka sink (output_topic=) with "
                                   "on_corrupt='dead_letter'; a file sink writes dead letters "
                                   "to <output_path>/_dead_letter", problem="does not apply")
            check_topic_name(task, "dead_letter_topic", self.dead_letter_topic)
        elif kind == "kafka" and self.on_corrupt == "dead_letter":
            raise bad_argument(task, "dead_letter_topic", None,
                               "on_corrupt='dead_letter' with output_topic= needs the topic to "
                               "write undecodable records to", problem="is missing")

    def _check_sink_only_arguments(self, kind: str) -> None:
        """An argument of another sink is a mistake, not something to ignore."""
        given = {"output_options": bool(self.output_options),
                 "partition_by": bool(self.partition_by),
                 "output_kafka_conn_id": self.output_kafka_conn_id is not None,
                 "transactional_id_prefix": self.transactional_id_prefix is not None,
                 "write_id": self.write_id is not None,
                 "output_format": self.output_format != "parquet",
                 "delivery_guarantee": str(self.delivery_guarantee).lower() != "exactly_once",
                 "dead_letter_topic": False,  # checked with the decoding arguments
                 "table_format": self.table_format is not None,
                 "table_application": self.table_application is not None,
                 "table_schema_evolution": self.table_schema_evolution is not False}
        for other, names in SINK_ONLY.items():
            wrong = [n for n in names if given[n]] if other != kind else []
            if wrong:
                name = wrong[0]
                raise bad_argument(self.task_id, name, getattr(self, name),
                                   f"it applies only to the sink {SINK_ARGUMENT[other]}; remove "
                                   "it, or write to that sink",
                                   problem="does not apply to this sink")

    def offset_ranges(self) -> OffsetRanges:
        """The (rendered) ``ranges`` argument, parsed (see :func:`parse_ranges`)."""
        return parse_ranges(self.task_id, self.ranges)

    @cached_property
    def spark_hook(self) -> SparkHook:
        """The hook giving the SparkSession; built on first use."""
        return SparkHook(self.spark_conn_id, spark_conf=self.spark_conf,
                         app_name=f"airflow-{self.dag_id}-{self.task_id}")

    def execute(self, context: Any) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        offset_ranges = self.offset_ranges()
        sink = self.sink(context, offset_ranges)
        from airflow_provider_kafka_spark.spark.ingest import ingest
        from airflow_provider_kafka_spark.spark.ingest_result import IngestResult

        if offset_ranges.is_empty():  # no Spark session, nothing written
            self.log.info("The ranges hold no offsets: nothing to read, nothing written.")
            stats = IngestResult.of(offset_ranges, sink.describe()).to_dict()
            self._warn_lost(stats)
            return stats
        result = ingest(
            self.spark_hook.get_conn(), offset_ranges, self.kafka_hook.get_kafka_config(), sink,
            engine=self.engine,  # type: ignore[arg-type]
            max_records_per_split=self.max_records_per_split,
            include_headers=self.include_headers,
            on_data_loss=self.on_data_loss,  # type: ignore[arg-type]
            decode=self.decoding(), transform=self.transform, sql=self.sql,
            on_corrupt=self.on_corrupt,  # type: ignore[arg-type]
            manifest={"dag_id": self.dag_id, "task_id": self.task_id,
                      "run_id": context["run_id"]},
            owner=self.task_id, progress_every=self.progress_every,
        )
        stats = result.to_dict()
        output = stats["output"]
        self.log.info("Wrote %d record(s) to %s:\n%s", stats["records"],
                      output.get("path") or output.get("topic") or output.get("table"),
                      _summary_table(stats))
        if self.sink_kind == "table":
            self.log.info(
                "Table %(table)s (%(format)s): %(records_written)s row(s) committed in commit "
                "%(commit)s as write %(write_id)s" if output.get("committed") else
                "Table %(table)s (%(format)s): the write %(write_id)s is already in the table "
                "(an earlier try committed it); nothing written.", output)
        if "decode" in stats:
            self.log.info("Decoded %(decoded)d record(s); %(skipped)d skipped and "
                          "%(dead_lettered)d dead-lettered as undecodable.", stats["decode"])
        self._warn_lost(stats)
        _send_metrics(self, stats)
        self._announce_output(context, stats)
        return stats

    def decoding(self) -> Decoding | None:
        """How ``ingest`` decodes: this task's formats and schemas, and the client config of
        ``schema_registry_conn_id``; None when nothing is decoded."""
        if self.key_format == "bytes" and self.value_format == "bytes":
            return None
        from airflow_provider_kafka_spark.hooks.schema_registry import SchemaRegistryHook
        from airflow_provider_kafka_spark.spark.ingest import Decoding

        registry = None
        if self.schema_registry_conn_id is not None:
            registry = SchemaRegistryHook(self.schema_registry_conn_id).get_config()
        return Decoding(key_format=self.key_format,  # type: ignore[arg-type]
                        value_format=self.value_format,  # type: ignore[arg-type]
                        key_schema=self.key_schema, value_schema=self.value_schema,
                        schema_registry=registry)

    def sink(self, context: Any, ranges: OffsetRanges) -> Sink:
        """The sink of the rendered arguments (no cluster call)."""
        if self.sink_kind == "table":
            return self.table_sink(context)
        if self.output_topic is None:
            assert isinstance(self.output_path, str) and isinstance(self.output_format, str)
            return FileSink(self.output_path, format=self.output_format,
                            options=self.output_options, partition_by=self.partition_by or ())
        return KafkaSink(
            self.output_kafka_hook.get_kafka_config, self.output_topic.strip(),
            delivery_guarantee=self.delivery_guarantee.lower(),
            transactional_id_prefix=self.transactional_id_prefix or f"{self.dag_id}.{self.task_id}",
            write_id=(self.write_id.strip() if self.write_id
                      else default_write_id(self.dag_id, self.task_id, context["run_id"], ranges)),
            records_as_read=self.transform is None and not self.sql,
            dead_letter_topic=self.dead_letter_topic,
            ledger_since=None if self.write_id else ledger_since(context, ranges),
        )

    def table_sink(self, context: Any) -> TableSink:
        """The table sink of this run: the application, the run (run id, ``#<map index>`` when
        mapped) and its generation (:func:`run_generation`)."""
        from airflow_provider_kafka_spark.sinks.tables import table_sink

        assert isinstance(self.output_table, str) and isinstance(self.table_format, str)
        run = str(context["run_id"])
        map_index = getattr(context.get("ti"), "map_index", -1)
        if isinstance(map_index, int) and map_index >= 0:
            run = f"{run}#{map_index}"
        try_number = getattr(context.get("ti"), "try_number", None)
        return table_sink(
            self.table_format, self.output_table.strip(),
            application=self.table_application or f"{self.dag_id}.{self.task_id}",
            run=run, generation=run_generation(context.get("dag_run")),
            schema_evolution=self.table_schema_evolution,
            commit_properties={"dag-id": self.dag_id, "task-id": self.task_id,
                               "run-id": str(context["run_id"]),
                               "try-number": str(try_number)})

    @cached_property
    def output_kafka_hook(self) -> KafkaHook:
        """The hook of the output cluster (``output_kafka_conn_id``, else ``kafka_conn_id``)."""
        return (KafkaHook(self.output_kafka_conn_id) if self.output_kafka_conn_id
                else self.kafka_hook)

    @property
    def output_alias_name(self) -> str:
        """The name of the asset alias through which each run announces the asset it wrote:
        ``kafka_spark:<dag_id>.<task_id>``."""
        return f"kafka_spark:{self.dag_id}.{self.task_id}"

    def output_asset_uri(self, location: str | None = None) -> str:
        """The asset URI of the rendered output: ``file:///...``, ``s3://...`` or
        ``kafka://host:port/topic``; a table's is its ``location`` (where its files are, as
        the sink reported it; a Delta table's path when not known)."""
        if self.sink_kind == "table":
            return output_asset_uri(output_path=self._table_location(location))
        if self.output_topic is None:
            return output_asset_uri(output_path=self.output_path)
        return output_asset_uri(output_topic=self.output_topic.strip(),
                                kafka_config=self.output_kafka_hook.get_kafka_config())

    def lineage(self, result: Any | None) -> Lineage:
        """The topics of ``ranges`` (with the records read once complete) and the output."""
        ranges = self.offset_ranges()
        if self.sink_kind == "table":
            output = dataset_of_path(self._table_location(
                None if result is None else result["output"].get("location")))
        elif self.output_topic is None:
            output = dataset_of_path(str(self.output_path))
        else:
            output = (f"kafka://{kafka_authority(self.output_kafka_hook.get_kafka_config())}",
                      self.output_topic.strip())
        records: dict[str, int] | None = None
        written = None
        if result is not None:
            records = {}
            for entry in result["partitions"]:
                records[entry["topic"]] = records.get(entry["topic"], 0) + entry["records"]
            written = result["output"].get("records_written")
        return Lineage(kafka_authority(self.kafka_hook.get_kafka_config()), ranges=ranges,
                       records=records, output=output, output_records=written)

    def _table_location(self, location: str | None) -> str:
        """Where the table's files are: as the sink found it, else a Delta table's path, else
        ``<format>:<table name>``."""
        from airflow_provider_kafka_spark.sinks.tables.delta import is_path

        table = str(self.output_table).strip()
        if location:
            return location
        return table if is_path(table) else f"{self.table_format}:{table}"

    def _announce_output(self, context: Any, stats: dict[str, Any]) -> None:
        """An event of the output's asset through this task's alias (when it has one), so DAGs
        scheduled on that asset run."""
        from airflow.sdk import Asset, AssetAlias

        alias = AssetAlias(name=self.output_alias_name)
        if alias not in self.outlets:
            return
        context["outlet_events"][alias].add(Asset(self.output_asset_uri(
            stats["output"].get("location"))),
                                            extra={"records": stats["records"]})

    def _warn_lost(self, stats: dict[str, Any]) -> None:
        """One warning naming the partitions with skipped (deleted) offsets, if any."""
        if not stats["lost"]:
            return
        detail = ", ".join(f"{p['topic']}/{p['partition']}: {p['lost']}"
                           for p in stats["partitions"] if p["lost"])
        self.log.warning("%d offset(s) deleted before they could be read were skipped "
                         "(on_data_loss='skip'): %s. The output lacks them.",
                         stats["lost"], detail)


def _several(names: list[str]) -> str:
    """``neither``, ``both a and b``, ``all of a, b and c``."""
    if not names:
        return "neither"
    if len(names) == 2:
        return f"both {names[0]} and {names[1]}"
    return f"all of {', '.join(names[:-1])} and {names[-1]}"


def run_generation(dag_run: Any) -> int | str:
    """The generation of a table write by ``dag_run``: the same for every try of one instance
    of the run, another when Airflow clears the run (its clear number grows and its start is
    reset) or deletes it and creates it again under the same run id (its clear number is 0
    again, its start is new): ``<clear number>-<start, UTC, to the microsecond>``, e.g.
    ``1-20261125T215713123456Z``; just the clear number when the run has no start."""
    clear_number = int(getattr(dag_run, "clear_number", 0) or 0)
    started = getattr(dag_run, "start_date", None)
    if started is None:
        return clear_number
    return f"{clear_number}-{started.astimezone(UTC):%Y%m%dT%H%M%S%fZ}"


def ledger_since(context: Any, ranges: OffsetRanges) -> datetime | None:
    """When the run's first write with the default write id (which names the ranges) can have
    begun at the earliest: when its ranges were first resolved (a pin keeps that time for every
    try and clear, and for a run created again under its id) or the run's ``run_after`` (a
    ``re_resolve`` that found the same ranges again), whichever is earlier. The Kafka sink
    reads the write's ledger from there, not from its start."""
    run_after = getattr(context.get("dag_run"), "run_after", None)
    moments = [m for m in (ranges.resolved_at, run_after)
               if isinstance(m, datetime) and m.utcoffset() is not None]
    return min(moments) if moments else None


def default_write_id(dag_id: str, task_id: str, run_id: str, ranges: OffsetRanges) -> str:
    """``<dag_id>/<task_id>/<run_id>/<digest>``: the same for a retry of the task (same XCom
    ranges), different when the ranges were resolved again to other offsets."""
    bounds = json.dumps([[r.topic, r.partition, r.start, r.stop] for r in ranges])
    return f"{dag_id}/{task_id}/{run_id}/{hashlib.sha256(bounds.encode()).hexdigest()[:16]}"


def _summary_table(stats: dict[str, Any]) -> str:
    """Per partition: range, records, first/last offset, min/max timestamp, lag, lost; then
    one line of totals with the throughput."""
    columns = ("topic", "partition", "start", "stop", "records", "first_offset", "last_offset",
               "min_timestamp", "max_timestamp", "lag", "lost")
    table = format_table(columns, [["" if p[c] is None else p[c] for c in columns]
                                   for p in stats["partitions"]])
    return (f"{table}\ntotal: {stats['records']} record(s), {stats['bytes']} byte(s) in "
            f"{stats['seconds']:.1f}s ({stats['records_per_second']:.0f} records/s, "
            f"{stats['bytes_per_second']:.0f} bytes/s), lag {stats['lag']}, "
            f"lost {stats['lost']}")


def _send_metrics(task: Any, stats: dict[str, Any]) -> None:
    """The ingest's counters (:mod:`~airflow_provider_kafka_spark.operators.metrics`)."""
    metrics.count(task, "records_read", stats["records"])
    metrics.count(task, "bytes_read", stats["bytes"])
    metrics.count(task, "lost_offsets", stats["lost"])
    if "records_written" in stats["output"]:
        metrics.count(task, "records_written", stats["output"]["records_written"])
