"""The :class:`IcebergSink`: a table of a Spark catalog backed by Apache Iceberg
(``spark.sql.catalog.<name>=org.apache.iceberg.spark.SparkCatalog``: Hadoop, JDBC, REST, Hive,
Glue... catalogs), written with Iceberg's own Spark writer.

A run's commit is one ``overwrite by filter`` snapshot: the new data files, the run's earlier
rows (``_kafka_spark_write IN (...)``) deleted, the record in the snapshot summary
(``kafka-spark.*`` properties), validated with ``isolation-level=serializable`` from the
snapshot the look-up read (the newest snapshot the walk over the commits saw), so a concurrent
commit that wrote rows of the same writes makes it fail instead of duplicating (commits of other
runs do not conflict: Iceberg retries onto them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    TableError,
    TableRuntimeError,
    error_line,
)
from airflow_provider_kafka_spark.sinks.tables.commits import WRITE_COLUMN, CommitRecord
from airflow_provider_kafka_spark.sinks.tables.sink import TableSink, described, store_failure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

ICEBERG_CATALOGS = ("org.apache.iceberg.spark.SparkCatalog",
                    "org.apache.iceberg.spark.SparkSessionCatalog")
ICEBERG_SPARK_VERSIONS = ("3.4", "3.5", "4.0", "4.1")
"""The Spark versions Iceberg 1.12 publishes a runtime for (``iceberg-spark-runtime-<v>_2.13``)."""

_METRICS = f"write.metadata.metrics.column.{WRITE_COLUMN}"
_PAGES = (16, 256, None)


def runtime_artifact(spark_version: str) -> str:
    """The Maven coordinates of the Iceberg runtime for a Spark version."""
    minor = ".".join(spark_version.split(".")[:2])
    return f"org.apache.iceberg:iceberg-spark-runtime-{minor}_2.13:1.12.0"


class IcebergSink(TableSink):
    """Write each run into the Iceberg table ``table`` (``catalog.namespace.table``) in one
    snapshot recording the run and its offsets; see :class:`TableSink` for the arguments and
    ``docs/tables.md`` for the whole story."""

    format_name = "iceberg"

    def check_runtime(self, spark: SparkSession) -> None:
        """The catalog is configured as an Iceberg catalog, and the session's Spark has an
        Iceberg runtime (1.12 publishes them for Spark up to 4.1)."""
        minor = ".".join(spark.version.split(".")[:2])
        if minor not in ICEBERG_SPARK_VERSIONS:
            raise TableRuntimeError(
                f"IcebergSink: this session runs Spark {spark.version}, for which Iceberg "
                f"publishes no runtime (Iceberg 1.12 has iceberg-spark-runtime for Spark "
                f"{', '.join(ICEBERG_SPARK_VERSIONS)}). Run the ingest on pyspark 4.1 with "
                f"{runtime_artifact('4.1')} (README: 'Tables'). Nothing was read or written.")
        catalog = self.catalog(spark)
        jars = " ".join(spark.conf.get(k, "") or "" for k in ("spark.jars", "spark.jars.packages"))
        found = re.findall(r"iceberg-spark-runtime-(\d+\.\d+)_", jars)
        if found and minor not in found:
            raise TableRuntimeError(
                f"IcebergSink: the session's Iceberg runtime is built for Spark {found[0]}, but "
                f"it runs Spark {spark.version}; use {runtime_artifact(spark.version)}. Nothing "
                "was read or written.")
        try:
            spark.sql(f"SHOW NAMESPACES IN `{catalog}`").limit(1).collect()
        except Exception as exc:
            text = str(exc)
            if "ClassNotFound" in text or "NoClassDefFound" in text or \
                    "CATALOG_PLUGIN_CLASS_NOT_FOUND" in text:
                raise TableRuntimeError(
                    f"IcebergSink: the catalog {catalog!r} names an Iceberg class the session "
                    f"cannot load: put {runtime_artifact(spark.version)} on the classpath "
                    "(spark.jars or spark.jars.packages). Nothing was read or written.") from exc
            failure = store_failure("IcebergSink", f"list the catalog {catalog!r}", exc)
            if isinstance(failure, TableError):  # its database did not answer: not a setting
                raise failure from exc
            raise ConfigurationError(
                f"IcebergSink: the catalog {catalog!r} cannot be listed: {error_line(exc)}. "
                "Check its spark.sql.catalog.* settings. Nothing was read or written.") from exc

    def catalog(self, spark: SparkSession) -> str:
        """The table's catalog, once it is known to be an Iceberg catalog."""
        parts = self.table.split(".")
        if len(parts) < 2:
            raise ConfigurationError(
                f"IcebergSink: table={self.table!r} is not a table name; pass "
                "'catalog.namespace.table', e.g. 'lake.db.orders'.")
        catalog = parts[0] if len(parts) >= 3 else spark.catalog.currentCatalog()
        implementation = spark.conf.get(f"spark.sql.catalog.{catalog}", None)
        if not implementation:
            configured = sorted(_catalogs(spark))
            raise ConfigurationError(
                f"IcebergSink: table={self.table!r} names the catalog {catalog!r}, which the "
                f"session does not know (its catalogs: {configured or 'none'}). Configure it "
                f"(spark.sql.catalog.{catalog}=org.apache.iceberg.spark.SparkCatalog, with its "
                "type and warehouse) or fix the name. Nothing was read or written.")
        if implementation not in ICEBERG_CATALOGS:
            raise ConfigurationError(
                f"IcebergSink: the catalog {catalog!r} of table={self.table!r} is "
                f"{implementation}, not an Iceberg catalog; write a Delta table with "
                "DeltaSink (table_format='delta'), or name a table of an Iceberg catalog. "
                "Nothing was read or written.")
        return catalog

    def table_schema(self, spark: SparkSession) -> StructType:
        """The table's schema.

        Raises:
            ConfigurationError: the table does not exist or is not an Iceberg table.
        """
        try:  # loading the table reads its metadata file (from S3, for a warehouse there)
            exists = spark.catalog.tableExists(self.table)
            details = described(spark, self.table) if exists else {}
        except Exception as exc:
            failure = store_failure("IcebergSink", f"read the table {self.table}", exc)
            if failure is not None:
                raise failure from exc
            raise
        if not exists:
            raise ConfigurationError(
                f"IcebergSink: the table {self.table} does not exist. Create it first (CREATE "
                f"TABLE {self.table} (...) USING iceberg [PARTITIONED BY (...)]); the sink adds "
                f"its column {WRITE_COLUMN} itself. Nothing was read or written.")
        self._location = details.get("Location") or None
        provider = details.get("Provider", "").lower()
        if provider and provider != "iceberg":
            raise ConfigurationError(
                f"IcebergSink: the table {self.table} is a {provider} table, not an Iceberg "
                "table; write it with table_format='delta' / DeltaSink. Nothing was read or "
                "written.")
        return spark.table(self.table).schema

    def ensure_write_column(self, spark: SparkSession, schema: StructType) -> None:
        """Add the column and keep its full values in the files' metrics (so a run's files
        can be dropped by their write id, and found without reading them)."""
        if WRITE_COLUMN not in schema.names:
            spark.sql(f"ALTER TABLE {self.table} ADD COLUMNS ({WRITE_COLUMN} STRING COMMENT "
                      "'the write id of the commit that wrote the row (airflow-provider-"
                      "kafka-spark)')")
        properties = _table_properties(spark, self.table)
        wanted = {_METRICS: "full"}
        if self.schema_evolution:
            wanted["write.spark.accept-any-schema"] = "true"
        changes = {k: v for k, v in wanted.items() if properties.get(k) != v}
        if changes:
            listed = ", ".join(f"'{k}'='{v}'" for k, v in changes.items())
            spark.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ({listed})")

    def table_location(self, spark: SparkSession) -> str | None:
        """As ``DESCRIBE TABLE EXTENDED`` gave it when the table was checked."""
        return getattr(self, "_location", None)

    def read_table(self, spark: SparkSession, head: str | None = None) -> DataFrame:
        """The rows of the snapshot ``head`` (None: the current one)."""
        if head is None:
            return spark.table(self.table)
        return spark.read.option("versionAsOf", head).table(self.table)

    def refresh(self, spark: SparkSession) -> None:
        """Drop the session's cached copy of the table (Iceberg's catalog caches tables for
        30 s): another driver's commit (an earlier try) must be seen."""
        spark.sql(f"REFRESH TABLE {self.table}")

    def commits(self, spark: SparkSession) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
        """The current lineage's snapshots, newest first: from the current snapshot (a table
        property, no Spark job) along the parents, through the snapshots read newest first in
        growing pages (one small job each)."""
        current = _table_properties(spark, self.table).get("current-snapshot-id", "")
        if not current.lstrip("-").isdigit() or int(current) < 0:
            return  # no snapshot yet
        snapshots: dict[str, tuple[str | None, Mapping[str, Any] | None]] = {}
        wanted: str | None = current
        for page in _PAGES:
            limit = "" if page is None else f" LIMIT {page}"
            rows = spark.sql(
                f"SELECT snapshot_id, parent_id, summary FROM {self.table}.snapshots "
                f"ORDER BY committed_at DESC{limit}").collect()
            for row in rows:
                parent = row["parent_id"]
                snapshots[str(row["snapshot_id"])] = (
                    None if parent is None else str(parent), row["summary"])
            while wanted is not None and wanted in snapshots:
                parent, summary = snapshots.pop(wanted)
                yield wanted, summary
                wanted = parent
            if wanted is None or page is None or len(rows) < page:
                return  # the lineage's start, or its older snapshots expired

    def commit_rows(self, spark: SparkSession, df: DataFrame, replacing: list[str],
                    record: CommitRecord) -> dict[str, Any]:
        from pyspark.sql import functions as F

        writer = df.withColumn(WRITE_COLUMN, F.lit(record.write_id).cast("string")).writeTo(self.table)
        for key, value in record.to_properties().items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer = writer.option("isolation-level", "serializable")
        if self._head is not None:  # the snapshot the look-up read
            writer = writer.option("validate-from-snapshot-id", self._head)
        if self.schema_evolution:
            writer = writer.option("merge-schema", "true")
        writer.overwrite(F.col(WRITE_COLUMN).isin([*replacing, record.write_id]))
        row = spark.sql(
            f"SELECT snapshot_id, summary FROM {self.table}.snapshots "
            f"WHERE summary['kafka-spark.write-id'] = '{record.write_id}' "
            "ORDER BY committed_at DESC LIMIT 1").first()
        if row is None:
            return {"commit": None, "records_written": 0}
        summary = row["summary"] or {}
        return {"commit": str(row["snapshot_id"]),
                "records_written": int(summary.get("added-records", 0))}

    def is_conflict(self, exc: BaseException) -> bool:
        text = str(exc)
        return any(s in text for s in ("ValidationException", "CommitFailedException",
                                       "Found conflicting files", "conflicting"))


def _catalogs(spark: SparkSession) -> set[str]:
    """The catalogs configured in the session (none listed on Spark Connect)."""
    try:
        settings = spark.sparkContext.getConf().getAll()
    except Exception:  # Spark Connect has no SparkContext
        return set()
    return {m.group(1) for key, _ in settings
            if (m := re.fullmatch(r"spark\.sql\.catalog\.([^.]+)", key))}


def _table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    """The table's properties (Iceberg adds ``current-snapshot-id``); no Spark job."""
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
