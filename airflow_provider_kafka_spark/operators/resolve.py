"""Resolve offset specs to exact offset ranges, once per DAG run, and keep them in XCom."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_kafka_spark.arguments import (
    SUBSCRIPTION_FIELDS,
    Partitions,
    SubscriptionMixin,
    Topics,
    checkable,
)
from airflow_provider_kafka_spark.naming import kafka_authority
from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    IntervalNotCompleteError,
    OffsetRanges,
    OffsetSpecError,
    Timestamp,
)
from airflow_provider_kafka_spark.offsets.intervals import (
    Announcement,
    Interval,
    claim_intervals,
    iso_millis,
)
from airflow_provider_kafka_spark.offsets.pins import PINS_TOPIC, RunKey
from airflow_provider_kafka_spark.offsets.runs import RunRequest, resolve_run
from airflow_provider_kafka_spark.operators import metrics
from airflow_provider_kafka_spark.operators.base import (
    KafkaSparkBaseOperator,
    bool_param,
    ranges_table,
)
from airflow_provider_kafka_spark.operators.lineage import Lineage
from airflow_provider_kafka_spark.operators.lineage_facets import OpenLineageMixin
from airflow_provider_kafka_spark.operators.partitions import (
    PartitionSlice,
    RunPartition,
    check_partition_slice,
    partition_bounds,
    unkeyed_run_of_partitioned_dag,
)
from airflow_provider_kafka_spark.operators.spec_sources import (
    RunSpecs,
    SpecSources,
    choose_specs,
    parse_spec,
)
from airflow_provider_kafka_spark.options import (
    ISOLATION_LEVELS,
    bad_argument,
    check_bool,
    check_choice,
    check_mapping,
    check_seconds,
    check_text,
    check_topic_name,
)
from airflow_provider_kafka_spark.retries import fail_at_once_when_certain
from airflow_provider_kafka_spark.sinks import TableSink


class KafkaResolveOffsetsOperator(OpenLineageMixin, SubscriptionMixin, KafkaSparkBaseOperator):
    """Resolve ``start`` and ``stop`` to one ``[start, stop)`` offset range per partition.

    The result (``OffsetRanges.to_dict()``) is the task's XCom ``return_value``; the ingest and
    commit tasks read it, so a retry of either reads exactly the same records.

    **Runs are reproducible.** The first resolution of a run (``dag_id``, ``task_id``,
    ``run_id``, ``map_index``) is pinned in the compacted Kafka topic ``pins_topic``; every
    later try of this task in that run, including after a clear of the task or of the whole
    run, returns the pinned ranges (logged as such), even when ``latest`` or ``committed``
    now answer differently. So a cleared run reads, and writes, exactly what it did the first
    time. Resolving a run again is an explicit choice: ``re_resolve=True`` or the run's Param
    ``re_resolve`` (then the new ranges are pinned).

    Where each spec comes from, first match wins (the table of
    :func:`~airflow_provider_kafka_spark.operators.spec_sources.choose_specs`): the DAG run's
    params ``start`` / ``stop`` when set (a manual run's trigger form, e.g.
    ``{"start": "timestamp:2024-05-01T00:00:00Z", "stop": "latest"}``); the ``start`` /
    ``stop`` arguments; the intervals announced by the Kafka interval asset that started the
    run (:func:`airflow_provider_kafka_spark.assets.kafka_interval_asset`):
    ``timestamp:<start>`` of the first and ``timestamp:<end>`` of the last (see below); the
    run's data interval.

    A run without a data interval, or a zero-width one (``start`` and ``stop`` the same
    instant, as in a manual or asset-triggered run), is an error naming the Params to set,
    never a silent empty read.

    **Runs started by a Kafka interval asset.** The run's triggering asset events that are
    interval announcements of this task's subscription (the watcher's topics must be the ones
    this task reads, else it is an error) give the interval. Airflow folds the events that
    arrive before a run is created into one run (a DAG at ``max_active_runs``, or paused and
    unpaused): such a run reads its consecutive intervals as one range. When both specs come
    from the announcements, the run first *claims* its intervals for this task in the pins
    topic (:func:`~airflow_provider_kafka_spark.offsets.intervals.claim_intervals`): an
    interval another run of this task claimed first (a second announcement of it, after a
    triggerer crash) is left to that run, and a run left with nothing is skipped (its ingest
    and commit too) without reading anything. The interval read is pushed as the XCom
    ``interval`` (``start``, ``end``, ``label`` such as ``20240501T100000Z`` for folder names,
    ``intervals``; pushed for every run whose two specs are times, so a manual run with
    ``timestamp:`` Params gets one too). A run started only by a watcher's error announcement
    (an unknown topic) fails with the watcher's message.

    :param topics: topic name(s), see :class:`SubscriptionMixin`; templated.
    :param topic_pattern: regex of topic names; templated.
    :param partitions: ``(topic, partition)`` pairs; templated.
    :param start: the starting offset spec (inclusive), see ``parse_offset_spec``; templated.
        Default: the data interval start.
    :param stop: the stopping offset spec (exclusive); templated. Default: the data interval
        end.
    :param group_id: consumer group for ``committed`` specs (and the default group the commit
        task commits to); templated.
    :param isolation_level: ``read_committed`` (default) or ``read_uncommitted``.
    :param on_data_loss: ``fail`` (default) when a range starts below the log start offset,
        or ``skip`` to start at the log start and record the loss in the ranges.
    :param on_open_transaction: ``fail`` (default: ``IntervalNotCompleteError``, so Airflow's
        retries wait) when an open transaction holds back a ``timestamp:`` stop, or
        ``truncate`` to stop at the last stable offset and record the cut in the ranges.
    :param re_resolve: resolve again even when this run has pinned ranges (a bool; also the
        Param ``re_resolve``, which must be a JSON boolean).
    :param pins_topic: the compacted topic holding pinned run ranges.
    :param timeout: seconds (a positive number) to wait for the cluster's answers.
    :param table: with the start spec ``table`` (``table:earliest``, ``table:latest``): the
        ingest's table sink, ``IcebergSink(...)`` or ``DeltaSink(...)`` with its
        ``application`` (the ingest's default is ``<dag_id>.<ingest task_id>``: pass it),
        whose commits record where the application stopped (read with Spark:
        ``spark_conn_id``/``spark_conf`` as for the ingest task). The same value can be the
        ingest task's ``sink``; its table name is templated.
    :param spark_conn_id: the Spark connection for reading ``table`` (None: a local session).
    :param spark_conf: extra Spark conf for that session (e.g. the Iceberg catalog).
    :param partition_slice: for partitioned runs (Airflow 3.3: the run has a ``partition_key``)
        whose key is not a tick of a ``CronPartitionTimetable``: a function of the key
        returning ``(start, stop)``, each an aware datetime or an offset spec. Default: the
        partition of the DAG's ``CronPartitionTimetable`` (``partition_date`` .. next tick).

    Literal arguments are checked when the DAG file is parsed (a bad one is an import error of
    the DAG): the subscription, ``start``/``stop`` (``OffsetSpecError``), and the others
    (``ConfigurationError`` naming the task, the argument, the value and what to pass).
    Templated ones are checked once rendered, at the start of ``execute``, before any cluster
    call.
    """

    template_fields: Sequence[str] = (*SUBSCRIPTION_FIELDS, "start", "stop", "group_id", "table")
    ui_color = "#d7e8fc"

    def __init__(
        self,
        *,
        topics: Topics | None = None,
        topic_pattern: str | None = None,
        partitions: Partitions | None = None,
        start: Any = None,
        stop: Any = None,
        group_id: str | None = None,
        isolation_level: str = "read_committed",
        on_data_loss: str = "fail",
        on_open_transaction: str = "fail",
        re_resolve: bool = False,
        pins_topic: str = PINS_TOPIC,
        timeout: float = 30.0,
        table: TableSink | None = None,
        spark_conn_id: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        partition_slice: PartitionSlice | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partition_slice = check_partition_slice(self.task_id, partition_slice)
        self.table = table
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self._set_subscription(topics, topic_pattern, partitions)
        self.start = start
        self.stop = stop
        self.group_id = group_id
        task = self.task_id
        self.isolation_level = check_choice(task, "isolation_level", isolation_level,
                                            ISOLATION_LEVELS)
        self.on_data_loss = check_choice(task, "on_data_loss", on_data_loss, ("fail", "skip"))
        self.on_open_transaction = check_choice(task, "on_open_transaction", on_open_transaction,
                                                ("fail", "truncate"))
        self.re_resolve = check_bool(task, "re_resolve", re_resolve)
        self.pins_topic = check_topic_name(task, "pins_topic", pins_topic)
        self.timeout = check_seconds(task, "timeout", timeout, example=30,
                                     meaning="how long to wait for the cluster's answers")
        self.check_arguments(rendered=False)

    def check_arguments(self, *, rendered: bool) -> None:
        """Check the template fields: literals when the DAG is parsed, all once rendered.

        Raises:
            OffsetSpecError: a bad subscription or offset spec (named).
            ConfigurationError: a bad ``group_id``.
        """
        self._check_subscription(rendered=rendered)
        for name in ("start", "stop"):
            value = getattr(self, name)
            if value is not None and checkable(value, rendered=rendered):
                spec = parse_spec(self.task_id, name, value)
                if name == "stop" and spec.reads() == "table":
                    raise OffsetSpecError(
                        f"{self.task_id}: stop: {spec} is a starting spec only (it says where "
                        "the table's data ends); stop at 'latest', 'timestamp:<time>' or "
                        "explicit offsets.")
        self._check_table(rendered)
        if not checkable(self.group_id, rendered=rendered):
            return
        if rendered and (self.group_id is None or isinstance(self.group_id, str)):
            return  # a template rendered to "" means no group, as None does
        check_text(self.task_id, "group_id", self.group_id, allow_none=True,
                   meaning="a consumer group id")

    def _check_table(self, rendered: bool) -> None:
        """The table sink: given exactly when the start spec is ``table`` (once known)."""
        task = self.task_id
        if self.table is None:
            if rendered or checkable(self.start, rendered=rendered):
                start = parse_spec(task, "start", self.start) if self.start is not None else None
                if start is not None and start.reads() == "table":
                    raise bad_argument(task, "table", None,
                                       f"the start spec {start} reads the table the ingest "
                                       "writes: pass table=IcebergSink(...) or DeltaSink(...) "
                                       "with its application", problem="is missing")
            return
        if not isinstance(self.table, TableSink) or self.table.application is None:
            raise bad_argument(task, "table", self.table,
                               "pass the ingest's table sink with its application, e.g. "
                               "IcebergSink('lake.db.orders', application='<dag_id>.ingest')")
        check_text(task, "spark_conn_id", self.spark_conn_id, allow_none=True,
                   meaning="an Airflow connection id")
        check_mapping(task, "spark_conf", self.spark_conf, meaning="Spark conf")

    def table_offsets(self) -> dict[tuple[str, int], int]:
        """The stops the table sink records for its application (a Spark session reads
        them)."""
        assert self.table is not None  # _check_table: given with a ``table`` start
        from airflow_provider_kafka_spark.hooks.spark import SparkHook

        spark = SparkHook(self.spark_conn_id, spark_conf=self.spark_conf,
                          app_name=f"airflow-{self.dag_id}-{self.task_id}").get_conn()
        try:
            found = self.table.recorded_offsets(spark)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.task_id}: {exc}") from None
        self.log.info("The table %s records the stops of %s for %d partition(s): %s",
                      self.table.table, self.table.application, len(found),
                      ", ".join(f"{t}/{p}: {o}" for (t, p), o in sorted(found.items())[:50]))
        return found

    @fail_at_once_when_certain
    def execute(self, context: Any) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        subscription = self.subscription()
        re_resolve = bool_param(self.task_id, context, "re_resolve") or self.re_resolve
        kafka_config = self.kafka_hook.get_kafka_config()
        run = RunKey(self.dag_id, self.task_id, context["run_id"],
                     getattr(context.get("ti"), "map_index", -1))
        since = getattr(context.get("dag_run"), "run_after", None)
        intervals = self.announced_intervals(context)
        chosen = self.specs(context, intervals)
        if chosen.sources == ("announced", "announced"):
            intervals = self._claim(kafka_config, run, intervals, since)
            chosen = self.specs(context, intervals)
        start, stop = chosen.start, chosen.stop
        if chosen.sources[1] == "partition":
            _check_partition_ended(self.task_id, context.get("partition_key"), stop)
        if isinstance(start, Timestamp) and isinstance(stop, Timestamp) \
                and start.millis < stop.millis:
            span = Interval(start.millis, stop.millis)
            ti = context.get("ti")  # absent when execute() is called without Airflow
            if ti is not None:
                ti.xcom_push(key="interval", value={
                    "start": iso_millis(span.start_ms), "end": iso_millis(span.end_ms),
                    "label": span.label,
                    "intervals": [[iso_millis(i.start_ms), iso_millis(i.end_ms)]
                                  for i in intervals or [span]]})
        if re_resolve:
            self.log.info("Resolving %s again (re_resolve): new ranges replace the pinned ones.",
                          run)
        else:
            self.log.info("Resolving %s from %s to %s, unless the run has pinned ranges",
                          subscription, start, stop)
        request = RunRequest(subscription, start, stop, group_id=self.group_id or None,
                             isolation_level=self.isolation_level,
                             on_data_loss=self.on_data_loss,  # type: ignore[arg-type]
                             on_open_transaction=self.on_open_transaction,  # type: ignore[arg-type]
                             timeout=self.timeout, pins_topic=self.pins_topic)
        resolution = resolve_run(kafka_config, run, request, since=since, re_resolve=re_resolve,
                                 table_offsets=self.table_offsets
                                 if start.reads() == "table" else None)
        ranges = resolution.ranges
        if resolution.pinned:
            self.log.info(
                "Using the ranges pinned by the first resolution of this run (%s, resolved "
                "at %s), not resolving %s .. %s again; pass re_resolve=True or the Param "
                "re_resolve to resolve anew:\n%s", run, ranges.resolved_at.isoformat(),
                start, stop, ranges_table(ranges))
            return ranges.to_dict()
        for side, boundary in (("start", resolution.start_boundary),
                               ("stop", resolution.stop_boundary)):
            if boundary is not None:
                self.log.info("The %s (%s) is where %s: the runs tile.", side,
                              start if side == "start" else stop, boundary)
            elif isinstance(start if side == "start" else stop, Timestamp):
                self.log.info("No run of this task has resolved its %s (%s) yet: looked up by "
                              "time; the neighbouring run will meet these offsets.", side,
                              start if side == "start" else stop)
        self.log.info("Resolved and pinned %d partition(s), %d offset(s):\n%s",
                      len(ranges), ranges.total(), ranges_table(ranges))
        metrics.gauge(self, "lag", ranges.total_lag())
        return ranges.to_dict()

    def lineage(self, result: Any | None) -> Lineage:
        """The subscribed topics; once resolved, with their ranges (OpenLineage inputs)."""
        authority = kafka_authority(self.kafka_hook.get_kafka_config())
        if result is not None:
            return Lineage(authority, ranges=OffsetRanges.from_json(result))
        subscription = self.subscription()
        return Lineage(authority, topics=subscription.topic_names or tuple(
            dict.fromkeys(topic for topic, _ in subscription.partition_list)))

    def announced_intervals(self, context: Mapping[str, Any]) -> list[Interval]:
        """The intervals announced for this task's subscription by the run's triggering asset
        events (interval announcements of
        :func:`~airflow_provider_kafka_spark.assets.kafka_interval_asset`), sorted, without
        repeats; ``[]`` when the run was not started by any.

        Raises:
            OffsetSpecError: the announcements are of another subscription.
            ConfigurationError: the run was started by error announcements only (their
                messages), or an announcement cannot be read.
        """
        announcements = _announcements(context.get("triggering_asset_events"))
        if not announcements:
            return []
        mine = str(self.subscription())
        intervals = sorted({a.interval for a in announcements
                            if a.interval is not None and a.subscription == mine})
        errors = sorted({a.error for a in announcements if a.error is not None})
        for error in errors:
            self.log.warning("The watcher reported: %s", error)
        if intervals:
            return intervals
        others = sorted({a.subscription for a in announcements if a.interval is not None})
        if others:
            raise OffsetSpecError(
                f"{self.task_id}: the run was started by intervals of {', '.join(others)} "
                f"announced by a Kafka interval asset, but this task reads {mine}. Read the "
                "topics the asset watches (the same topics=), or pass start= and stop=.")
        raise ConfigurationError(f"{self.task_id}: the run was started by an error of the Kafka "
                                 f"interval asset it is scheduled on: {' / '.join(errors)}")

    def _claim(self, kafka_config: Mapping[str, Any], run: RunKey, intervals: list[Interval],
               since: datetime | None) -> list[Interval]:
        """The intervals this run reads: those it holds the claim of (see the class doc).

        Raises:
            AirflowSkipException: other runs hold every claim (a second announcement).
            OffsetSpecError: what this run holds is not one consecutive span.
        """
        holders = claim_intervals(kafka_config, run, intervals, since=since,
                                  topic=self.pins_topic, timeout=self.timeout)
        held = [i for i in intervals if holders[i] == run]
        for interval in intervals:
            if holders[interval] != run:
                self.log.warning("%s was announced again: %s claimed it first and reads it; "
                                 "this run leaves it alone.", interval, holders[interval])
        if not held:
            raise AirflowSkipException(
                f"{self.task_id}: every interval of this run ({', '.join(map(str, intervals))}) "
                "is read by the run that claimed it first (a second announcement, e.g. after "
                "a triggerer restart): nothing to read.")
        if len(held) > 1:
            self.log.info("This run was started by %d announced intervals (Airflow folds the "
                          "events that arrive before a run is created): it reads them as one "
                          "range.", len(held))
        gaps = [(a, b) for a, b in zip(held, held[1:], strict=False) if a.end_ms != b.start_ms]
        if gaps:
            raise OffsetSpecError(
                f"{self.task_id}: the intervals this run holds are not consecutive "
                f"({', '.join(map(str, held))}); a run reads one range. Read them in separate "
                "runs: trigger the DAG with the Params start and stop of each.")
        return held

    def specs(self, context: Mapping[str, Any], intervals: Sequence[Interval] = ()) -> RunSpecs:
        """This run's specs (:func:`choose_specs` over what ``context`` offers), checked, never
        zero-width. ``intervals``: the consecutive intervals announced for the run."""
        return choose_specs(self.task_id, SpecSources(
            params=context.get("params") or {},
            arguments=(self.start, self.stop),
            partition=self._partition_bounds(context),
            announced=tuple(intervals),
            data_interval=(context.get("data_interval_start"), context.get("data_interval_end")),
        ))

    def _partition_bounds(self, context: Mapping[str, Any]) -> tuple[Any, Any] | \
            ConfigurationError:
        """The bounds of the run's partition (``(None, None)``: not a partitioned run), or why
        it has none (raised by :func:`choose_specs` only when a side needs it)."""
        key = context.get("partition_key")
        dag = context.get("dag")
        if not key:
            return unkeyed_run_of_partitioned_dag(self.task_id, getattr(dag, "timetable", None))
        try:
            return partition_bounds(self.task_id, RunPartition(key, context.get("partition_date")),
                                    getattr(dag, "timetable", None), self.partition_slice)
        except ConfigurationError as exc:
            return exc


def _check_partition_ended(task_id: str, key: str | None, stop: Any) -> None:
    """A partition is read once it has ended: its records are still being written before.

    Raises:
        IntervalNotCompleteError: the partition's stop is after now (a CronPartitionTimetable
            without ``run_offset=-1`` runs at the start of its partition); Airflow's retries
            wait.
    """
    if isinstance(stop, Timestamp) and stop.millis > time.time() * 1000:
        raise IntervalNotCompleteError(
            f"{task_id}: the run's partition {key!r} ends at {stop}, after now: its records are "
            "still being written, and reading it now would leave out the rest of it. Schedule "
            "the DAG with CronPartitionTimetable(..., run_offset=-1), so that each run reads the "
            "partition that has just ended, or trigger past partitions only.", {})


def _announcements(events: Any) -> list[Announcement]:
    """The interval announcements among a run's triggering asset events (its context's
    ``triggering_asset_events``: events by asset and by alias, so each may come twice)."""
    if not isinstance(events, Mapping):
        return []
    found: dict[str, Announcement] = {}
    for listed in events.values():
        for event in listed or ():
            extra = getattr(event, "extra", None) or {}
            if not isinstance(extra, Mapping) or not extra.get("from_trigger"):
                continue
            announcement = Announcement.from_payload(extra.get("payload"))
            if announcement is not None:
                found[json.dumps(announcement.to_payload(), sort_keys=True)] = announcement
    return list(found.values())
