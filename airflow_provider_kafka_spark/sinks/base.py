"""The :class:`Sink` protocol: how the ingest hands its records to a destination, and
:class:`RunInfo`, what an orchestrator tells a sink of the run it writes for."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

from airflow_provider_kafka_spark.naming import Dataset
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.spark.intake import Intake, SinkInput

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KafkaConfig = Mapping[str, Any] | Callable[[], Mapping[str, Any]]
"""A cluster's librdkafka config, or a function returning it (called when it is needed, e.g.
``hooks.KafkaConnection("kafka_default")``, which reads an Airflow connection then)."""


def kafka_config_of(config: KafkaConfig) -> Mapping[str, Any]:
    """The config itself: ``config``, or what calling it returns."""
    return config() if callable(config) else config


@dataclass(frozen=True)
class RunInfo:
    """What the ingest operator knows of the run a sink writes for; each sink takes from it the
    defaults of what it was not given (:meth:`Sink.for_run`).

    :param dag_id: the DAG.
    :param task_id: the ingest task.
    :param run_id: the dag run's id.
    :param partition_key: a partitioned run's key (Airflow 3.3), else None.
    :param ranges: the run's pinned offset ranges.
    :param map_index: the task's map index, -1 when not mapped.
    :param generation: which processing of the run this is (the operator's
        ``run_generation``): a reprocessing of the run (a clear) has another.
    :param ledger_since: no attempt of the run's write began before this moment (or None).
    :param kafka_config: the input cluster's config, for a sink that writes to Kafka without
        a config of its own.
    :param properties: string properties a commit records (the Airflow ids).
    """

    dag_id: str
    task_id: str
    run_id: str
    ranges: OffsetRanges
    map_index: int = -1
    generation: int | str = 0
    ledger_since: datetime | None = None
    kafka_config: KafkaConfig = field(default_factory=dict, repr=False)
    properties: Mapping[str, str] = field(default_factory=dict)
    partition_key: str | None = None

    @property
    def application(self) -> str:
        """``<dag_id>.<task_id>``: the default name of the application that writes."""
        return f"{self.dag_id}.{self.task_id}"

    @property
    def run_key(self) -> str:
        """The run as the writes name it: ``partition=<partition_key>`` in a partitioned run,
        else the run id. (Airflow 3.3 reprocesses a partition as a new run, beside the old
        one: its writes are those of the same run, so a Kafka write skips what the first
        wrote and a table commit replaces its rows.)"""
        return f"partition={self.partition_key}" if self.partition_key else self.run_id

    @property
    def run(self) -> str:
        """:attr:`run_key`, and ``#<map index>`` for a mapped task."""
        return self.run_key if self.map_index < 0 else f"{self.run_key}#{self.map_index}"


class Sink(ABC):
    """One destination of a bounded read, in four steps, like Spark's own ``DataSourceWriter``
    (driver-side setup and commit around the tasks' write)::

        sink.prepare(spark, shaped)   # on the driver, before anything is read
        sink.intake(given)            # ingest asks once: how the sink takes the records
        sink.write(df, dead_letters)  # the Spark job (dead_letters: undecodable records or None)
        sink.commit(manifest)         # on the driver: make the write visible
        sink.abort()                  # instead of commit, after any failure

    * :meth:`prepare` checks everything that can be checked without the records (the
      output's schema from ``shaped``, an empty DataFrame with it; formats; locations) and
      raises :class:`ConfigurationError` before anything is read or written. It may set up
      private state (the file sink's staging folder), never visible output.
    * :meth:`intake` answers, once, how the sink takes the records ``ingest`` describes
      (:class:`~airflow_provider_kafka_spark.spark.intake.SinkInput`): Spark rows through
      :meth:`write` (the default), Parquet files the readers land in a folder the sink names,
      or rows with the readers' split ends; and whether the write is staged until
      :meth:`commit` and the statistics known only after it
      (:class:`~airflow_provider_kafka_spark.spark.intake.Intake`).
    * :meth:`write` runs the Spark job and returns the JSON-ready description of the output
      (:meth:`describe` plus what the write reports). ``dead_letters`` (the records that
      could not be decoded: ``key``, ``value`` as read, ``topic``, ``partition``, ``offset``,
      ``timestamp``, ``headers``, ``error``) go to the sink's dead-letter output, published
      and committed together with the output.
    * :meth:`commit` publishes the write with the run's ``manifest`` (ranges and statistics);
      what it returns (a mapping, or None) is added to the output's description.
    * :meth:`abort` undoes what :meth:`prepare` and :meth:`write` left behind, as far as the
      sink can; it never raises (it runs while another exception propagates).

    A sink is used once: build a new one for each write. Every sink satisfies
    :class:`~airflow_provider_kafka_spark.spark.ingest.SinkProtocol`, what
    :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` takes.

    **In the ingest operator** a sink is a value of the DAG (``sink=FileSink(...)``): its
    :attr:`template_fields` are rendered by Airflow, then :meth:`for_run` gives the sink of
    the run (defaults filled in from :class:`RunInfo`, every argument checked again once
    rendered), and :meth:`dataset` names the output for lineage and the output asset.
    """

    template_fields: Sequence[str] = ()
    """The attributes Airflow renders when the sink is an operator's argument."""

    def for_run(self, run: RunInfo) -> Self:
        """This sink for ``run``: a copy with the defaults of what it was not given taken from
        ``run``, and its (rendered) arguments checked. The copy is the one that writes.

        Raises:
            ConfigurationError: an argument that is not valid once rendered.
        """
        return copy.copy(self)

    def dataset(self, location: str | None = None) -> Dataset | None:
        """The output as an OpenLineage dataset ``(namespace, name)``
        (:mod:`~airflow_provider_kafka_spark.naming`), or None when it has no name there;
        ``location`` is where the write reported its files (a table's location)."""
        return None

    def accepts_dead_letters(self, wanted: bool) -> None:  # noqa: B027
        """Check that the sink can take undecodable records (``wanted``:
        ``on_corrupt="dead_letter"``), or that it was not given a dead-letter output for
        nothing.

        Raises:
            ConfigurationError: the sink has no dead-letter output, or needs to be told it.
        """

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The JSON-ready description of the output before anything ran (for XCom)."""

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:  # noqa: B027
        """Checks before the read; ``shaped`` has the output's schema and no rows."""

    def intake(self, given: SinkInput) -> Intake:
        """Right after :meth:`prepare`, before the read: how this sink takes the records
        ``given`` describes. The default: Spark rows through :meth:`write`, visible as
        written, the statistics known after the write (``Intake()``).

        Raises:
            ConfigurationError: the sink cannot take these records; nothing was read.
        """
        return Intake()

    @abstractmethod
    def write(self, df: DataFrame, dead_letters: DataFrame | None = None) -> dict[str, Any]:
        """Write ``df`` (and ``dead_letters``); return :meth:`describe` completed with the
        write's results."""

    def commit(self, manifest: Mapping[str, Any]) -> Mapping[str, Any] | None:  # noqa: B027
        """Make the write visible, with the run's manifest; optionally return what the
        commit adds to the output's description (a table sink writes in its commit)."""

    def abort(self) -> None:  # noqa: B027
        """Undo what :meth:`prepare` and :meth:`write` left behind; never raises."""
