"""The tables the `tables` tier writes, one kind per case, and how the tests look at them: the
rows (exact multisets), the commits the sink recorded, and a reader that is not Spark.

Kinds: ``iceberg-hadoop`` (the Hadoop catalog ``lake``, a local folder), ``iceberg-jdbc`` (the
JdbcCatalog ``pg``, a local folder), ``iceberg-s3`` (the JdbcCatalog ``s3``, its files on the S3
server), ``delta-path`` (a local folder), ``delta-catalog`` (a managed table of
``spark_catalog``) and ``delta-s3`` (an ``s3a://`` path)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.sinks.tables import (
    WRITE_COLUMN,
    CommitRecord,
    TableSink,
    table_sink,
)
from airflow_provider_kafka_spark.spark import ingest

if TYPE_CHECKING:
    from tools.s3_server import S3Endpoint

KINDS = ("iceberg-hadoop", "iceberg-jdbc", "iceberg-s3", "delta-path", "delta-catalog",
         "delta-s3")
ICEBERG_CATALOGS = {"iceberg-hadoop": "lake", "iceberg-jdbc": "pg", "iceberg-s3": "s3"}
COLUMNS = "topic STRING, `partition` INT, `offset` BIGINT, key STRING, value STRING"
AS_READ_COLUMNS = ("key BINARY, value BINARY, topic STRING, `partition` INT, `offset` BIGINT, "
                   "`timestamp` TIMESTAMP, timestampType INT, "
                   "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
"""A table of the records as read (Spark's Kafka schema): the readers' files can land in it."""
SQL = ("SELECT topic, `partition`, `offset`, CAST(key AS STRING) AS key, "
       "CAST(value AS STRING) AS value FROM kafka")
UPPER_SQL = SQL.replace("CAST(value AS STRING)", "upper(CAST(value AS STRING))")

Row = tuple[int, int, str, str]
"""(partition, offset, key, value)."""


@dataclass(frozen=True)
class Table:
    """One table of a test: its kind, its name (or path) and format."""

    kind: str
    name: str
    format: str
    location: str = ""
    """Where the files are (a Delta table's folder or ``s3a://`` path)."""

    def sink(self, run: str, application: str = "app", **kwargs: Any) -> TableSink:
        return table_sink(self.format, self.name, application=application, run=run, **kwargs)

    def df(self, spark: Any) -> Any:
        if self.kind in ("delta-path", "delta-s3"):
            return spark.read.format("delta").load(self.name)
        return spark.table(self.name)

    def rows(self, spark: Any) -> Counter[Row]:
        """The table's rows as an exact multiset."""
        return Counter((r["partition"], r["offset"], _text(r["key"]), _text(r["value"]))
                       for r in self.df(spark).collect())

    def writes(self, spark: Any) -> Counter[str]:
        """Rows per write id."""
        return Counter(r[0] for r in self.df(spark).select(WRITE_COLUMN).collect())

    def records(self, spark: Any) -> list[CommitRecord]:
        """The sink's commit records, newest first."""
        return [r for _, p in self.commits(spark)
                if (r := CommitRecord.from_properties(p)) is not None]

    def commit_count(self, spark: Any) -> int:
        return sum(1 for _ in self.commits(spark))

    def commits(self, spark: Any) -> list[tuple[str, Any]]:
        """The table's commits, newest first, read as the sink reads them in a run (after its
        refresh: through Iceberg's Java API in a classic session)."""
        sink = self.sink("-")
        sink.refresh(spark)
        return list(sink.commits(spark))


def create(spark: Any, kind: str, warehouse: Path | str, columns: str = COLUMNS,
           partitioned_by: str = "") -> Table:
    """A new empty table of ``kind`` with ``columns``; a Delta table by path in ``warehouse``
    (a folder, or ``s3a://<bucket>`` for ``delta-s3``: ``Warehouses.of(kind)``)."""
    suffix = uuid.uuid4().hex[:10]
    clause = f" PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
    if kind.startswith("iceberg"):
        catalog = ICEBERG_CATALOGS[kind]
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
        name = f"{catalog}.db.t_{suffix}"
        spark.sql(f"CREATE TABLE {name} ({columns}) USING iceberg{clause}")
        return Table(kind, name, "iceberg")
    if kind in ("delta-path", "delta-s3"):
        if (kind == "delta-s3") != str(warehouse).startswith("s3a://"):
            raise ValueError(f"a {kind} table in {warehouse}? pass warehouses.of(kind)")
        path = f"{warehouse}/delta_{suffix}"
        spark.sql(f"CREATE TABLE delta.`{path}` ({columns}) USING delta{clause}")
        return Table(kind, path, "delta", path)
    name = f"default.t_{suffix}"
    spark.sql(f"CREATE TABLE {name} ({columns}) USING delta{clause}")
    location = spark.sql(f"DESCRIBE DETAIL {name}").first()["location"]
    return Table(kind, name, "delta", location.removeprefix("file:"))


def expected(records: list[tuple[int, bytes | None, bytes, int]], ranges: OffsetRanges,
             upper: bool = False) -> Counter[Row]:
    """The rows ``ranges`` hold of ``records`` produced in order (offsets from 0 per
    partition, no transactions)."""
    offsets: Counter[int] = Counter()
    rows: Counter[Row] = Counter()
    bounds = {r.partition: (r.start, r.stop) for r in ranges}
    for partition, key, value, _ in records:
        offset = offsets[partition]
        offsets[partition] += 1
        start, stop = bounds.get(partition, (0, 0))
        if start <= offset < stop:
            text = value.decode()
            rows[(partition, offset, (key or b"").decode(), text.upper() if upper else text)] += 1
    return rows


def ranges_of(topic: str, bounds: dict[int, tuple[int, int]]) -> OffsetRanges:
    return OffsetRanges(tuple(PartitionRange(topic, p, a, b) for p, (a, b) in bounds.items()))


def run_ingest(spark: Any, kafka_config: dict[str, Any], ranges: OffsetRanges, sink: TableSink,
               sql: str | None = SQL, max_records_per_split: int | None = None
               ) -> dict[str, Any]:
    """One ingest of ``ranges`` into ``sink`` (``sql=None``: the records as read, into a
    table of :data:`AS_READ_COLUMNS`); its output description. ``max_records_per_split``:
    as ``ingest``'s (at least the largest range: a split, and a landed file, per range)."""
    return dict(ingest(spark, ranges, kafka_config, sink, sql=sql,
                       max_records_per_split=max_records_per_split).output)


def reader(kind: str, catalog: Any,
           s3: S3Endpoint | None = None) -> Callable[[Table], Counter[Row]] | None:
    """The rows as a reader that is not Spark sees them (pyiceberg through ``catalog``, its
    SqlCatalog on the table's catalog: ``pg_catalog`` or ``s3_catalog``; delta-rs on the table's
    folder, on S3 through ``s3``), or None for the Hadoop catalog, which pyiceberg has no catalog
    for."""
    if kind in ("iceberg-jdbc", "iceberg-s3"):
        def through_catalog(table: Table) -> Counter[Row]:
            arrow = catalog.load_table(table.name.split(".", 1)[1]).scan().to_arrow()
            return _counted(arrow.to_pylist())
        return through_catalog
    if kind.startswith("delta"):
        options = delta_storage_options(s3) if kind == "delta-s3" and s3 is not None else None

        def through_delta_rs(table: Table) -> Counter[Row]:
            from deltalake import DeltaTable

            return _counted(DeltaTable(table.location, storage_options=options)
                            .to_pyarrow_table().to_pylist())
        return through_delta_rs
    return None


def pyiceberg_s3_properties(s3: S3Endpoint) -> dict[str, str]:
    """pyiceberg's catalog properties that read and write ``s3://``/``s3a://`` files on the S3
    server (pyarrow's S3 client, path-style)."""
    return {"s3.endpoint": s3.url, "s3.access-key-id": s3.access_key,
            "s3.secret-access-key": s3.secret_key, "s3.region": s3.region,
            "s3.force-virtual-addressing": "false",
            "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}


def delta_storage_options(s3: S3Endpoint) -> dict[str, str]:
    """delta-rs's ``storage_options`` for tables on the S3 server (plain HTTP, path-style)."""
    return {"AWS_ENDPOINT_URL": s3.url, "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_REGION": s3.region,
            "AWS_ALLOW_HTTP": "true", "AWS_FORCE_PATH_STYLE": "true"}


def _counted(rows: list[dict[str, Any]]) -> Counter[Row]:
    return Counter((r["partition"], r["offset"], _text(r["key"]), _text(r["value"]))
                   for r in rows)


def _text(value: Any) -> Any:
    """A key or value as text (a table of records as read holds bytes)."""
    return bytes(value).decode() if isinstance(value, (bytes, bytearray)) else value
