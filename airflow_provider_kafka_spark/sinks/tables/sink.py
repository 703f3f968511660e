"""The :class:`TableSink` steps shared by the Iceberg and the Delta sink, and
the check of the output's columns against the table's.

One run is one table commit. ``prepare`` checks the runtime, the table and the schema before
anything is read; ``intake`` has the readers land the records (as read, or decoded by the
readers, shaped by ``ingest``'s ``shape``) as the table's own Parquet files where the format
says the table can take them (``landing_folder``: also a partitioned table, the readers
splitting the files by its partition values), else ``write`` only takes the DataFrame;
``commit`` (which has the run's ranges) reads the application's newest commits (its offsets so
far, and the table's newest commit: the *head*), looks for the run's rows in the table as of
the head, and then either writes nothing (this write is already there: an earlier try
committed it) or writes the rows (or adds the landed files: ``commit_files``) and removes the
run's earlier rows (a reprocessing, or other ranges) in **one** commit that records the run
and the application's offsets (:mod:`~airflow_provider_kafka_spark.sinks.tables.commits`). A
commit that conflicts with a concurrent one is tried again from the reading, up to
``max_commit_attempts`` times.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import time
import uuid
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from airflow_provider_kafka_spark.arguments import checkable
from airflow_provider_kafka_spark.causes import classify
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    KafkaSparkError,
    TableError,
    error_line,
    kafka_errors,
)
from airflow_provider_kafka_spark.naming import Dataset, dataset_of_path
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.options import bad_argument, check_bool, check_positive_int, check_text
from airflow_provider_kafka_spark.s3 import S3Settings, split_s3
from airflow_provider_kafka_spark.sinks.base import RunInfo, Sink
from airflow_provider_kafka_spark.sinks.tables.columns import check_columns, in_table_order
from airflow_provider_kafka_spark.sinks.tables.commits import (
    WRITE_COLUMN,
    ApplicationState,
    CommitRecord,
    application_offsets,
    merged,
    run_prefix,
    write_id,
)
from airflow_provider_kafka_spark.spark.intake import Intake, LandedParquet, SinkInput, SparkRows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from airflow_provider_kafka_spark.spark.read.landing import LandedFile, ParquetFolder

log = logging.getLogger(__name__)

Key = tuple[str, int]


@dataclass(frozen=True)
class LandingPlan:
    """How the readers land a run as data files of a table (:meth:`TableSink.landing_folder`):
    ``uri``, the table's data folder as the table names its files; the Parquet ``codec``; the
    ``s3`` settings for a folder on S3; for a partitioned table either ``partition_by`` (Delta:
    the partition columns, whose values name hive folders and are left out of the files) or
    ``split_by`` (Iceberg: ``(field name, source column, transform)`` of the partition spec;
    the files keep the column), as :class:`~airflow_provider_kafka_spark.spark.read.landing.
    ParquetFolder` takes them."""

    uri: str
    codec: str
    s3: S3Settings | None = None
    partition_by: tuple[str, ...] = ()
    split_by: tuple[tuple[str, str, str], ...] = ()


class TableSink(Sink):
    """A table of a lakehouse format, written exactly once per run (subclasses:
    :class:`~airflow_provider_kafka_spark.sinks.tables.IcebergSink`,
    :class:`~airflow_provider_kafka_spark.sinks.tables.DeltaSink`).

    :param table: the table's name in the session (``catalog.namespace.table``), or a Delta
        table's path; templated in the ingest operator.
    :param application: who writes: the name commits record and the ``table`` start spec looks
        for (the ingest operator's default: ``<dag_id>.<task_id>``).
    :param run: which run writes (the operator: the dag run id, and ``#<map index>`` for a
        mapped task). A try of a run whose write is already in the table writes nothing.
        Required, like ``application``, unless the ingest operator fills it in.
    :param generation: which processing of the run this is (a whole number >= 0, or a token
        without spaces): change it to reprocess the run on purpose, and its rows are replaced in
        one commit. The operator passes the dag run's clear number and start
        (:func:`~airflow_provider_kafka_spark.operators.sink_run.run_generation`), so a cleared
        run, a run Airflow created again under the same run id, or a backfill with
        ``--reprocess-behavior completed`` replaces its rows; a retry does not. None: 0, or in
        the operator the run's. A ``run`` or ``generation`` given to the operator's sink wins.
    :param schema_evolution: add the output's columns that the table lacks (else such a column
        is a ConfigurationError before the read).
    :param commit_properties: more string properties each commit records (e.g. the Airflow
        ids), under the ``kafka-spark.`` prefix.
    :param max_commit_attempts: how often a commit that conflicts with a concurrent one is
        tried again.
    """

    format_name = ""
    """``iceberg`` or ``delta``."""

    template_fields: Sequence[str] = ("table",)

    def __init__(self, table: str, *, application: str | None = None, run: str | None = None,
                 generation: int | str | None = None, schema_evolution: bool = False,
                 commit_properties: Mapping[str, str] | None = None,
                 max_commit_attempts: int = 5) -> None:
        owner = type(self).__name__
        if checkable(table, rendered=False):
            check_text(owner, "table", table, meaning=self._table_meaning())
        check_text(owner, "application", application, allow_none=True,
                   meaning="the name this application's commits record, e.g. 'orders.ingest'")
        check_text(owner, "run", run, allow_none=True,
                   meaning="the run's id, e.g. the dag run id")
        if not (generation is None or (type(generation) is int and generation >= 0)
                or (isinstance(generation, str) and generation
                    and not any(c.isspace() for c in generation))):
            raise bad_argument(owner, "generation", generation,
                               "pass a whole number >= 0 (0, then one more per reprocessing) "
                               "or a token without spaces")
        check_bool(owner, "schema_evolution", schema_evolution)
        if commit_properties is not None and (
                not isinstance(commit_properties, Mapping)
                or not all(isinstance(k, str) and isinstance(v, str)
                           for k, v in commit_properties.items())):
            raise bad_argument(owner, "commit_properties", commit_properties,
                               "pass a mapping of strings to strings, or None")
        check_positive_int(owner, "max_commit_attempts", max_commit_attempts,
                           meaning="how often a conflicting commit is tried", example=5)
        self.table = table.strip()
        self.application = application.strip() if application else None
        self.run = run.strip() if run else None
        self.generation = generation
        self.schema_evolution = schema_evolution
        self.commit_properties = dict(commit_properties or {})
        self.max_commit_attempts = max_commit_attempts
        self.location: str | None = None  # the table's location, once prepared
        self._spark: SparkSession | None = None
        self._df: DataFrame | None = None
        self._schema: StructType | None = None
        self._head: str | None = None  # the table's newest commit when the run was looked up
        self._output: StructType | None = None  # the output's schema, once prepared
        self._landing: ParquetFolder | None = None  # where the readers land the run's files
        self._landing_uri = ""  # that folder, as the table names its files
        self._landed: list[LandedFile] | None = None  # the landed files, once adopted
        self._commit_tried = False  # whether a commit of the landed files was tried
        # the table's newest commit and the run's writes in it, as the intake looked them up
        self._looked_up: tuple[str | None, frozenset[str]] | None = None

    @classmethod
    def _table_meaning(cls) -> str:
        return "the table's name, e.g. 'lake.db.orders'"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.table!r}, application={self.application!r}, "
                f"schema_evolution={self.schema_evolution!r})")

    def for_run(self, run: RunInfo) -> Self:
        """The sink of ``run``: the application (default ``<dag_id>.<task_id>``), the run,
        its generation, and the Airflow ids as commit properties."""
        check_text(type(self).__name__, "table", self.table, meaning=self._table_meaning())
        return type(self)(self.table, application=self.application or run.application,
                          run=self.run or run.run,
                          generation=run.generation if self.generation is None
                          else self.generation,
                          schema_evolution=self.schema_evolution,
                          commit_properties={**run.properties, **self.commit_properties},
                          max_commit_attempts=self.max_commit_attempts)

    def recorded_offsets(self, spark: SparkSession) -> dict[tuple[str, int], int]:
        """The stops this sink's application recorded in the table: ``{(topic, partition):
        offset}`` for the ``table`` start spec (``resolve_offsets(..., starting="table",
        table_offsets=...)``; partitions it never wrote are absent). Reads the commits since
        the application's newest one, not the table's history.

        Raises:
            TableRuntimeError, ConfigurationError: no application, or the format's runtime,
                the catalog or the table is missing, or the table is of the other format.
        """
        owner = type(self).__name__
        check_text(owner, "table", self.table, meaning=self._table_meaning())
        check_text(owner, "application", self.application,
                   meaning="the application whose commits to read, e.g. 'orders.ingest'")
        self.check_runtime(spark)
        self.table_schema(spark)
        self.refresh(spark)
        return self.application_state(spark).offsets

    def dataset(self, location: str | None = None) -> Dataset:
        """Where the table's files are (``location``, as the write found it), else a Delta
        table's path, else ``<format>:<table name>``, as a dataset."""
        return dataset_of_path(location or self.location or self._default_location())

    def _default_location(self) -> str:
        return f"{self.format_name}:{self.table}"

    def accepts_dead_letters(self, wanted: bool) -> None:
        """A table has no dead-letter output.

        Raises:
            ConfigurationError: ``wanted``.
        """
        if wanted:
            raise bad_argument(type(self).__name__, "on_corrupt", "dead_letter",
                               "a table sink has no dead-letter output; pass 'fail' or 'skip'",
                               problem="does not apply to a table")

    def describe(self) -> dict[str, Any]:
        """``{"table", "format", "location", "application", "run", "write_id": None,
        "records_written": 0, "committed": False, "skipped": False, "landed": False}``
        (``commit`` completes it: ``landed`` says whether the commit added the readers' own
        files; ``location`` is None before ``prepare``)."""
        return {"table": self.table, "format": self.format_name, "location": self.location,
                "application": self.application, "run": self.run, "write_id": None,
                "records_written": 0, "committed": False, "skipped": False, "landed": False}

    # -- the steps -----------------------------------------------------------------------

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:
        """Check the format's runtime, that the table exists and is of this format, and that
        ``shaped``'s columns fit it; then add the sink's column :data:`WRITE_COLUMN` to the
        table when it lacks it (the only change before the commit).

        Raises:
            TableRuntimeError: the format's runtime is missing or built for another Spark.
            ConfigurationError: an unknown catalog or table, a table of another format, a
                column the table lacks (without ``schema_evolution``) or of another type.
        """
        if self.application is None or self.run is None:
            raise ConfigurationError(
                f"{type(self).__name__}({self.table!r}): pass application= and run= (who "
                "writes, and which run: the ingest operator fills them in). Nothing was read "
                "or written.")
        self._spark = spark
        self.check_runtime(spark)
        schema = self.table_schema(spark)
        check_columns(type(self).__name__, self.table, shaped.schema, schema,
                       self.schema_evolution)
        for attempt in range(1, 4):  # another writer may be adding the column right now
            try:
                self.ensure_write_column(spark, schema)
                break
            except Exception as exc:
                refused = store_failure(type(self).__name__, f"add the column {WRITE_COLUMN} to "
                                        f"{self.table}", exc)
                if isinstance(refused, ConfigurationError):
                    raise refused from exc
                if attempt == 3:
                    raise TableError(
                        f"{type(self).__name__}: could not add the column {WRITE_COLUMN} to "
                        f"{self.table}: {error_line(exc)}. Nothing was read or written; retry, "
                        f"or add it yourself (ALTER TABLE ... ADD COLUMNS ({WRITE_COLUMN} "
                        "STRING)).") from exc
                time.sleep(0.5 * attempt)
                schema = self.table_schema(spark)
        self._schema = schema if WRITE_COLUMN in schema.names else self.table_schema(spark)
        self.location = self.table_location(spark)
        self._output = shaped.schema

    def intake(self, given: SinkInput) -> Intake:
        """The readers' files, when the native readers hand on the records (as read, or
        decoded by themselves: :attr:`SinkInput.native_rows`; shaped by ``given.shape``, which
        they apply) and the table can take the output's columns as the readers write them
        (:meth:`landing_folder`; a partitioned table too: the readers split the files by its
        partition values, and each file's values go into the commit): they land in a folder of
        their own under the table's data folder with the write id in :data:`WRITE_COLUMN`, and
        :meth:`commit` adds exactly those files. Otherwise Spark rows, staged: :meth:`write`
        only keeps them and :meth:`commit` writes them in the run's one table commit, so the
        statistics are known after the commit.

        Raises:
            ConfigurationError: ``given.dead_letters``: a table has no dead-letter output
                (nothing was read).
        """
        if given.dead_letters:
            raise ConfigurationError(
                f"{type(self).__name__}({self.table!r}): a table sink takes no dead letters; "
                "ingest with on_corrupt='fail' or 'skip'. Nothing was read or written.")
        rows = Intake(SparkRows(), staged=True, statistics_after_commit=True)
        if not (given.native_rows and given.ranges is not None and self._spark is not None
                and self._output is not None):
            return rows
        assert self.application is not None and self.run is not None  # checked in prepare()
        wid = write_id(self.application, self.run, self.generation or 0, given.ranges)
        plan = self.landing_folder(self._spark, self._output)
        if plan is None:
            return rows
        made = set() if given.shape is None else set(given.shape.names())
        if not set(plan.partition_by) <= made:
            log.info("%s: the run's records go into %s through Spark's writer, not as the "
                     "readers' files: its partition columns %s are not columns the run's "
                     "shape makes.", type(self).__name__, self.table,
                     ", ".join(plan.partition_by))
            return rows
        if not self.lands_replacing:  # the format cannot drop earlier files in the commit
            with kafka_errors():
                self.refresh(self._spark)
                head = self.application_state(self._spark).head
                present = self.writes_of_run(self._spark, head)
            self._looked_up = (head, frozenset(present))
            if present:
                log.info("%s: run %r has rows in %s already (%s): its commit goes through "
                         "Spark's writer.", type(self).__name__, self.run, self.table,
                         ", ".join(sorted(present)))
                return rows
        from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder

        table_uri, s3 = plan.uri, plan.s3
        name = f"kafka-spark-{uuid.uuid4().hex}"
        if s3 is not None:
            bucket, prefix = split_s3(table_uri)
            path = f"s3://{bucket}/{prefix}/{name}" if prefix else f"s3://{bucket}/{name}"
        else:
            path = os.path.join(table_uri.removeprefix("file://").removeprefix("file:"), name)
            os.makedirs(path, exist_ok=True)
        self._landing = ParquetFolder(path, plan.codec, s3, ((WRITE_COLUMN, wid),),
                                      shape=given.shape, partition_by=plan.partition_by,
                                      split_by=plan.split_by)
        self._landing_uri = f"{table_uri.rstrip('/')}/{name}"
        return Intake(LandedParquet(self._landing, self._adopt), staged=True)

    def _adopt(self, files: Sequence[LandedFile]) -> dict[str, Any]:
        """The readers' files (in the landing folder) are the run's output."""
        self._landed = list(files)
        return self.describe()

    def _forget_landed(self) -> None:
        """Delete the landed files, unless a commit of them was tried (it may have landed).
        Files the readers landed but ingest never adopted (a corrupt record failed the
        ingest, or the read failed) are in the attempt's own local folder, which goes whole; on
        S3 they are left to the format's orphan clean-up."""
        if self._landing is not None and self._landed is None and not self._commit_tried \
                and self._landing.s3 is None:
            shutil.rmtree(self._landing.path, ignore_errors=True)
        if self._landing is not None and self._landed and not self._commit_tried:
            try:
                self._landing.remove(f.name for f in self._landed)
                if self._landing.s3 is None:  # the attempt's own folder, empty now
                    with contextlib.suppress(OSError):
                        os.rmdir(self._landing.path)
            except Exception as exc:  # noqa: BLE001  # left for the format's orphan clean-up
                log.warning("%s: could not delete the %d landed file(s) in %s: %s",
                            type(self).__name__, len(self._landed), self._landing.path,
                            error_line(exc))
        self._landed = None

    def write(self, df: DataFrame, dead_letters: DataFrame | None = None) -> dict[str, Any]:
        """Keep ``df`` for :meth:`commit`, which writes it in the run's one table commit."""
        if dead_letters is not None:
            raise ConfigurationError(
                f"{type(self).__name__}: a table sink takes no dead letters; ingest with "
                "on_corrupt='fail' or 'skip'. Nothing was written.")
        self._forget_landed()  # files the readers landed before ingest took Spark's path
        self._df = in_table_order(df, self._schema)
        return self.describe()

    def commit(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Write the run's rows in one table commit recording ``manifest["ranges"]`` (or,
        when this write is already in the table, nothing); what the commit did:
        ``{"write_id", "committed", "skipped", "commit", "records_written", "replaced",
        "landed"}``.

        Raises:
            TableError: the commit kept conflicting with concurrent commits, or failed.
        """
        if self._spark is None or (self._df is None and self._landed is None):
            raise TableError(f"{type(self).__name__}: commit() before prepare() and write().")
        assert self.application is not None and self.run is not None  # checked in prepare()
        ranges = OffsetRanges.from_json(manifest["ranges"])
        wid = write_id(self.application, self.run, self.generation or 0, ranges)
        extra = {k: str(v) for k, v in self.commit_properties.items()}
        for attempt in range(1, self.max_commit_attempts + 1):
            with kafka_errors():
                self.refresh(self._spark)
                state = self.application_state(self._spark)
                if self._looked_up is not None and state.head is not None and \
                        self._looked_up[0] == state.head:  # no commit since the intake's
                    present = set(self._looked_up[1])
                else:
                    present = self.writes_of_run(self._spark, state.head)
                self._looked_up = None
            if wid in present:
                log.info("%s: the write %s of run %r is already in %s; nothing written.",
                         type(self).__name__, wid, self.run, self.table)
                self._forget_landed()
                return {"write_id": wid, "committed": False, "skipped": True, "commit": None,
                        "records_written": 0, "replaced": [], "landed": False}
            self._head = state.head
            record = CommitRecord(self.application, self.run, wid,
                                  tuple((r.topic, r.partition, r.start, r.stop) for r in ranges),
                                  merged(state.offsets, ranges), state.newest, extra)
            if self._landed is not None and present and not self.lands_replacing:
                self._forget_landed()
                raise TableError(
                    f"{type(self).__name__}: another write of run {self.run!r} "
                    f"({', '.join(sorted(present))}) was committed to {self.table} while this "
                    "one was read; nothing was committed. Retry the task: it replaces that "
                    "write in one commit.")
            try:
                with kafka_errors():
                    if self._landed is not None:
                        self._commit_tried = True
                        done = self.commit_files(self._spark, self._landing_uri, self._landed,
                                                 sorted(present), record)
                    else:
                        assert self._df is not None
                        done = self.commit_rows(self._spark, self._df, sorted(present), record)
            except Exception as exc:
                if not self.is_conflict(exc) or attempt == self.max_commit_attempts:
                    if isinstance(exc, KafkaSparkError):
                        raise
                    refused = store_failure(
                        type(self).__name__, f"commit run {self.run!r} to {self.table}", exc,
                        after="The table is as it was.")
                    if isinstance(refused, ConfigurationError):
                        raise refused from exc
                    raise TableError(
                        f"{type(self).__name__}: the commit of run {self.run!r} to {self.table} "
                        f"failed (attempt {attempt} of {self.max_commit_attempts}): "
                        f"{error_line(exc)}. The table is as it was; retry the task.") from exc
                pause = min(8.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random())
                log.warning("%s: the commit to %s conflicted with a concurrent one (%s); "
                            "trying again in %.1fs.", type(self).__name__, self.table,
                            error_line(exc), pause)
                time.sleep(pause)
                continue
            replaced = sorted(present)
            log.info("%s: committed %s record(s) of run %r to %s (commit %s)%s.",
                     type(self).__name__, done.get("records_written"), self.run, self.table,
                     done.get("commit"),
                     f", replacing the run's earlier write(s) {replaced}" if replaced else "")
            return {"write_id": wid, "committed": True, "skipped": False, **done,
                    "replaced": replaced, "landed": self._landed is not None}
        raise AssertionError("unreachable")

    def abort(self) -> None:
        """Nothing to undo: the run's rows become visible only with its one commit. The
        readers' files are deleted unless their commit was tried; data files a failed commit
        left are not part of the table (the format's orphan-file clean-up removes them)."""
        self._df = None
        self._forget_landed()

    # -- what the formats do -------------------------------------------------------------

    def writes_of_run(self, spark: SparkSession, head: str | None = None) -> set[str]:
        """The write ids of this run found in the table's rows (as of the commit ``head``
        where the format reads older commits; None: the newest)."""
        from pyspark.sql import functions as F

        prefix = run_prefix(self.application, self.run)
        rows = (self.read_table(spark, head).where(F.col(WRITE_COLUMN).startswith(prefix))
                .select(WRITE_COLUMN).distinct().collect())
        return {row[0] for row in rows}

    def refresh(self, spark: SparkSession) -> None:  # noqa: B027
        """Make the session see the table's newest commit (a format that caches tables drops
        its cached copy)."""

    def application_state(self, spark: SparkSession) -> ApplicationState:
        """The application's recorded stops and newest commit (see ``commits``)."""
        with kafka_errors():
            return application_offsets(self.commits(spark), self.application)

    @abstractmethod
    def check_runtime(self, spark: SparkSession) -> None:
        """Raise TableRuntimeError unless the session can write this format."""

    @abstractmethod
    def table_schema(self, spark: SparkSession) -> StructType:
        """The table's schema, once it is known to exist and be of this format."""

    @abstractmethod
    def ensure_write_column(self, spark: SparkSession, schema: StructType) -> None:
        """Add :data:`WRITE_COLUMN` (and what the format needs for it) when missing."""

    @abstractmethod
    def table_location(self, spark: SparkSession) -> str | None:
        """Where the table's files are (a path or URI), for lineage and assets."""

    @abstractmethod
    def read_table(self, spark: SparkSession, head: str | None = None) -> DataFrame:
        """The table's rows: as of the commit ``head`` (a format that can), else the newest."""

    @abstractmethod
    def commits(self, spark: SparkSession) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
        """``(commit id, recorded properties)`` of the table's commits, newest first, lazily."""

    @abstractmethod
    def commit_rows(self, spark: SparkSession, df: DataFrame, replacing: list[str],
                    record: CommitRecord) -> dict[str, Any]:
        """One commit: ``df`` with :data:`WRITE_COLUMN` = ``record.write_id`` added, the rows
        of the writes ``replacing`` removed, ``record`` recorded; ``{"commit",
        "records_written"}``. Fails (without committing) when a concurrent commit since the
        head the look-up read (``self._head``) wrote rows of these writes."""

    lands_replacing = True
    """Whether :meth:`commit_files` can drop a run's earlier files in the same commit (else a
    run with earlier writes is committed by :meth:`commit_rows`)."""

    def landing_folder(self, spark: SparkSession, output: StructType) -> LandingPlan | None:
        """Where and how the readers can land a run whose files hold ``output``'s columns
        (the records as read, or decoded and shaped) as data files of the table
        (:class:`LandingPlan`); None (the reason logged) when the table cannot take them as
        written (e.g. a partitioning the readers do not compute, sorted, another file format
        or column type): its commit then goes through Spark's writer."""
        found = self._landing_of(spark, output)
        if isinstance(found, str):
            log.info("%s: the run's records go into %s through Spark's writer, not as the "
                     "readers' files: %s.", type(self).__name__, self.table, found)
            return None
        return found

    def _landing_of(self, spark: SparkSession, output: StructType) -> LandingPlan | str:
        """:meth:`landing_folder`'s answer, or why not (a sentence for the log)."""
        return "the format has no commit of the readers' files"

    def commit_files(self, spark: SparkSession, folder: str, files: Sequence[LandedFile],
                     replacing: list[str], record: CommitRecord) -> dict[str, Any]:
        """One commit: the data files ``files`` of ``folder`` (the landing folder's URI as the
        table names its files; :data:`WRITE_COLUMN` = ``record.write_id`` in every row) added,
        with the statistics of the footers the readers reported (no file is read back), the
        rows of the writes ``replacing`` removed, ``record`` recorded; ``{"commit",
        "records_written"}``. Fails as :meth:`commit_rows`."""
        raise NotImplementedError(f"{type(self).__name__} does not commit landed files")

    @abstractmethod
    def is_conflict(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the format's "a concurrent commit came first"."""


_REFUSED = {
    "AccessDeniedException": "access is denied (or the credentials are wrong)",
    "Status Code: 403": "access is denied (or the credentials are wrong)",
    "InvalidAccessKeyId": "the access key is not known to the store",
    "SignatureDoesNotMatch": "the secret key is wrong",
    "UnknownStoreException": "the bucket does not exist",
    "NoSuchBucket": "the bucket does not exist",
}
"""What a table's store (S3 through S3A) answers when a retry cannot help, by a mark in the
Java exception's text (its class, or the S3 error code S3A quotes), and what it means."""

_UNREACHABLE = ("java.net.ConnectException", "java.net.UnknownHostException",
                "java.net.SocketTimeoutException", "ConnectTimeoutException",
                "Unable to execute HTTP request", "Status Code: 500", "Status Code: 503",
                "SlowDown", "ServiceUnavailable")
"""Marks of a store (or a catalog's database) that did not answer, or failed on its side."""


_NO_ANSWER = ("throttled", "server error", "timeout", "connection", "database", "I/O error")
"""The kinds of :func:`~airflow_provider_kafka_spark.causes.classify` that say a store or a
catalog's database did not answer (or failed on its side)."""


def store_failure(owner: str, doing: str, exc: BaseException, *,
                  after: str = "Nothing was read or written.") -> KafkaSparkError | None:
    """What ``exc``, raised while trying to ``doing`` (e.g. ``read the table s3a://b/t``), means
    when the table's store or catalog is at fault: a :class:`ConfigurationError` when a retry
    cannot help (access denied, wrong keys, a missing bucket), a :class:`TableError` when it may
    (the endpoint or the catalog's database did not answer, a server error, throttling, an I/O
    error: :func:`~airflow_provider_kafka_spark.causes.classify`); None for anything
    else (e.g. no table there), which the caller decides. ``after`` says what state things are
    in. The store's message is quoted; S3A's never holds a secret."""
    text = str(exc)
    for mark, meaning in _REFUSED.items():
        if mark in text:
            return ConfigurationError(
                f"{owner}: the store refused to {doing}: {meaning} ({error_line(exc, 300)}). "
                "Check the bucket, the credentials and their permissions (the session's "
                f"fs.s3a.* settings, per bucket as S3A reads them), then run again. {after}")
    cause = classify(exc)
    if any(mark in text for mark in _UNREACHABLE) or (
            cause.retryable and cause.kind in _NO_ANSWER):
        return TableError(
            f"{owner}: could not {doing}: the store did not answer ({error_line(exc, 300)}). "
            f"Check the endpoint and that the store is up; a retry may succeed. {after}")
    return None


def table_failure(owner: str, doing: str, exc: BaseException) -> KafkaSparkError:
    """What ``exc``, raised while trying to ``doing`` something that leaves the table as it was
    (a read of its metadata, a property change), means: :func:`store_failure`'s answer, else a
    :class:`TableError` (a retry may succeed)."""
    after = "The table is as it was."
    return store_failure(owner, doing, exc, after=after) or TableError(
        f"{owner}: could not {doing}: {error_line(exc)}. {after} Retry the task.")


def described(spark: SparkSession, identifier: str) -> dict[str, str]:
    """The table's ``DESCRIBE TABLE EXTENDED`` details (``Provider``, ``Location``, ``Name``...:
    the rows after ``# Detailed Table Information``, so a column of the same name is not
    taken for them). Reads the table's metadata only (no Spark job)."""
    details: dict[str, str] = {}
    seen = False
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {identifier}").collect():
        name = (row["col_name"] or "").strip()
        if name == "# Detailed Table Information":
            seen = True
        elif seen and name and not name.startswith("#"):
            details.setdefault(name, (row["data_type"] or "").strip())
    return details
