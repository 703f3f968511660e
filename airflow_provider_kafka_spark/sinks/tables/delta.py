"""The :class:`DeltaSink`: a Delta Lake table, by path (``/data/orders``, ``s3a://lake/orders``)
or by name in a catalog (``spark_catalog`` with Delta's ``DeltaCatalog``), checked and read
with Delta's own Spark module (``delta-spark``, session extension ``DeltaSparkSessionExtension``).

A run's commit is one version whose ``commitInfo.userMetadata`` is the record (a JSON object of
the ``kafka-spark.*`` properties), with the write id as Delta's transaction identifier
(``txnAppId`` = ``kafka-spark:<write id>``, ``txnVersion`` 1), so Delta itself refuses a second
commit of the same write (a commit racing it fails; one after it writes nothing). The version
comes one of two ways:

* **the readers' own files, committed by delta-rs** (:meth:`DeltaSink.landing_folder`,
  :meth:`DeltaSink.commit_files`): for records the native readers hand on (as read, or decoded
  by the readers; shaped by ``ingest``'s ``shape``; no transform or sql) of a run with no
  earlier rows in the table, into a table unpartitioned or partitioned by string, integer or
  boolean columns the shape makes (the readers write a ``col=value/`` folder per value, the
  partition columns left out of the files, as Spark's Delta writer does; each ``add`` action
  carries its file's ``partitionValues``), whose folder is local (on a classic session) or on
  S3, whose protocol asks nothing of an append (reader version 1; writer version <= 2, or the
  features of :data:`LANDING_WRITER_FEATURES`; no column mapping, CHECK constraint, invariant,
  generated or identity column) and whose columns are exactly the readers' (same names, same
  types, nullable; the other columns nullable), the readers write one Parquet file per split
  into
  ``<table folder>/kafka-spark-<uuid>/`` with Spark's Parquet codec and the write id in every
  row, and one delta-rs append adds exactly those files (Delta statistics from their footers).
  delta-rs checks the transaction identifier itself only against concurrent commits, so the
  sink checks the table's first; on S3 delta-rs writes the version's log file with a
  conditional PUT (``If-None-Match``);
* **Spark's writer** (:meth:`DeltaSink.commit_rows`) for everything else: an append, or, when
  the look-up found earlier rows of the run (a reprocessing), an ``overwrite`` with
  ``replaceWhere "_kafka_spark_write IN (...)"``: the new files added and the replaced rows
  removed in one version (delta-rs's append cannot remove them), and a concurrent commit over
  the same rows fails it (``Concurrent*Exception``); the sink tries it again.

On S3, Spark's log store writes a version with an existence check and a plain PUT, so this
process makes its commits to one table (Spark's and delta-rs's) one at a time: a delta-rs
commit between Spark's check and PUT would be overwritten.

Delta keeps a transaction identifier per write in the table's state: set the table property
``delta.setTransactionRetentionDuration`` (e.g. ``interval 30 days``) so that they expire (the
sink's own check reads the rows, so it does not need them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_provider_kafka_spark.causes import classify
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    TableError,
    TableRuntimeError,
    error_line,
)
from airflow_provider_kafka_spark.s3 import S3Settings, is_s3, settings_of_spark, split_s3
from airflow_provider_kafka_spark.sinks.tables.commits import PREFIX, WRITE_COLUMN, CommitRecord
from airflow_provider_kafka_spark.sinks.tables.delta_files import (
    STATS_TYPES,
    DeltaTarget,
    delta_stats,
    indexed_columns,
)
from airflow_provider_kafka_spark.sinks.tables.sink import TableSink, described, store_failure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from airflow_provider_kafka_spark.sinks.tables.sink import LandingPlan
    from airflow_provider_kafka_spark.spark.read.landing import LandedFile

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DELTA_SPARK_VERSIONS = ("4.0", "4.1", "4.2")
"""The Spark versions Delta 4.4 publishes ``delta-spark_<v>_2.13`` for."""
_PAGES = (16, 256, None)
_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException",
              "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
              "ConcurrentWriteException", "MetadataChangedException", "ProtocolChangedException",
              "DELTA_CONCURRENT_",
              # delta-rs (CommitFailedError): the same transaction identifier committed first
              # ("Concurrent transaction failed"), or a concurrent change it cannot rebase onto
              "Concurrent transaction failed", "Commit failed: a concurrent transaction",
              "Metadata changed since last commit", "Protocol changed since last commit")
LANDING_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "checkConstraints",
                                     "changeDataFeed", "generatedColumns"})
"""The writer features (protocol version 7) of a table delta-rs commits the readers' files
to: an append needs nothing of them (no invariant, CHECK constraint or generated column may be
defined: checked apart). With writer version <= 2 (appendOnly, invariants) the same; versions
3-6 and other features (column mapping, identity columns, deletion vectors, row tracking...)
go through Spark's writer, as does a reader version above 1."""
CHECKPOINT_INTERVAL = 10
"""Delta's default ``delta.checkpointInterval`` (Spark's writer checkpoints every 10 versions;
delta-rs's own default is 100): a version delta-rs commits at a multiple of the table's
interval gets its checkpoint, as Spark's writer would write it."""
_LANDING_SCHEMES = ("file", "s3a", "s3")
"""Where the readers can land a table's files: local folders, and S3."""

def runtime_artifact(spark_version: str) -> str:
    """The Maven coordinates of Delta's Spark module for a Spark version."""
    minor = ".".join(spark_version.split(".")[:2])
    return f"io.delta:delta-spark_{minor}_2.13:4.4.0"


def is_path(table: str) -> bool:
    """Whether ``table`` is a path (a URI or an absolute path) rather than a table name."""
    return "/" in table or bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", table))


class DeltaSink(TableSink):
    """Write each run into the Delta table ``table`` (a path, or ``[catalog.]schema.table``)
    in one version recording the run and its offsets; see :class:`TableSink` for the
    arguments and ``docs/tables.md`` for the whole story."""

    format_name = "delta"

    @classmethod
    def _table_meaning(cls) -> str:
        return "the table's path or name, e.g. '/data/delta/orders' or 'db.orders'"

    def _default_location(self) -> str:
        return self.table if is_path(self.table) else super()._default_location()

    @property
    def identifier(self) -> str:
        """How Spark SQL names the table: ``delta.`<path>``` or the name."""
        return f"delta.`{self.table}`" if is_path(self.table) else self.table

    def check_runtime(self, spark: SparkSession) -> None:
        """Delta's session extension is configured (and ``DeltaCatalog`` for a table name),
        for a Spark version Delta 4.4 supports."""
        minor = ".".join(spark.version.split(".")[:2])
        if minor not in DELTA_SPARK_VERSIONS:
            raise TableRuntimeError(
                f"DeltaSink: this session runs Spark {spark.version}, for which Delta 4.4 "
                f"publishes no delta-spark (it has Spark {', '.join(DELTA_SPARK_VERSIONS)}). Run "
                f"the ingest on pyspark 4.1 or 4.2 with {runtime_artifact('4.1')} (README: "
                "'Tables'). Nothing was read or written.")
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        if DELTA_EXTENSION not in extensions:
            raise TableRuntimeError(
                f"DeltaSink: the session is not set up for Delta: put {runtime_artifact(spark.version)} "
                f"on the classpath and set spark.sql.extensions={DELTA_EXTENSION} (and "
                f"spark.sql.catalog.spark_catalog={DELTA_CATALOG} for tables by name). Nothing "
                "was read or written.")
        jars = " ".join(spark.conf.get(k, "") or "" for k in ("spark.jars", "spark.jars.packages"))
        found = re.findall(r"delta-spark_(\d+\.\d+)_", jars)
        if found and minor not in found:
            raise TableRuntimeError(
                f"DeltaSink: the session's delta-spark is built for Spark {found[0]}, but it "
                f"runs Spark {spark.version}; use {runtime_artifact(spark.version)}. Nothing was "
                "read or written.")
        if not is_path(self.table):
            catalog = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
            if catalog != DELTA_CATALOG and self.table.count(".") < 2:
                raise TableRuntimeError(
                    f"DeltaSink: table={self.table!r} is a name, but the session catalog is not "
                    f"Delta's: set spark.sql.catalog.spark_catalog={DELTA_CATALOG}, or pass the "
                    "table's path. Nothing was read or written.")

    def table_schema(self, spark: SparkSession) -> StructType:
        """The table's schema.

        Raises:
            ConfigurationError: no table there, or not a Delta table.
        """
        try:  # the table's metadata only: DESCRIBE DETAIL would build its whole file list
            details = described(spark, self.identifier)
        except Exception as exc:
            text = str(exc)
            if "ClassNotFound" in text or "NoClassDefFound" in text:
                raise TableRuntimeError(
                    f"DeltaSink: the session cannot load Delta's classes: put "
                    f"{runtime_artifact(spark.version)} on the classpath. Nothing was read or "
                    "written.") from exc
            failure = store_failure("DeltaSink", f"read the table {self.table}", exc)
            if failure is not None:  # the store's doing, not a missing table
                raise failure from exc
            cause = classify(exc)  # Delta's "no table there" is an AnalysisException: certain
            if cause.retryable:
                raise TableError(
                    f"DeltaSink: could not read the table {self.table!r}: {error_line(exc)}. "
                    f"{cause.says()} Nothing was read or written.") from exc
            where = "at the path" if is_path(self.table) else "named"
            raise ConfigurationError(
                f"DeltaSink: there is no Delta table {where} {self.table!r} "
                f"({error_line(exc)}). Create it first (CREATE TABLE ... USING delta "
                "[LOCATION '<path>']); the sink adds its column itself. Nothing was read or "
                "written.") from exc
        fmt = details.get("Provider", "").lower()
        name = details.get("Name", "")
        if is_path(self.table) and name.startswith("delta.`") and name.endswith("`"):
            self._location: str | None = name[len("delta.`"):-1]  # the path, qualified
        else:
            self._location = details.get("Location") or None
        if fmt != "delta":
            raise ConfigurationError(
                f"DeltaSink: {self.table!r} is a {fmt or 'non-Delta'} table, not a Delta table; "
                "write an Iceberg table with table_format='iceberg' / IcebergSink. Nothing was "
                "read or written.")
        return self.read_table(spark).schema

    def ensure_write_column(self, spark: SparkSession, schema: StructType) -> None:
        if WRITE_COLUMN not in schema.names:
            with _one_commit_on_s3(self.table_location(spark)):
                spark.sql(f"ALTER TABLE {self.identifier} ADD COLUMNS ({WRITE_COLUMN} STRING "
                          "COMMENT 'the write id of the commit that wrote the row "
                          "(airflow-provider-kafka-spark)')")

    def table_location(self, spark: SparkSession) -> str | None:
        """As ``DESCRIBE TABLE EXTENDED`` gave it when the table was checked."""
        return getattr(self, "_location", None)

    def read_table(self, spark: SparkSession, head: str | None = None) -> DataFrame:
        """The newest rows (``head`` is not needed: each version's own transaction checks
        decide the conflicts)."""
        if is_path(self.table):
            return spark.read.format("delta").load(self.table)
        return spark.table(self.table)

    def commits(self, spark: SparkSession) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
        """The table's versions, newest first, read in growing pages (``DESCRIBE HISTORY``)."""
        seen = 0
        for page in _PAGES:
            limit = "" if page is None else f" LIMIT {page}"
            rows = spark.sql(f"DESCRIBE HISTORY {self.identifier}{limit}").select(
                "version", "userMetadata").collect()
            for row in rows[seen:]:
                yield str(row["version"]), _properties(row["userMetadata"])
            seen = len(rows)
            if page is None or len(rows) < page:
                return

    def commit_rows(self, spark: SparkSession, df: DataFrame, replacing: list[str],
                    record: CommitRecord) -> dict[str, Any]:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        observed = Observation()  # the rows written, counted by the write itself
        rows = df.withColumn(WRITE_COLUMN, F.lit(record.write_id).cast("string")).observe(
            observed, F.count(F.lit(1)).alias("rows"))
        if replacing:  # a reprocessing: the run's earlier rows go in the same version
            ids = ", ".join(f"'{w}'" for w in [*replacing, record.write_id])  # URL-quoted: no '
            writer = (rows.write.format("delta").mode("overwrite")
                      .option("replaceWhere", f"{WRITE_COLUMN} IN ({ids})"))
        else:
            writer = rows.write.format("delta").mode("append")
        writer = (writer.option("userMetadata", json.dumps(record.to_properties(), sort_keys=True))
                  .option("txnAppId", f"kafka-spark:{record.write_id}")
                  .option("txnVersion", "1"))
        if self.schema_evolution:
            writer = writer.option("mergeSchema", "true")
        with _one_commit_on_s3(self.location), _session_commit(spark) as made:
            if is_path(self.table):
                writer.save(self.table)
            else:
                writer.saveAsTable(self.table)
        written = _rows(observed)
        if made.version is not None and written is not None:
            return {"commit": made.version, "records_written": written}
        # Another commit of this session ran meanwhile, Delta wrote nothing (its transaction
        # identifier says this write is in: an earlier commit of it had no rows), or the write
        # did not fill the observation: the version's own metrics say.
        for row in spark.sql(f"DESCRIBE HISTORY {self.identifier} LIMIT 16").select(
                "version", "userMetadata", "operationMetrics").collect():
            properties = _properties(row["userMetadata"]) or {}
            if properties.get(f"{PREFIX}write-id") == record.write_id:
                metrics = row["operationMetrics"] or {}
                return {"commit": str(row["version"]),
                        "records_written": int(metrics.get("numOutputRows", 0))}
        return {"commit": None, "records_written": 0}

    lands_replacing = False
    """delta-rs's append adds files; a run with earlier writes in the table (a reprocessing)
    goes through Spark's writer (``replaceWhere``)."""

    _delta: DeltaTarget | None = None  # where delta-rs commits the landed files, once found

    def _landing_of(self, spark: SparkSession, output: StructType) -> LandingPlan | str:
        """The table's folder (as prepare found it), the codec Spark's Delta writer uses
        (``spark.sql.parquet.compression.codec``, default snappy) and, for a table on S3, the
        session's S3A settings of its bucket. Why not, when delta-rs cannot commit the readers'
        files as they write them: a folder neither local (on a classic session) nor on S3, a
        codec the readers do not write, a partition column not of the output or not a string,
        integer or boolean, a protocol beyond reader version 1
        and the writer features :data:`LANDING_WRITER_FEATURES`, column mapping, CHECK
        constraints, invariants, generated or identity columns, an output column the table lacks
        by its exact name or has with another type (or NOT NULL), or a NOT NULL column the
        readers do not write."""
        from pyspark.sql.types import StringType, StructField, StructType

        from airflow_provider_kafka_spark.sinks.files.filesystems import is_connect_session
        from airflow_provider_kafka_spark.sinks.tables.sink import LandingPlan
        from airflow_provider_kafka_spark.spark.read.landing import PARQUET_CODECS

        root = (self.location or "").rstrip("/")
        scheme = urlsplit(root).scheme.lower()
        if not root or not (scheme in _LANDING_SCHEMES or (not scheme and root.startswith("/"))):
            return f"its folder {root or '(unknown)'} is neither local nor on S3"
        s3: S3Settings | None = None
        if scheme in ("s3a", "s3"):
            bucket, prefix = split_s3(root)
            s3 = settings_of_spark(spark, bucket)
            uri = f"s3://{bucket}/{prefix}".rstrip("/")
        elif is_connect_session(spark):
            return ("its folder is local to the Spark Connect server's machines, where this "
                    "process cannot write the table's log (delta-rs commits from here)")
        else:
            uri = urlsplit(root).path if scheme else root
        codec = (spark.conf.get("spark.sql.parquet.compression.codec", None)
                 or "snappy").lower()
        if codec not in PARQUET_CODECS:
            return f"its Parquet codec {codec} (spark.sql.parquet.compression.codec) is not one " \
                   "the readers write"
        try:
            table = _delta_table(uri, s3)
        except Exception as exc:  # noqa: BLE001  # Spark's writer can still write it
            return f"delta-rs cannot open it ({error_line(exc)})"
        metadata, protocol = table.metadata(), table.protocol()
        partitioned = tuple(metadata.partition_columns)
        output_types = {f.name: f.dataType.typeName() for f in output.fields}
        for column in partitioned:
            if output_types.get(column) not in _PARTITION_TYPES:
                return (f"the table is partitioned by {column}, which the output "
                        f"{'has as ' + output_types[column] if column in output_types else 'lacks'}"
                        " (the readers write partition values of strings, integers and booleans)")
        configuration = {k: v for k, v in metadata.configuration.items() if v is not None}
        schema = StructType.fromJson(json.loads(table.schema().to_json()))
        refused = _refused_protocol(protocol, configuration) or _refused_columns(schema)
        if refused:
            return refused
        written = [*output.fields, StructField(WRITE_COLUMN, StringType())]
        columns = {f.name: f for f in schema.fields}
        for wanted in written:
            column = columns.get(wanted.name)  # by the exact name: files map by name
            if column is None:
                return f"the table has no column named exactly {wanted.name}"
            if column.dataType != wanted.dataType:
                return (f"the column {wanted.name} is {column.dataType.simpleString()} in the "
                        f"table; the readers write {wanted.dataType.simpleString()}")
            if not column.nullable and wanted.nullable:
                return f"the column {wanted.name} is NOT NULL in the table"
        names = {f.name for f in written}
        for column in schema.fields:
            if not column.nullable and column.name not in names:
                return (f"the table's column {column.name} is NOT NULL and the readers do not "
                        "write it")
        indexed = indexed_columns(schema, configuration)
        if isinstance(indexed, str):
            return indexed
        flat = [f for f in written if f.dataType.typeName() not in ("array", "map", "struct")]
        flat = [f for f in flat if f.name not in partitioned]  # not in the files: no stats
        self._delta = DeltaTarget(
            root, uri, s3, configuration,
            null_counted=frozenset(f.name for f in flat if f.name in indexed),
            bounded=frozenset(f.name for f in flat if f.name in indexed
                              and f.dataType.typeName() in STATS_TYPES),
            partition_columns=partitioned)
        return LandingPlan(root, codec, s3, partition_by=partitioned)

    def commit_files(self, spark: SparkSession, folder: str, files: Sequence[LandedFile],
                     replacing: list[str], record: CommitRecord) -> dict[str, Any]:
        """One delta-rs append of ``files``: an add action each (its path relative to the
        table's folder, its size and time as the reader reported them, its Delta statistics
        from the footer the reader reported: ``numRecords``, and
        ``nullCount``/``minValues``/``maxValues`` of the indexed flat columns, timestamps in
        milliseconds as Delta writes them, the max rounded up), ``record`` as the version's
        ``userMetadata`` and the write id as its transaction identifier (``kafka-spark:<write
        id>``, version 1: delta-rs refuses a second commit of it that races this one,
        "Concurrent transaction failed", and this sink one after it; :meth:`is_conflict` takes
        both for a conflict, so the look-up runs again and finds the write). Commits to S3 go
        through delta-rs's conditional PUT of the version's log file."""
        from deltalake import CommitProperties
        from deltalake.transaction import AddAction, PostCommitHookProperties, Transaction

        target = self._delta
        folder = folder.rstrip("/")
        if target is None or replacing:  # lands_replacing is False: sink.py never asks that
            raise TableError("DeltaSink: commit_files() takes a landing folder and no earlier "
                             "writes to replace.")
        if not folder.startswith(f"{target.root}/"):
            raise TableError(f"DeltaSink: {folder} is not in the table's folder {target.root}.")
        relative = folder[len(target.root) + 1:]
        actions, records = [], 0
        for landed in files:
            footer = landed.metadata()
            if len(landed.partition) != len(target.partition_columns):
                raise TableError(f"DeltaSink: the landed file {landed.name} reports "
                                 f"{len(landed.partition)} partition value(s); {self.table} is "
                                 f"partitioned by {list(target.partition_columns)}.")
            values = dict(zip(target.partition_columns, landed.partition, strict=True))
            # the path as it is: delta-rs percent-encodes it in the log itself (a folder's
            # Spark escape, hour=a%3Ab, becomes hour=a%253Ab, which readers decode once)
            actions.append(AddAction(f"{relative}/{landed.name}", landed.size,
                                     values, landed.modified_ms, True,
                                     delta_stats(footer, target.null_counted, target.bounded)))
            records += footer.num_rows
        table = _delta_table(target.uri, target.s3)
        app_id = f"kafka-spark:{record.write_id}"
        if table.transaction_version(app_id) is not None:  # delta-rs checks only concurrent ones
            raise _AlreadyCommitted(f"DeltaSink: version {table.version()} of {self.table} "
                                    f"holds the transaction {app_id} already")
        with _one_commit_on_s3(target.root):
            table.create_write_transaction(
                actions, "append", table.schema(),
                commit_properties=CommitProperties(
                    custom_metadata={"userMetadata": json.dumps(record.to_properties(),
                                                                sort_keys=True)},
                    app_transactions=[Transaction(app_id, 1, int(time.time() * 1000))]),
                post_commithook_properties=PostCommitHookProperties(create_checkpoint=False))
        version = _version_of(table, record.write_id)
        interval = _whole(target.configuration.get("delta.checkpointInterval"),
                          CHECKPOINT_INTERVAL)
        if version > 0 and version % interval == 0:
            try:
                table.create_checkpoint()
            except Exception as exc:  # noqa: BLE001  # the next one checkpoints; readers replay
                log.warning("DeltaSink: committed version %s of %s, but could not write its "
                            "checkpoint: %s", version, self.table, error_line(exc))
        return {"commit": str(version), "records_written": records}

    def is_conflict(self, exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, _AlreadyCommitted) or any(s in text for s in _CONFLICTS)


class _AlreadyCommitted(Exception):
    """The table holds the write's transaction identifier already (a commit since the
    look-up): a conflict, so the look-up runs again, finds the write and writes nothing."""


def _version_of(table: Any, wid: str) -> int:
    """The version of ``table`` (delta-rs's, just committed to) that recorded the write
    ``wid``: its newest versions read in growing pages (concurrent commits may follow it)."""
    table.update_incremental()
    for page in _PAGES:
        history = table.history(page)
        for commit in history:
            if (_properties(commit.get("userMetadata")) or {}).get(f"{PREFIX}write-id") == wid:
                return int(commit["version"])
        if page is None or len(history) < page:
            break
    raise TableError(f"DeltaSink: the commit of the write {wid} is not in the table's history.")


def _delta_table(uri: str, s3: S3Settings | None) -> Any:
    """delta-rs's table at ``uri`` (its newest version), on S3 with ``s3``'s settings."""
    from deltalake import DeltaTable

    return DeltaTable(uri, storage_options=None if s3 is None else s3.object_store_options())


def _whole(value: str | None, default: int) -> int:
    """A table property's whole number (``default`` when unset or not a number)."""
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


_PARTITION_TYPES = ("string", "integer", "long", "short", "byte", "boolean")
"""The types of partition columns whose values the readers write as Delta's
``partitionValues`` text (the folder's text: a number in decimal, ``true``/``false``)."""

_LEGACY_WRITER_FEATURES = {1: frozenset(), 2: frozenset({"appendOnly", "invariants"})}


def _refused_protocol(protocol: Any, configuration: Mapping[str, str]) -> str | None:
    """Why delta-rs is not to commit files to a table of ``protocol`` and ``configuration``
    (None: it can)."""
    if protocol.min_reader_version != 1:
        return (f"its protocol needs reader version {protocol.min_reader_version} "
                f"({', '.join(protocol.reader_features or []) or 'column mapping'})")
    if protocol.min_writer_version == 7:
        features = frozenset(protocol.writer_features or [])
    else:
        features = _LEGACY_WRITER_FEATURES.get(protocol.min_writer_version, frozenset({"?"}))
    unknown = features - LANDING_WRITER_FEATURES
    if unknown:
        return (f"its protocol (writer version {protocol.min_writer_version}"
                f"{', features ' + ', '.join(sorted(features)) if features - {'?'} else ''}) "
                "has more than appends need")
    if configuration.get("delta.columnMapping.mode", "none").lower() != "none":
        return f"it maps columns (delta.columnMapping.mode " \
               f"{configuration['delta.columnMapping.mode']})"
    constraints = sorted(k for k in configuration if k.lower().startswith("delta.constraints."))
    if constraints:
        return f"it has CHECK constraints ({', '.join(constraints)})"
    return None


def _refused_columns(schema: StructType) -> str | None:
    """Why a column of ``schema`` keeps delta-rs from appending files as written: a generated
    or identity column, or an invariant (None: none)."""
    def marks(fields: Any, prefix: str = "") -> Iterator[str]:
        from pyspark.sql.types import ArrayType, MapType, StructType

        for f in fields:
            for key in f.metadata or {}:
                if key in ("delta.generationExpression", "delta.invariants") or \
                        key.startswith("delta.identity."):
                    yield f"{prefix}{f.name} ({key})"
            kind = f.dataType
            while isinstance(kind, (ArrayType, MapType)):
                kind = kind.elementType if isinstance(kind, ArrayType) else kind.valueType
            if isinstance(kind, StructType):
                yield from marks(kind.fields, f"{prefix}{f.name}.")

    found = sorted(set(marks(schema.fields)))
    return f"it has generated, identity or checked columns: {', '.join(found)}" if found else None


_LAST_COMMIT = "spark.databricks.delta.lastCommitVersionInSession"
_COMMITS_LOCK = threading.Lock()
_commits = {"running": 0, "started": 0}


@dataclass
class _Commit:
    version: str | None = None


@contextlib.contextmanager
def _session_commit(spark: SparkSession) -> Iterator[_Commit]:
    """The version the write in the block committed, from Delta's
    ``lastCommitVersionInSession``: set only when the session's value changed and no other
    table sink commit of this process ran meanwhile (else None: look it up)."""
    with _COMMITS_LOCK:
        alone = _commits["running"] == 0
        _commits["running"] += 1
        _commits["started"] += 1
        ticket = _commits["started"]
    before = spark.conf.get(_LAST_COMMIT, None)
    made = _Commit()
    try:
        yield made
        after = spark.conf.get(_LAST_COMMIT, None)
        with _COMMITS_LOCK:
            alone = alone and _commits["started"] == ticket
        if alone and after is not None and after != before:
            made.version = str(after)
    finally:
        with _COMMITS_LOCK:
            _commits["running"] -= 1


_S3_TABLES: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def _one_commit_on_s3(location: str | None) -> Iterator[None]:
    """On S3, one commit to the table at a time in this process. Spark's Delta writer commits
    a version with an existence check and a plain PUT (``S3SingleDriverLogStore``; its lock
    orders only its own commits), so a delta-rs commit (a conditional PUT) landing between the
    two would be overwritten: lost without an error. Elsewhere nothing is held (a version
    appears by a rename or link that fails when it exists)."""
    if location is None or not is_s3(location):
        yield
        return
    bucket, prefix = split_s3(location)
    with _COMMITS_LOCK:
        lock = _S3_TABLES.setdefault(f"{bucket}/{prefix}", threading.Lock())
    with lock:
        yield


def _rows(observed: Any) -> int | None:
    """The rows an observed write counted; None when the write did not fill the observation
    (``saveAsTable`` overwriting a catalog table runs the rows in a query of its own: PySpark
    gets a row without a schema and fails an assertion converting it)."""
    try:
        metrics = observed.get or {}
    except Exception:  # noqa: BLE001  # the version's operationMetrics count them instead
        return None
    return int(metrics.get("rows", 0))


def _properties(user_metadata: str | None) -> dict[str, Any] | None:
    """A commit's ``userMetadata`` as the sink wrote it (None: not a JSON object)."""
    if not user_metadata:
        return None
    try:
        parsed = json.loads(user_metadata)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
