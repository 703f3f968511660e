"""The :class:`DeltaSink`: a Delta Lake table, by path (``/data/orders``, ``s3a://lake/orders``)
or by name in a catalog (``spark_catalog`` with Delta's ``DeltaCatalog``), written with
Delta's own Spark writer (``delta-spark``, session extension ``DeltaSparkSessionExtension``).

A run's commit is one version whose ``commitInfo.userMetadata`` is the record (a JSON object of
the ``kafka-spark.*`` properties), with the write id as Delta's transaction identifier
(``txnAppId`` = ``kafka-spark:<write id>``, ``txnVersion`` 1), so Delta itself refuses a second
commit of the same write (a commit racing it fails with ``ConcurrentTransactionException``; one
after it writes nothing). When the look-up found no earlier rows of the run, the version is an
append; when it did (a reprocessing), an ``overwrite`` with ``replaceWhere
"_kafka_spark_write IN (...)"``: the new files added and the replaced rows removed in one
version, and a concurrent commit over the same rows fails it (``Concurrent*Exception``); the
sink tries it again.

Delta keeps a transaction identifier per write in the table's state: set the table property
``delta.setTransactionRetentionDuration`` (e.g. ``interval 30 days``) so that they expire (the
sink's own check reads the rows, so it does not need them).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.errors import ConfigurationError, TableRuntimeError, error_line
from airflow_provider_kafka_spark.sinks.tables.commits import PREFIX, WRITE_COLUMN, CommitRecord
from airflow_provider_kafka_spark.sinks.tables.sink import TableSink, described, store_failure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DELTA_SPARK_VERSIONS = ("4.0", "4.1", "4.2")
"""The Spark versions Delta 4.4 publishes ``delta-spark_<v>_2.13`` for."""
_PAGES = (16, 256, None)
_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException",
              "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
              "ConcurrentWriteException", "MetadataChangedException", "ProtocolChangedException",
              "DELTA_CONCURRENT_")


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
        with _session_commit(spark) as made:
            if is_path(self.table):
                writer.save(self.table)
            else:
                writer.saveAsTable(self.table)
        if made.version is not None:
            return {"commit": made.version, "records_written": _rows(observed)}
        # Another commit of this session ran meanwhile, or Delta wrote nothing (its
        # transaction identifier says this write is in: an earlier commit of it had no rows).
        for row in spark.sql(f"DESCRIBE HISTORY {self.identifier} LIMIT 16").select(
                "version", "userMetadata", "operationMetrics").collect():
            properties = _properties(row["userMetadata"]) or {}
            if properties.get(f"{PREFIX}write-id") == record.write_id:
                metrics = row["operationMetrics"] or {}
                return {"commit": str(row["version"]),
                        "records_written": int(metrics.get("numOutputRows", 0))}
        return {"commit": None, "records_written": 0}

    def is_conflict(self, exc: BaseException) -> bool:
        text = str(exc)
        return any(s in text for s in _CONFLICTS)


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


def _rows(observed: Any) -> int:
    """The rows an observed write counted."""
    metrics = observed.get or {}
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
