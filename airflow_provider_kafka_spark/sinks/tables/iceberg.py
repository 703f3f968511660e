"""The :class:`IcebergSink`: a table of a Spark catalog backed by Apache Iceberg
(``spark.sql.catalog.<name>=org.apache.iceberg.spark.SparkCatalog``: Hadoop, JDBC, REST, Hive,
Glue... catalogs).

A run's commit is one ``overwrite`` snapshot: the new data files, the run's earlier rows
(``_kafka_spark_write IN (...)``) deleted, the record in the snapshot summary
(``kafka-spark.*`` properties), validated with serializable isolation from the snapshot the
look-up read (the newest snapshot the walk over the commits saw), so a concurrent commit that
wrote rows of the same writes makes it fail instead of duplicating (commits of other runs do not
conflict: Iceberg retries onto them). The data files come one of two ways:

* **the readers' own files** (:meth:`IcebergSink.landing_folder`): for records the native
  readers hand on (as read, or decoded by the readers; shaped by ``ingest``'s ``shape``; no
  transform or sql) into an unsorted Parquet table, unpartitioned or partitioned by
  ``identity``, ``years``, ``months``, ``days``, ``hours``, ``bucket`` or ``truncate`` (of
  integers) of columns the files hold, whose data folder is local or on S3 and whose columns are exactly
  the readers' (same names, same types, nullable; the other columns nullable), the readers
  write one Parquet file per split (per split and partition value for a partitioned table:
  the spec's transforms computed per row as Iceberg defines them,
  :mod:`~airflow_provider_kafka_spark.spark.read.transforms`) into
  ``<data folder>/kafka-spark-<uuid>/`` with the table's codec and the write id in every row,
  and :meth:`IcebergSink.commit_files` adds exactly those files through Iceberg's Java API in
  the session's JVM (each file's metrics from the footer its reader reported, its partition
  values as its reader reported them).
  Files written by pyarrow carry no Iceberg field ids: the sink keeps the table's
  ``schema.name-mapping.default`` complete (every column by its name) before the read, so
  Iceberg and other readers find the columns by name;
* **Spark's writer** (:meth:`IcebergSink.commit_rows`) for everything else (and on Spark
  Connect, which has no JVM to call): ``writeTo(table).overwrite(...)`` with
  ``isolation-level=serializable``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_provider_kafka_spark.causes import classify
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    KafkaSparkError,
    TableError,
    TableRuntimeError,
    error_line,
)
from airflow_provider_kafka_spark.s3 import settings_of_spark, split_s3
from airflow_provider_kafka_spark.sinks.tables.commits import (
    PREFIX,
    WRITE_COLUMN,
    CommitRecord,
    run_prefix,
)
from airflow_provider_kafka_spark.sinks.tables.iceberg_schema import (
    described_type,
    iceberg_type_of,
    merged_mapping,
)
from airflow_provider_kafka_spark.sinks.tables.sink import (
    TableSink,
    described,
    store_failure,
    table_failure,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from airflow_provider_kafka_spark.sinks.tables.sink import LandingPlan
    from airflow_provider_kafka_spark.spark.read.landing import LandedFile

log = logging.getLogger(__name__)

ICEBERG_CATALOGS = ("org.apache.iceberg.spark.SparkCatalog",
                    "org.apache.iceberg.spark.SparkSessionCatalog")
ICEBERG_SPARK_VERSIONS = ("3.4", "3.5", "4.0", "4.1")
"""The Spark versions Iceberg 1.12 publishes a runtime for (``iceberg-spark-runtime-<v>_2.13``)."""

_METRICS = f"write.metadata.metrics.column.{WRITE_COLUMN}"
_PAGES = (16, 256, None)
NAME_MAPPING = "schema.name-mapping.default"
"""The table property holding the JSON name mapping Iceberg reads files without field ids by."""
_LANDING_SCHEMES = ("file", "s3a", "s3")
"""Where the readers can land a table's files: local folders, and S3."""


def runtime_artifact(spark_version: str) -> str:
    """The Maven coordinates of the Iceberg runtime for a Spark version."""
    minor = ".".join(spark_version.split(".")[:2])
    return f"org.apache.iceberg:iceberg-spark-runtime-{minor}_2.13:1.12.0"


class IcebergSink(TableSink):
    """Write each run into the Iceberg table ``table`` (``catalog.namespace.table``) in one
    snapshot recording the run and its offsets; see :class:`TableSink` for the arguments and
    ``docs/tables.md`` for the whole story."""

    format_name = "iceberg"
    _java: Any = None
    """The table as Iceberg's Java API had it at the last :meth:`refresh` (None on Connect)."""
    _landing_spec: int | None = None
    """The id of the partition spec the readers' files are split by (set by the landing)."""

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
            if failure is not None:  # its store refused, or it or its database did not answer
                raise failure from exc
            cause = classify(exc)
            if cause.retryable:
                raise TableError(
                    f"IcebergSink: the catalog {catalog!r} cannot be listed: {error_line(exc)}. "
                    f"{cause.says()} Nothing was read or written.") from exc
            raise ConfigurationError(
                f"IcebergSink: the catalog {catalog!r} cannot be listed: {error_line(exc)}. "
                f"{cause.says()} Check its spark.sql.catalog.* settings. Nothing was read or "
                "written.") from exc

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
        30 s): another driver's commit (an earlier try) must be seen. In a session with a JVM
        the table's newest metadata is also loaded through Iceberg's Java API, for
        :meth:`commits` and :meth:`writes_of_run` to read without Spark jobs."""
        spark.sql(f"REFRESH TABLE {self.table}")
        self._java = (self._java_table(spark, "read the commits of")
                      if getattr(spark, "_jsparkSession", None) is not None else None)

    def commits(self, spark: SparkSession) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
        """The current lineage's snapshots, newest first, along the parents from the current
        snapshot: from the table :meth:`refresh` loaded through the Java API (no Spark job),
        else (Spark Connect) from the current snapshot (a table property) through the
        snapshots read newest first in growing pages (one small job each)."""
        table = self._java
        if table is not None:
            snapshot = table.currentSnapshot()
            while snapshot is not None:  # None also where older snapshots expired
                yield str(snapshot.snapshotId()), dict(snapshot.summary())
                parent = snapshot.parentId()
                snapshot = None if parent is None else table.snapshot(parent)
            return
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

    def writes_of_run(self, spark: SparkSession, head: str | None = None) -> set[str]:
        """The run's write ids in the snapshot ``head``: from the metrics of the data files
        whose :data:`WRITE_COLUMN` bounds start with the run's prefix (the column's metrics are
        full, and every commit's files hold one write id), planned through the Java API without
        a Spark job; from the rows (a Spark job) on Spark Connect, or when a planned file has
        deletes, lacks the bounds or holds more than one write id."""
        table = self._java
        found = None if table is None else self._writes_in_metrics(spark, table, head)
        return super().writes_of_run(spark, head) if found is None else found

    def _writes_in_metrics(self, spark: SparkSession, table: Any,
                           head: str | None) -> set[str] | None:
        """:meth:`writes_of_run` from the files' bounds; None when they cannot tell."""
        assert self.application is not None and self.run is not None  # checked in prepare()
        jvm: Any = spark.sparkContext._jvm
        iceberg = jvm.org.apache.iceberg
        column = table.schema().findField(WRITE_COLUMN)
        if column is None or table.currentSnapshot() is None:
            return None if column is None else set()
        prefix = run_prefix(self.application, self.run)
        scan = table.newScan().filter(
            iceberg.expressions.Expressions.startsWith(WRITE_COLUMN, prefix)).includeColumnStats()
        if head is not None:
            scan = scan.useSnapshot(int(head))
        string, field = iceberg.types.Types.StringType.get(), column.fieldId()
        found: set[str] = set()
        tasks = scan.planFiles()
        try:
            files = tasks.iterator()
            while files.hasNext():
                task = files.next()
                if not task.deletes().isEmpty():
                    return None
                data = task.file()
                lower, upper = data.lowerBounds(), data.upperBounds()
                low = None if lower is None else lower.get(field)
                high = None if upper is None else upper.get(field)
                if low is None or high is None:
                    return None
                low = str(iceberg.types.Conversions.fromByteBuffer(string, low))
                if low != str(iceberg.types.Conversions.fromByteBuffer(string, high)):
                    return None
                if low.startswith(prefix):
                    found.add(low)
        finally:
            tasks.close()
        return found

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
        if getattr(spark, "_jsparkSession", None) is not None:
            try:
                table = self._java_table(spark, "read the commit of")
            except KafkaSparkError as exc:  # the write is in: say so, not "as it was"
                raise TableError(
                    f"IcebergSink: run {self.run!r} was written to {self.table}, but its commit "
                    f"could not be read back ({error_line(exc.__cause__ or exc)}). Retry the "
                    "task: the retry finds the write in the table and writes nothing.") from exc
            return _commit_of(table, record.write_id)
        row = spark.sql(
            f"SELECT snapshot_id, summary FROM {self.table}.snapshots "
            f"WHERE summary['kafka-spark.write-id'] = '{record.write_id}' "
            "ORDER BY committed_at DESC LIMIT 1").first()
        if row is None:
            return {"commit": None, "records_written": 0}
        summary = row["summary"] or {}
        return {"commit": str(row["snapshot_id"]),
                "records_written": int(summary.get("added-records", 0))}

    def _landing_of(self, spark: SparkSession, output: StructType) -> LandingPlan | str:
        """The table's data folder (``write.data.path``, else ``<location>/data``), its Parquet
        codec (``write.parquet.compression-codec``, Iceberg's default zstd) and, for a folder on
        S3, the session's S3A settings of its bucket; first the table's name mapping is made
        complete (:data:`NAME_MAPPING`: every column of the current schema by its name, the
        aliases it had kept), a property change before anything is read; for a partitioned table its
        spec's fields as ``split_by``. Why not, when the table cannot take the readers' files as
        they write them: Spark Connect (no JVM for Iceberg's Java API), a partition transform
        the readers do not compute (``truncate`` of strings, ``void``) or of a
        column the files do not hold, a sorted table, data files of another format, a codec the
        readers cannot write (or brotli, which Iceberg's Java readers read only with a codec
        Spark does not bundle), a data folder neither local nor on S3, an output column the
        table lacks by its exact name or has with another type (or NOT NULL), or a NOT NULL
        column the readers do not write."""
        from pyspark.sql.types import StringType, StructField

        from airflow_provider_kafka_spark.sinks.tables.sink import LandingPlan
        from airflow_provider_kafka_spark.spark.read.landing import PARQUET_CODECS

        if getattr(spark, "_jsparkSession", None) is None:
            return "a Spark Connect session has no JVM to call Iceberg's Java API in"
        table = self._java_table(spark, "read the settings of")
        spec, order, properties = table.spec(), table.sortOrder(), table.properties()
        split_by = _split_by(table, spec, output)
        if isinstance(split_by, str):
            return split_by
        self._landing_spec = int(spec.specId())  # the spec the readers split the files by
        if not order.isUnsorted():
            return "the table has a sort order, which the readers' files do not follow"
        file_format = (properties.get("write.format.default") or "parquet").lower()
        if file_format != "parquet":
            return f"its data files are {file_format}, not parquet"
        codec = (properties.get("write.parquet.compression-codec") or "zstd").lower()
        if codec not in PARQUET_CODECS:
            return f"its Parquet codec {codec} is not one the readers write"
        if codec == "brotli":  # the JVM reads it only with Hadoop's BrotliCodec, not bundled
            return ("its Parquet codec brotli needs a codec the JVM may lack, which Spark's "
                    "writer checks")
        data = (properties.get("write.data.path")
                or f"{str(table.location()).rstrip('/')}/data").rstrip("/")
        scheme = urlsplit(data).scheme.lower()
        if not (scheme in _LANDING_SCHEMES or (not scheme and data.startswith("/"))):
            return f"its data folder {data} is neither local nor on S3"
        schema = table.schema()
        written = [*output.fields, StructField(WRITE_COLUMN, StringType())]
        for field in written:
            column = schema.findField(field.name)  # by the exact name: files map by name
            if column is None:
                return f"the table has no column named exactly {field.name}"
            wanted = iceberg_type_of(field.dataType)
            has = f"{'optional' if column.isOptional() else 'required'} " \
                  f"{described_type(column.type())}"
            if wanted is None or has != f"optional {wanted}":
                return (f"the column {field.name} is {has} in the table; the readers write "
                        f"optional {wanted or field.dataType.simpleString()}")
        names = {f.name for f in written}
        for column in schema.columns():
            if column.isRequired() and column.name() not in names:
                return (f"the table's column {column.name()} is NOT NULL and the readers do not "
                        "write it")
        self._complete_name_mapping(spark, table)
        s3 = settings_of_spark(spark, split_s3(data)[0]) if scheme in ("s3a", "s3") else None
        return LandingPlan(data, codec, s3, split_by=split_by)

    def _java_table(self, spark: SparkSession, doing: str) -> Any:
        """The table as Iceberg's Java API has it (its newest metadata), from the session's
        catalog."""
        try:
            jvm: Any = spark.sparkContext._jvm
            table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                spark._jsparkSession, self.table)
            table.refresh()
            return table
        except Exception as exc:
            raise table_failure("IcebergSink", f"{doing} the table {self.table}", exc) from exc

    def _complete_name_mapping(self, spark: SparkSession, table: Any) -> None:
        """Make the table's name mapping name every column of its current schema (the
        readers' files have no field ids; without it Iceberg reads their columns as nulls),
        keeping the names it had for the same columns."""
        jvm: Any = spark.sparkContext._jvm
        mapping = jvm.org.apache.iceberg.mapping
        wanted = json.loads(mapping.NameMappingParser.toJson(
            mapping.MappingUtil.create(table.schema())))
        text = table.properties().get(NAME_MAPPING)
        try:
            present = json.loads(text) if text else []
        except ValueError:
            log.warning("IcebergSink: the name mapping of %s is not JSON; replacing it.",
                        self.table)
            present = []
        merged = merged_mapping(present if isinstance(present, list) else [], wanted)
        if merged == present:
            return
        try:
            table.updateProperties().set(
                NAME_MAPPING, json.dumps(merged, separators=(",", ":"))).commit()
        except Exception as exc:
            raise table_failure("IcebergSink", f"set {NAME_MAPPING} of {self.table}",
                                exc) from exc
        log.info("IcebergSink: set %s of %s, so that files without field ids (the readers') "
                 "are read by their column names.", NAME_MAPPING, self.table)

    def commit_files(self, spark: SparkSession, folder: str, files: Sequence[LandedFile],
                     replacing: list[str], record: CommitRecord) -> dict[str, Any]:
        """One ``OverwriteFiles`` snapshot through Iceberg's Java API: each of ``files`` added
        (its size as the reader reported it; its metrics, with the table's metrics settings and
        name mapping, from the footer the reader reported: Iceberg's own ``ParquetUtil`` reads
        it from memory, so no file is read back from the store), the rows of the writes
        ``replacing`` deleted, ``record`` in the summary; validated from ``self._head`` against
        concurrent commits that added or deleted rows of this run (serializable, as
        :meth:`commit_rows`)."""
        jvm: Any = spark.sparkContext._jvm
        iceberg = jvm.org.apache.iceberg
        # As this attempt's refresh loaded it (a commit onto a newer snapshot refreshes it).
        table = self._java if self._java is not None else self._java_table(spark, "commit to")
        text = table.properties().get(NAME_MAPPING)
        mapping = (iceberg.mapping.NameMappingParser.fromJson(text) if text
                   else iceberg.mapping.MappingUtil.create(table.schema()))
        metrics_config = iceberg.MetricsConfig.forTable(table)
        spec = table.spec()
        if self._landing_spec is not None and int(spec.specId()) != self._landing_spec:
            raise TableError(
                f"IcebergSink: the partition spec of {self.table} changed since the read (spec "
                f"{self._landing_spec} -> {spec.specId()}): the landed files are split by the "
                "old one. Nothing was committed; retry the task (it lands by the new spec).")
        expressions = iceberg.expressions.Expressions
        overwrite = table.newOverwrite()
        for landed in files:
            footer = iceberg.inmemory.InMemoryInputFile(landed.footer)
            metrics = iceberg.parquet.ParquetUtil.fileMetrics(footer, metrics_config, mapping)
            built = (iceberg.DataFiles.builder(spec)
                     .withPath(f"{folder.rstrip('/')}/{landed.name}")
                     .withFormat(iceberg.FileFormat.PARQUET)
                     .withFileSizeInBytes(landed.size)
                     .withMetrics(metrics))
            if not spec.isUnpartitioned():
                if len(landed.partition) != spec.fields().size():
                    raise TableError(
                        f"IcebergSink: the landed file {landed.name} reports "
                        f"{len(landed.partition)} partition value(s); the spec of {self.table} "
                        f"has {spec.fields().size()} field(s) (it changed since the read?). "
                        "Nothing was committed; retry the task.")
                built = built.withPartitionValues(list(landed.partition))
            overwrite.addFile(built.build())
        if replacing:
            overwrite.overwriteByRowFilter(getattr(expressions, "in")(WRITE_COLUMN, replacing))
        for key, value in record.to_properties().items():
            overwrite.set(key, value)
        if self._head is not None:
            overwrite.validateFromSnapshot(int(self._head))
        assert self.application is not None and self.run is not None  # checked in prepare()
        overwrite.conflictDetectionFilter(
            expressions.startsWith(WRITE_COLUMN, run_prefix(self.application, self.run)))
        overwrite.validateNoConflictingData()
        overwrite.validateNoConflictingDeletes()
        overwrite.commit()
        return _commit_of(table, record.write_id)

    def is_conflict(self, exc: BaseException) -> bool:
        text = str(exc)
        return any(s in text for s in ("ValidationException", "CommitFailedException",
                                       "Found conflicting files", "conflicting"))


def _split_by(table: Any, spec: Any,
              output: StructType) -> tuple[tuple[str, str, str], ...] | str:
    """The fields of ``spec`` (the Java API's ``PartitionSpec`` of ``table``) as
    ``(field name, source column, transform)``, each a transform
    :func:`~airflow_provider_kafka_spark.spark.read.transforms.partition_values` computes of a
    top-level column of ``output`` of a type it takes; else why not."""
    from pyspark.sql.types import (
        BooleanType,
        ByteType,
        DateType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    from airflow_provider_kafka_spark.spark.read.transforms import TIME_TRANSFORMS, is_transform

    integers = (ByteType, ShortType, IntegerType, LongType)
    types = {f.name: f.dataType for f in output.fields}
    found: list[tuple[str, str, str]] = []
    for field in spec.fields():
        transform = str(field.transform())
        column = table.schema().findColumnName(field.sourceId())
        kind = types.get(str(column)) if column is not None else None
        takes = (
            isinstance(kind, (StringType, BooleanType, DateType, *integers))
            if transform == "identity"
            else isinstance(kind, (TimestampType, TimestampNTZType))
            or (transform != "hour" and isinstance(kind, DateType))
            if transform in TIME_TRANSFORMS
            else isinstance(kind, integers) if transform.startswith("truncate[")
            else isinstance(kind, (StringType, DateType, TimestampType, TimestampNTZType,
                                   *integers)) if transform.startswith("bucket[")
            else False)
        if not is_transform(transform) or kind is None or not takes:
            return (f"the table is partitioned by {transform}({column}), which the readers do "
                    "not compute of the files' columns")
        found.append((str(field.name()), str(column), transform))
    return tuple(found)


def _commit_of(table: Any, write_id: str) -> dict[str, Any]:
    """The snapshot of the write ``write_id`` (Java API table): the newest along the current
    lineage (the current one, unless another commit came right after) and its added records."""
    snapshot = table.currentSnapshot()
    while snapshot is not None and snapshot.summary().get(f"{PREFIX}write-id") != write_id:
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    if snapshot is None:
        return {"commit": None, "records_written": 0}
    return {"commit": str(snapshot.snapshotId()),
            "records_written": int(snapshot.summary().get("added-records") or 0)}


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
