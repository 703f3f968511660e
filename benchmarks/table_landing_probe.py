#!/usr/bin/env python3
"""Table landing probe (issue 43): what would a table sink cost if it committed the Parquet files
the readers write themselves (``land_kafka``, the file sink's one pass) instead of handing Arrow
batches to the JVM, where Spark turns them into rows and writes Parquet again? A measurement
before the design, not a sink: nothing here is wired into the package.

    .venv-tables/bin/python benchmarks/table_landing_probe.py                 # 2,000,000 x 200 B
    .venv-tables/bin/python benchmarks/table_landing_probe.py --records 20000 --rounds 1  # smoke

Runs under ``.venv-tables`` (PySpark 4.1, Iceberg 1.12 and Delta 4.4 jars, pyiceberg, delta-rs).
Starts a broker (``tools/local_broker``) and a PostgreSQL (``tools/postgres_server``), both
stopped by their pids at the end, produces N records (12 B keys, ~200 B ASCII values,
round-robin over 6 partitions, no transactions: ``benchmarks/ingest.py``'s plain slice) and
resolves ``earliest``..``latest``. One ``local[2]`` session has Spark's Kafka source, Delta, and
the Iceberg catalog ``pg``: Iceberg's ``JdbcCatalog`` on that PostgreSQL (``jdbc.schema-version
V1``, its table cache off), with pyiceberg's ``SqlCatalog`` on the same database and warehouse.

Every run writes the slice **as read** (Spark's Kafka schema: key, value, topic, partition,
offset, timestamp, timestampType, headers; no SQL) into a **fresh, empty, unpartitioned table**
(created before and dropped after the run, neither timed). Sides per format, interleaved over
``--rounds`` rounds after a warm-up round (the order reverses every round):

* ``spark``: Spark's Kafka source (the same offsets) -> ``df.writeTo(t).append()`` /
  ``df.write.format("delta").mode("append").save(p)``; the table lacks ``_kafka_spark_write``;
* ``ours``: today's ``ingest(spark, ranges, config, IcebergSink(t) / DeltaSink(p))`` (the
  run's bookkeeping, the hidden column, one commit: ``benchmarks/table_write.py``);
* ``landed_pyiceberg``: ``land_kafka(read_kafka(..., landing=ParquetFolder(<table>/data/<run>)))``
  -- the readers write one Parquet file per split into the table's data folder, with the
  table's codec (``write.parquet.compression-codec``: zstd, Iceberg's default) -- then
  pyiceberg's ``Transaction.add_files`` of exactly the reported files with the run's
  ``CommitRecord`` as snapshot properties, committed through ``SqlCatalog``. The files lack the
  hidden column ``_kafka_spark_write`` (it reads as null): the landing cannot add it without a
  change to the package (``read_kafka`` hands its readers the folder as options, so a
  ``ParquetFolder`` subclass does not reach them); what adding it in the readers would cost is
  measured apart (``stamp_cost``: the slice's first file written again by pyarrow without and
  with a constant dictionary column, outside Spark);
* ``landed_jvm_api``: the same landing, then Iceberg's Java API in the session's JVM (py4j,
  the session's own catalog): each file's metrics from its footer (``ParquetUtil.fileMetrics``
  with a name mapping), one transaction setting ``schema.name-mapping.default`` when missing
  and committing an overwrite snapshot that adds the files, with the record as snapshot
  properties (``write_landed_jvm_api``);
* ``landed_spark_call``: the same landing, then ``CALL pg.system.add_files(table => ...,
  source_table => '`parquet`.`<folder>`')`` (the JVM reads the footers in a Spark job); the
  run's properties are tried through the session's ``spark.sql.iceberg.snapshot-property.*``;
* ``landed_delta_rs``: the same landing (snappy, Delta's default; no hidden column) into the
  Delta table's folder, each file's Delta stats (numRecords, min/max/nullCount of the primitive
  columns) from its Parquet footer in the driver, then one delta-rs
  ``create_write_transaction`` (append) of those ``AddAction``s with
  ``CommitProperties(custom_metadata={"userMetadata": <the record>},
  app_transactions=[Transaction("kafka-spark:<write id>", 1)])``.

Each run is checked afterwards (untimed): Spark reads back exactly N rows; ours' rows carry its
write id (the landed sides': how many do, and what the column reads as); the landed commits
recorded the run (snapshot summary / ``userMetadata``, Delta's txn). Once per side (first
measured round), the files' column stats are checked by the scan Spark plans for ``partition =
3 AND offset < 100``: the files it reads (Iceberg ``resultDataFiles``/``skippedDataFiles``,
Delta ``numFiles``) of all.

Reports per side records/s and CPU seconds per million records of every process (Spark's JVM,
its Python workers with the native reader's threads, the driver with pyiceberg/delta-rs, and the
PostgreSQL server as ``catalog_db`` where it is a child: ``benchmarks/measure.py``; the broker is
not counted), medians with min-max, the 1-minute load before each run, the ratios
``ratio_<side>_vs_spark`` / ``ratio_cpu_<side>_vs_spark`` per format, the table properties and
protocols found, and what each route could not do. Prints JSON; ``--out`` writes it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from airflow_provider_kafka_spark.sinks.tables.commits import (  # noqa: E402
    WRITE_COLUMN,
    CommitRecord,
    merged,
    write_id,
)
from airflow_provider_kafka_spark.sinks.tables.sink import described  # noqa: E402
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder  # noqa: E402
from benchmarks.ingest import (  # noqa: E402
    PARTITIONS,
    SPARK_KAFKA_POM,
    compare,
    measured,
    produce_slices,
    spark_source,
)

CATALOG = "pg"
NAMESPACE = "probe"
APPLICATION = "bench.table_landing_probe"
COLUMNS = ("key BINARY, value BINARY, topic STRING, `partition` INT, `offset` BIGINT, "
           "`timestamp` TIMESTAMP, timestampType INT, "
           "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
WRITE_COLUMN_DDL = f", {WRITE_COLUMN} STRING"
STAT_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", WRITE_COLUMN)
"""The columns whose min/max the Delta stats get (Delta collects none for binary and nested)."""
CODEC_PROPERTY = "write.parquet.compression-codec"
ICEBERG_CODEC = "zstd"
NAME_MAPPING = "schema.name-mapping.default"
PRUNE_FILTER = "`partition` = 3 AND `offset` < 100"
SIDES = {"iceberg": ("spark", "ours", "landed_pyiceberg", "landed_jvm_api", "landed_spark_call"),
         "delta": ("spark", "ours", "landed_delta_rs")}


# -- the hidden column -----------------------------------------------------------------------

def stamped(batch: pa.RecordBatch, value: str) -> pa.RecordBatch:
    """``batch`` with the column ``WRITE_COLUMN`` = ``value``, as the readers would add it:
    dictionary-encoded (zeros as indices), so Parquet writes one dictionary entry and a run."""
    column = pa.DictionaryArray.from_arrays(
        pa.repeat(pa.scalar(0, pa.int32()), batch.num_rows), pa.array([value], pa.string()))
    return batch.append_column(WRITE_COLUMN, column)


def stamp_cost(files: list[str], value: str, repeats: int = 3) -> dict[str, Any]:
    """What adding the hidden column in the readers would cost, measured outside Spark (the
    landing cannot add it today: ``read_kafka`` passes the folder to its readers as options, so
    a ``ParquetFolder`` of another class does not reach them): the first landed file's records,
    in the readers' 20,000-record batches, written again as snappy Parquet in one row group,
    without and with :func:`stamped`, interleaved (and with it as zstd, Iceberg's default
    codec); this process's CPU seconds per million records (medians), the bytes of each
    file."""
    import statistics

    batches = pq.read_table(files[0]).to_batches(max_chunksize=20_000)
    rows = sum(b.num_rows for b in batches)
    cpu: dict[str, list[float]] = {"without": [], "with": [], "with_zstd": []}
    size: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="probe-stamp-") as folder:
        for round_ in range(repeats + 1):  # round 0 warms up, not counted
            for kind in cpu:
                path = os.path.join(folder, f"{kind}.parquet")
                started = time.process_time()
                written = [stamped(b, value) if kind != "without" else b for b in batches]
                table = pa.Table.from_batches(written)
                pq.write_table(table, path, compression="zstd" if "zstd" in kind else "snappy",
                               row_group_size=table.num_rows)
                if round_:
                    cpu[kind].append(time.process_time() - started)
                size[kind] = os.path.getsize(path)
    per_million = {k: round(statistics.median(v) / rows * 1e6, 3) for k, v in cpu.items()}
    return {"records": rows, "cpu_s_per_million": per_million,
            "added_cpu_s_per_million": round(per_million["with"] - per_million["without"], 3),
            "file_bytes": size}


# -- the tables ----------------------------------------------------------------------------

class Tables:
    """Fresh tables: Iceberg in ``pg`` (Spark's JdbcCatalog; pyiceberg's SqlCatalog on the same
    database), Delta by path under ``warehouse``."""

    def __init__(self, spark: Any, catalog: Any, warehouse: Path) -> None:
        self.spark, self.catalog, self.warehouse = spark, catalog, warehouse
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")

    def create(self, fmt: str, with_write_column: bool) -> str:
        suffix = uuid.uuid4().hex[:10]
        columns = COLUMNS + (WRITE_COLUMN_DDL if with_write_column else "")
        if fmt == "iceberg":
            name = f"{CATALOG}.{NAMESPACE}.t_{suffix}"
            properties = (f" TBLPROPERTIES ('write.metadata.metrics.column.{WRITE_COLUMN}'="
                          "'full')" if with_write_column else "")
            self.spark.sql(f"CREATE TABLE {name} ({columns}) USING iceberg{properties}")
            return name
        path = str(self.warehouse / f"delta_{suffix}")
        self.spark.sql(f"CREATE TABLE delta.`{path}` ({columns}) USING delta")
        return path

    def read(self, fmt: str, table: str) -> Any:
        return (self.spark.table(table) if fmt == "iceberg"
                else self.spark.read.format("delta").load(table))

    def drop(self, fmt: str, table: str) -> None:
        if fmt == "iceberg":
            self.spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
        else:
            shutil.rmtree(table, ignore_errors=True)


def local_path(location: str) -> str:
    """A ``file:`` location as a local path."""
    return location.removeprefix("file://").removeprefix("file:")


def delta_protocol(path: str) -> dict[str, Any]:
    """The protocol and configuration of the Delta table's first version."""
    found: dict[str, Any] = {}
    with open(os.path.join(path, "_delta_log", f"{0:020d}.json")) as log:
        for line in log:
            action = json.loads(line)
            if "protocol" in action:
                found["protocol"] = action["protocol"]
            if "metaData" in action:
                found["configuration"] = action["metaData"].get("configuration", {})
    return found


# -- the runs ------------------------------------------------------------------------------

@dataclass
class Context:
    spark: Any
    catalog: Any
    tables: Tables
    ranges: Any
    config: dict[str, Any]
    bootstrap: str
    records: int
    notes: dict[str, Any]


def record_of(ranges: Any, run: str) -> CommitRecord:
    """The record a table sink's commit of ``run`` would carry (the application's first)."""
    wid = write_id(APPLICATION, run, 0, ranges)
    return CommitRecord(APPLICATION, run, wid,
                        tuple((r.topic, r.partition, r.start, r.stop) for r in ranges),
                        merged({}, ranges), None, {})


def land(ctx: Context, folder: str, codec: str = "snappy") -> list[str]:
    """The readers land the slice in ``folder`` (Parquet with ``codec``); the files' absolute
    paths."""
    from airflow_provider_kafka_spark.spark.read.landing import land_kafka
    from airflow_provider_kafka_spark.spark.read.reader import read_kafka

    os.makedirs(folder, exist_ok=True)
    landing = land_kafka(read_kafka(ctx.spark, ctx.ranges, ctx.config,
                                    isolation_level=ctx.ranges.isolation_level,
                                    landing=ParquetFolder(folder, compression=codec)))
    assert sum(r["records"] for r in landing.reports) == ctx.records, landing.reports
    return [os.path.join(folder, landed.name) for landed in landing.files()]


def write_spark(ctx: Context, fmt: str, table: str) -> None:
    df = spark_source(ctx.spark, ctx.bootstrap, ctx.ranges)
    if fmt == "iceberg":
        df.writeTo(table).append()
    else:
        df.write.format("delta").mode("append").save(table)


def write_ours(ctx: Context, fmt: str, table: str) -> str:
    from airflow_provider_kafka_spark.sinks.tables import DeltaSink, IcebergSink
    from airflow_provider_kafka_spark.spark import ingest

    sink_type = IcebergSink if fmt == "iceberg" else DeltaSink
    result = ingest(ctx.spark, ctx.ranges, ctx.config,
                    sink_type(table, application=APPLICATION, run=f"ours-{uuid.uuid4().hex[:12]}"),
                    progress_every=None)
    output = dict(result.output)
    assert output["committed"] and output["records_written"] == ctx.records, output
    return str(output["write_id"])


def write_landed_pyiceberg(ctx: Context, table: str, record: CommitRecord) -> None:
    identifier = table.split(".", 1)[1]
    loaded = ctx.catalog.load_table(identifier)
    folder = os.path.join(local_path(loaded.location()), "data", f"run-{uuid.uuid4().hex[:12]}")
    files = land(ctx, folder, loaded.properties.get(CODEC_PROPERTY, ICEBERG_CODEC))
    with loaded.transaction() as transaction:
        transaction.add_files([f"file://{f}" for f in files],
                              snapshot_properties=record.to_properties())


def write_landed_spark_call(ctx: Context, table: str, record: CommitRecord) -> None:
    details = described(ctx.spark, table)
    folder = os.path.join(local_path(details["Location"]), "data",
                          f"run-{uuid.uuid4().hex[:12]}")
    land(ctx, folder, iceberg_codec(ctx.spark, table))
    keys = [f"spark.sql.iceberg.snapshot-property.{k}" for k in record.to_properties()]
    for key, value in zip(keys, record.to_properties().values(), strict=True):
        ctx.spark.conf.set(key, value)
    try:
        identifier = table.split(".", 1)[1]
        ctx.spark.sql(f"CALL {CATALOG}.system.add_files(table => '{identifier}', "
                      f"source_table => '`parquet`.`{folder}`')").collect()
    finally:
        for key in keys:
            ctx.spark.conf.unset(key)


def iceberg_codec(spark: Any, table: str) -> str:
    """The table's Parquet codec (Iceberg's default, zstd, unless set otherwise)."""
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    return properties.get(CODEC_PROPERTY, ICEBERG_CODEC).lower()


def write_landed_jvm_api(ctx: Context, table: str, record: CommitRecord) -> None:
    """Land, then commit through Iceberg's Java API in the session's JVM (py4j): the table
    loaded from the session's catalog, each file's metrics from its footer
    (``ParquetUtil.fileMetrics`` with the table's metrics config and a name mapping), one
    transaction that sets ``schema.name-mapping.default`` when missing and commits an overwrite
    snapshot adding the files, with the run's record as snapshot properties (the operation
    today's sink commits; a reprocessing would also delete the run's earlier files in it,
    validated from the snapshot the look-up read)."""
    jvm: Any = ctx.spark.sparkContext._jvm
    iceberg = jvm.org.apache.iceberg
    loaded = iceberg.spark.Spark3Util.loadIcebergTable(ctx.spark._jsparkSession, table)
    folder = os.path.join(local_path(loaded.location()), "data", f"run-{uuid.uuid4().hex[:12]}")
    files = land(ctx, folder, iceberg_codec(ctx.spark, table))
    mapping_json = loaded.properties().get(NAME_MAPPING)
    mapping = (iceberg.mapping.NameMappingParser.fromJson(mapping_json) if mapping_json
               else iceberg.mapping.MappingUtil.create(loaded.schema()))
    metrics_config = iceberg.MetricsConfig.forTable(loaded)
    transaction = loaded.newTransaction()
    if not mapping_json:
        transaction.updateProperties().set(
            NAME_MAPPING, iceberg.mapping.NameMappingParser.toJson(mapping)).commit()
    overwrite = transaction.newOverwrite()
    for path in files:
        metrics = iceberg.parquet.ParquetUtil.fileMetrics(
            loaded.io().newInputFile(path), metrics_config, mapping)
        overwrite.addFile(iceberg.DataFiles.builder(loaded.spec()).withPath(path)
                          .withFileSizeInBytes(os.path.getsize(path)).withFormat("parquet")
                          .withMetrics(metrics).build())
    for key, value in record.to_properties().items():
        overwrite.set(key, value)
    overwrite.commit()
    transaction.commitTransaction()


def delta_stats(path: str) -> str:
    """Delta's ``stats`` JSON of a Parquet file, from its footer: numRecords, and minValues,
    maxValues, nullCount of :data:`STAT_COLUMNS` (timestamps in milliseconds, as Delta writes
    them), nullCount of the other flat columns."""
    metadata = pq.read_metadata(path)
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for i, name in enumerate(names):
            if "." in name:  # nested (headers): no stats, as Delta
                continue
            stats = row_group.column(i).statistics
            if stats is None:
                continue
            nulls[name] = nulls.get(name, 0) + int(stats.null_count)
            if name in STAT_COLUMNS and stats.has_min_max:
                low[name] = stats.min if name not in low else min(low[name], stats.min)
                high[name] = stats.max if name not in high else max(high[name], stats.max)

    def shown(value: Any) -> Any:
        if isinstance(value, datetime):
            value = value if value.tzinfo else value.replace(tzinfo=UTC)
            return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
                f"{value.microsecond // 1000:03d}Z"
        return value

    return json.dumps({"numRecords": metadata.num_rows,
                       "minValues": {k: shown(v) for k, v in low.items()},
                       "maxValues": {k: shown(v) for k, v in high.items()},
                       "nullCount": nulls}, separators=(",", ":"))


def write_landed_delta_rs(ctx: Context, table: str, record: CommitRecord) -> None:
    from deltalake import CommitProperties, DeltaTable
    from deltalake.transaction import AddAction, Transaction

    files = land(ctx, table)
    actions = []
    for path in files:
        status = os.stat(path)
        actions.append(AddAction(os.path.basename(path), status.st_size, {},
                                 int(status.st_mtime * 1000), True, delta_stats(path)))
    delta = DeltaTable(table)
    user_metadata = json.dumps(record.to_properties(), sort_keys=True)
    delta.create_write_transaction(
        actions, "append", delta.schema(),
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": user_metadata},
            app_transactions=[Transaction(f"kafka-spark:{record.write_id}", 1,
                                          int(time.time() * 1000))]))


# -- the checks ----------------------------------------------------------------------------

def scanned_files(spark: Any, df: Any) -> dict[str, int]:
    """The file metrics of the scan Spark runs for ``df`` (AQE off, so the leaves are the
    scans): Iceberg's ``resultDataFiles``/``skippedDataFiles``, Delta's ``numFiles``."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    found: dict[str, int] = {}
    for i in range(leaves.size()):
        metrics = leaves.apply(i).metrics().iterator()
        while metrics.hasNext():
            pair = metrics.next()
            name = str(pair._1())
            if "file" in name.lower():
                found[name] = int(pair._2().value())
    return found


def check(ctx: Context, fmt: str, side: str, table: str, wid: str | None,
          record: CommitRecord | None, prune: bool) -> dict[str, Any]:
    """What the run left (untimed): the row count, the write id on the rows, the recorded run,
    and (``prune``) the files Spark's scan of :data:`PRUNE_FILTER` reads."""
    from pyspark.sql import functions as F

    df = ctx.tables.read(fmt, table)
    rows = df.count()
    assert rows == ctx.records, f"{fmt} {side}: {rows} rows, not {ctx.records}"
    found: dict[str, Any] = {"rows": rows}
    if wid is not None:
        stamped = df.where(F.col(WRITE_COLUMN) == wid).count()
        found["rows_with_the_write_id"] = stamped
        if stamped != ctx.records:  # what the column reads as instead
            found["write_column_values"] = {
                str(r[0])[:80]: r[1] for r in df.groupBy(WRITE_COLUMN).count().limit(3).collect()}
        assert side != "ours" or stamped == ctx.records, f"{fmt} {side}: {found}"
    if record is not None and fmt == "iceberg":
        summary = ctx.spark.sql(
            f"SELECT summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()["summary"]
        found["records_the_run"] = summary.get("kafka-spark.write-id") == record.write_id
        found["snapshot_operation"] = ctx.spark.sql(
            f"SELECT operation FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()["operation"]
        properties = {r["key"]: r["value"]
                      for r in ctx.spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
        found["name_mapping_set"] = "schema.name-mapping.default" in properties
        found["format_version"] = properties.get("format-version")
    if record is not None and fmt == "delta":
        from deltalake import DeltaTable

        history = ctx.spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").first()
        recorded = json.loads(history["userMetadata"] or "{}")
        found["records_the_run"] = recorded.get("kafka-spark.write-id") == record.write_id
        found["operation"] = history["operation"]
        found["txn_version"] = DeltaTable(table).transaction_version(
            f"kafka-spark:{record.write_id}")
    if prune:
        before = ctx.spark.conf.get("spark.sql.adaptive.enabled")
        ctx.spark.conf.set("spark.sql.adaptive.enabled", "false")
        try:
            total = scanned_files(ctx.spark, ctx.tables.read(fmt, table))
            pruned = scanned_files(ctx.spark, ctx.tables.read(fmt, table).where(PRUNE_FILTER))
        finally:
            ctx.spark.conf.set("spark.sql.adaptive.enabled", before)
        found["scan_files_all"] = total
        found[f"scan_files_where {PRUNE_FILTER}"] = pruned
    return found


def side_run(ctx: Context, fmt: str, side: str, checks: dict[str, Any]) -> Any:
    """One run of ``side`` into a fresh table: (wall seconds, CPU seconds by kind)."""
    def run(round_: int) -> tuple[float, dict[str, float]]:
        table = ctx.tables.create(fmt, with_write_column=side != "spark")
        if fmt == "delta" and round_ == 0 and side == "landed_delta_rs":
            ctx.notes["delta_table_created_by_spark"] = delta_protocol(table)
        record = record_of(ctx.ranges, f"{side}-{uuid.uuid4().hex[:12]}")
        wid: list[str | None] = [None if side == "spark" else record.write_id]
        try:
            def action() -> None:
                if side == "spark":
                    write_spark(ctx, fmt, table)
                elif side == "ours":
                    wid[0] = write_ours(ctx, fmt, table)
                elif side == "landed_pyiceberg":
                    write_landed_pyiceberg(ctx, table, record)
                elif side == "landed_jvm_api":
                    write_landed_jvm_api(ctx, table, record)
                elif side == "landed_spark_call":
                    write_landed_spark_call(ctx, table, record)
                else:
                    write_landed_delta_rs(ctx, table, record)
            result = measured(action, kinds=ctx.notes.get("kinds"))
            found = check(ctx, fmt, side, table, wid[0],
                          record if side.startswith("landed") else None, prune=round_ == 1)
            if round_ == 1:
                checks.setdefault(fmt, {})[side] = found
            return result
        finally:
            ctx.tables.drop(fmt, table)
    return run


# -- the run -------------------------------------------------------------------------------

def session_conf(warehouse: Path, jdbc_url: str, user: str, driver_memory: str) -> dict[str, str]:
    """``benchmarks/table_write.py``'s session (Delta, ``local[2]`` sizes) with the Iceberg
    catalog ``pg`` as ``tests/tables/conftest.py`` configures it, its table cache off (pyiceberg
    commits to the same tables)."""
    from benchmarks.table_write import tables_conf

    iceberg = f"spark.sql.catalog.{CATALOG}"
    return {**tables_conf(warehouse, driver_memory),
            iceberg: "org.apache.iceberg.spark.SparkCatalog",
            f"{iceberg}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            f"{iceberg}.uri": jdbc_url,
            f"{iceberg}.jdbc.user": user,
            f"{iceberg}.jdbc.schema-version": "V1",
            f"{iceberg}.warehouse": (warehouse / "pg").as_uri(),
            f"{iceberg}.cache-enabled": "false"}


def catalog_columns(url: str) -> dict[str, list[str]]:
    """The columns of the catalog tables in PostgreSQL (JdbcCatalog's ``V1`` schema adds
    ``iceberg_tables.iceberg_type``, which pyiceberg's ``SqlCatalog`` does not know)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sqlalchemy.text(
                "SELECT table_name, column_name FROM information_schema.columns WHERE "
                "table_name LIKE 'iceberg%' ORDER BY table_name, ordinal_position")).all()
    finally:
        engine.dispose()
    found: dict[str, list[str]] = {}
    for table, column in rows:
        found.setdefault(str(table), []).append(str(column))
    return found


def ratios(cases: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt, sides in cases.items():
        theirs = sides["spark"]
        for side, found in sides.items():
            if side == "spark":
                continue
            out[f"ratio_{fmt}_{side}_vs_spark"] = round(
                found["records_per_s"] / theirs["records_per_s"], 3)
            out[f"ratio_cpu_{fmt}_{side}_vs_spark"] = round(
                found["cpu_s_per_million"]["median"] / theirs["cpu_s_per_million"]["median"], 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds after a warm-up")
    parser.add_argument("--formats", default="iceberg,delta")
    parser.add_argument("--sides", default="", help="a subset of the sides (default: all)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--bootstrap", help="bootstrap.servers of a running broker")
    parser.add_argument("--out", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    import deltalake
    import pyiceberg
    import pyspark
    from pyiceberg.catalog.sql import SqlCatalog

    from airflow_provider_kafka_spark.spark import fetch_spark_kafka_jars, spark_session
    from tools.local_broker import local_broker
    from tools.postgres_server import local_postgres
    from tools.processes import read_pid
    from tools.tables_jars import fetch_table_jars

    jars = fetch_table_jars() + fetch_spark_kafka_jars(
        SPARK_KAFKA_POM, ROOT / ".cache" / "spark-kafka" / "jars-tables")
    wanted = {s for s in args.sides.split(",") if s}
    cases: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-table-landing-") as scratch, \
            local_broker(args.bootstrap) as bootstrap, \
            local_postgres(Path(scratch) / "postgres") as postgres:
        config = {"bootstrap.servers": bootstrap}
        _topic, ranges, _ = produce_slices(config, args.records, args.value_bytes,
                                           with_transactions=False)
        warehouse = Path(scratch) / "warehouse"
        (warehouse / "pg").mkdir(parents=True)
        postgres_pid = read_pid(Path(scratch) / "postgres", "postgres")
        notes["kinds"] = {postgres_pid: "catalog_db"} if postgres_pid else None
        spark = spark_session(args.master, app_name="table-landing-probe", jars=jars,
                              conf=session_conf(warehouse, postgres.jdbc_url, postgres.user,
                                                args.driver_memory))
        try:
            catalog = SqlCatalog(CATALOG, uri=postgres.sqlalchemy_url,
                                 warehouse=(warehouse / "pg").as_uri())
            ctx = Context(spark, catalog, Tables(spark, catalog, warehouse), ranges, config,
                          bootstrap, args.records, notes)
            for fmt in [f for f in args.formats.split(",") if f]:
                sides = {s: side_run(ctx, fmt, s, checks) for s in SIDES[fmt]
                         if not wanted or s in wanted or s == "spark"}
                cases[fmt] = compare(fmt, sides, args.rounds, args.records)
            if "delta" in cases or "iceberg" in cases:  # the hidden column's cost, apart
                folder = str(Path(scratch) / "stamp")
                notes["stamp_cost"] = stamp_cost(land(ctx, folder),
                                                 record_of(ranges, "stamp").write_id)
            notes["catalog_tables_columns"] = catalog_columns(postgres.sqlalchemy_url)
            jvm: Any = spark.sparkContext._jvm
            java = jvm.java.lang.System.getProperty("java.version")
        finally:
            spark.stop()
    notes.pop("kinds", None)
    result = {
        "records": args.records, "value_bytes": args.value_bytes, "key_bytes": 12,
        "partitions": PARTITIONS, "rounds": args.rounds, "spark_master": args.master,
        **ratios(cases),
        "cases": cases,
        "checks": checks,
        "notes": notes,
        "environment": {
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "pyspark": pyspark.__version__, "java": java, "pyiceberg": pyiceberg.__version__,
            "deltalake": deltalake.__version__,
            "jars": sorted(p.name for p in jars if any(
                k in p.name for k in ("iceberg", "delta", "kafka", "postgresql")))},
    }
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    for key, value in result.items():
        if key.startswith("ratio_"):
            print(f"{key:<50} {value}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
