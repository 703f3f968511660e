"""The ingest task: :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` (read a run's
offset ranges with Spark, decode, transform, write the sink, statistics) with Airflow's
arguments, connections, logging, metrics, lineage and assets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.arguments import check_stages, checkable, parse_ranges
from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.hooks.spark import SparkHook
from airflow_provider_kafka_spark.naming import asset_uri, kafka_authority
from airflow_provider_kafka_spark.offsets import ConfigurationError
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.operators import metrics
from airflow_provider_kafka_spark.operators.base import KafkaSparkBaseOperator, format_table
from airflow_provider_kafka_spark.operators.lineage import Lineage
from airflow_provider_kafka_spark.operators.lineage_facets import OpenLineageMixin
from airflow_provider_kafka_spark.operators.sink_run import run_info
from airflow_provider_kafka_spark.options import (
    SQL_VIEW,
    ReadOptions,
    check_mapping,
    check_progress_every,
    check_text,
)
from airflow_provider_kafka_spark.retries import fail_at_once_when_certain
from airflow_provider_kafka_spark.shaping import Shape
from airflow_provider_kafka_spark.sinks import MANIFEST_NAME, Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["MANIFEST_NAME", "SQL_VIEW", "KafkaSparkIngestOperator"]


class KafkaSparkIngestOperator(OpenLineageMixin, KafkaSparkBaseOperator):
    """Read ``ranges`` with Spark, decode and transform them, and write them to ``sink``:
    :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` (which a plain PySpark job can
    call too) with Airflow's connections, logs, metrics, lineage and assets.

    The ranges come from the resolve task's XCom, so a retry reads exactly the same records.
    The sink is a value: ``FileSink("s3a://lake/orders/{{ data_interval_start | ds }}")``
    (files, replaced as a whole by each run), ``KafkaSink("orders-clean")`` (exactly once into
    a topic), ``IcebergSink("lake.db.orders")`` or ``DeltaSink("/lake/orders")`` (one table
    commit per run). Airflow renders its templated fields; the operator fills in what it was
    not given from the run (:meth:`~airflow_provider_kafka_spark.sinks.Sink.for_run`: a
    Kafka sink's cluster, transactional id prefix and write id; a table sink's application
    ``<dag_id>.<task_id>``, run and generation: ``operators/sink_run.py``). What each sink
    guarantees on retries, clears and backfills is in its docstring and ``docs/airflow.md``.

    **Bad arguments fail before anything is read.** Literal arguments (and the sink's and the
    decoding's) are checked when the DAG file is parsed, templated ones once rendered, at the
    start of ``execute``; then, on the Spark driver, ``ingest`` checks the transform (called
    once on an empty DataFrame: keep it free of side effects), the SQL and the sink
    (``sink.prepare``). Empty ranges skip Spark and write nothing.

    Returns (XCom) ``ingest``'s statistics (``IngestResult.to_dict()``: counts, per-partition
    entries, throughput, ``output``: the sink's description), also logged as a table and
    counted in ``Stats`` (:mod:`~airflow_provider_kafka_spark.operators.metrics`); each run
    that wrote something announces the output's asset through the alias
    ``kafka_spark:<dag_id>.<task_id>`` (not under ``dag.test()``). In a partitioned run
    (Airflow 3.3) Airflow gives that event, and those of the task's ``outlets``, the run's
    ``partition_key``: declare a partitioned output as ``outlets=[Asset(...)]``.

    :param ranges: the resolve task's XCom (``resolve.output``) or its JSON; templated.
    :param sink: where the records go (a :class:`~airflow_provider_kafka_spark.sinks.Sink`);
        its templated fields are rendered.
    :param decode: how ``key``/``value`` are decoded before ``transform``/``sql``, and what an
        undecodable record does (:class:`~airflow_provider_kafka_spark.decoding.Decoding`);
        None keeps the bytes.
    :param transform: ``callable(DataFrame) -> DataFrame`` applied to the records read.
    :param sql: instead, one Spark SQL query over the view ``kafka``; templated.
    :param shape: instead of ``transform``/``sql``, the columns to land, declared
        (:class:`~airflow_provider_kafka_spark.shaping.Shape`); the readers apply it
        themselves into a ``FileSink`` of Parquet, also partitioned by its columns.
    :param spark_conn_id: a ``spark``/``spark_connect`` connection, or None for a local
        session (:class:`SparkHook`; ``docs/spark-connect.md``); ``spark_conf``: extra conf.
    :param engine: with ``max_records_per_split``, ``include_headers`` and ``on_data_loss``:
        how the slice is read (:class:`~airflow_provider_kafka_spark.options.ReadOptions`).
    :param progress_every: log every this many seconds (a number or a ``timedelta``; default
        30) how far the write is; None or 0: never.
    """

    template_fields: Sequence[str] = ("ranges", "sink", "sql")
    template_fields_renderers = {"sql": "sql"}
    ui_color = "#fcecd7"

    def __init__(self, *, ranges: Any, sink: Sink, decode: Decoding | None = None,
                 transform: Callable[[DataFrame], DataFrame] | None = None,
                 sql: str | None = None, shape: Shape | None = None,
                 spark_conn_id: str | None = None,
                 spark_conf: dict[str, Any] | None = None,
                 max_records_per_split: int | None = None, engine: str = "python",
                 include_headers: bool = True, on_data_loss: str = "fail",
                 progress_every: float | timedelta | None = 30.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        task = self.task_id
        check_stages(task, sink, decode, transform, sql, rendered=False, shape=shape)
        if checkable(ranges, rendered=False):
            parse_ranges(task, ranges)
        self.ranges, self.sink, self.decode = ranges, sink, decode
        self.transform, self.sql, self.shape = transform, sql, shape
        self.spark_conn_id = check_text(task, "spark_conn_id", spark_conn_id, allow_none=True,
                                        meaning="an Airflow connection id")
        self.spark_conf = check_mapping(task, "spark_conf", spark_conf, meaning="Spark conf")
        self.read_options = ReadOptions(engine=engine, include_headers=include_headers,
                                        max_records_per_split=max_records_per_split,
                                        on_data_loss=on_data_loss, owner=task)
        self.progress_every = check_progress_every(task, progress_every)
        self._run_sink: Sink | None = None  # the sink of the running try (execute)
        if self.has_dag():
            from airflow.sdk import AssetAlias

            self.outlets = [*self.outlets, AssetAlias(name=self.output_alias_name)]

    @cached_property
    def spark_hook(self) -> SparkHook:
        """The hook giving the SparkSession; built on first use."""
        return SparkHook(self.spark_conn_id, spark_conf=self.spark_conf,
                         app_name=f"airflow-{self.dag_id}-{self.task_id}")

    @cached_property
    def kafka_config(self) -> KafkaConfig:
        """The input cluster's librdkafka config (``kafka_conn_id``), read once per try."""
        return self.kafka_hook.get_kafka_config()

    @property
    def output_alias_name(self) -> str:
        """The asset alias each run announces its output through:
        ``kafka_spark:<dag_id>.<task_id>``."""
        return f"kafka_spark:{self.dag_id}.{self.task_id}"

    @fail_at_once_when_certain
    def execute(self, context: Any) -> dict[str, Any]:
        ranges = parse_ranges(self.task_id, self.ranges)
        for_run = getattr(self.sink, "for_run", None)  # a Sink; a sink of one's own may lack it
        try:
            sink = self._run_sink = (for_run(run_info(self, context, ranges)) if for_run
                                     else self.sink)
        except ConfigurationError as exc:  # a rendered field of the sink
            raise ConfigurationError(f"{self.task_id}: {exc}") from None
        check_stages(self.task_id, sink, self.decode, self.transform, self.sql,
                     shape=self.shape)
        from airflow_provider_kafka_spark.spark.ingest_result import IngestResult

        options = self.read_options
        if ranges.is_empty():  # no Spark (not even its import), nothing written
            self.log.info("The ranges hold no offsets: nothing to read, nothing written.")
            stats = IngestResult.of(ranges, sink.describe()).to_dict()
        else:
            from airflow_provider_kafka_spark.spark.ingest import ingest
            stats = ingest(
                self.spark_hook.get_conn(), ranges, self.kafka_config, sink,
                engine=options.engine, max_records_per_split=options.max_records_per_split,
                include_headers=options.include_headers, on_data_loss=options.on_data_loss,
                decode=self.decode, transform=self.transform, sql=self.sql, shape=self.shape,
                manifest={"dag_id": self.dag_id, "task_id": self.task_id,
                          "run_id": context["run_id"]},
                owner=self.task_id, progress_every=self.progress_every,
            ).to_dict()
            self.log.info("Wrote %d record(s) to %r:\n%s", stats["records"], sink,
                          _summary_table(stats))
        if "decode" in stats:
            self.log.info("Decoded %(decoded)d record(s); %(skipped)d skipped and "
                          "%(dead_lettered)d dead-lettered as undecodable.", stats["decode"])
        if stats["lost"]:
            self.log.warning("%d offset(s) deleted before they could be read were skipped "
                             "(on_data_loss='skip'): %s. The output lacks them.", stats["lost"],
                             ", ".join(f"{p['topic']}/{p['partition']}: {p['lost']}"
                                       for p in stats["partitions"] if p["lost"]))
        for name, value in (("records_read", stats["records"]), ("bytes_read", stats["bytes"]),
                            ("lost_offsets", stats["lost"]),
                            ("records_written", stats["output"].get("records_written"))):
            if value is not None:
                metrics.count(self, name, value)
        if not ranges.is_empty():  # empty ranges wrote nothing: no asset event
            self._announce_output(context, stats)
        return stats

    def lineage(self, result: Any | None) -> Lineage:
        """The topics of ``ranges`` (with the records read once complete) and the output."""
        output = (result or {}).get("output", {})
        records: dict[str, int] | None = None if result is None else {}
        for entry in (result or {}).get("partitions", ()):
            records[entry["topic"]] = records.get(entry["topic"], 0) + entry["records"]
        return Lineage(kafka_authority(self.kafka_config),
                       ranges=parse_ranges(self.task_id, self.ranges), records=records,
                       output=_dataset(self._run_sink or self.sink, output.get("location")),
                       output_records=output.get("records_written"))

    def _announce_output(self, context: Any, stats: dict[str, Any]) -> None:
        """An event of the output's asset through this task's alias (when it has one), so DAGs
        scheduled on that asset run. Not under ``dag.test()``, which runs no scheduler: Airflow
        learns of an asset announced through an alias from its first event only, and warns
        each time that it has no such asset, then that the one it created is inactive."""
        from airflow.sdk import Asset, AssetAlias

        # dag.test() names this user as its runs' trigger (Airflow 3.3: sdk/definitions/dag.py).
        if getattr(context.get("dag_run"), "triggering_user_name", None) == "dag_test":
            self.log.info("dag.test(): the output's asset is not announced (no scheduler).")
            return
        alias = AssetAlias(name=self.output_alias_name)
        dataset = _dataset(self._run_sink or self.sink, stats["output"].get("location"))
        if alias in self.outlets and dataset is not None:
            context["outlet_events"][alias].add(Asset(asset_uri(dataset)),
                                                extra={"records": stats["records"]})


def _dataset(sink: Sink, location: str | None) -> tuple[str, str] | None:
    """The output's dataset as the sink names it (None for a sink without a name)."""
    dataset = getattr(sink, "dataset", None)
    return dataset(location) if callable(dataset) else None


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
