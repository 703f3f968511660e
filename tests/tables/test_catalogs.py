"""The tier's ground: Iceberg in a Hadoop catalog and in a JDBC catalog on PostgreSQL, and Delta,
written by Spark with the commit metadata the sinks rely on (Iceberg snapshot properties, Delta
``userMetadata``), read back by Spark and by the Python readers (pyiceberg, delta-rs)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.tables, pytest.mark.spark]

ROWS = [(1, "a", 10), (2, "b", 20), (3, None, 30)]
SCHEMA = "id INT, name STRING, amount BIGINT"
PROPERTY = "kafka-spark.test"


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _arrow_rows(table: Any) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["name"], r["amount"]) for r in table.to_pylist())


def _append_iceberg(spark: Any, catalog: str) -> str:
    """Create ``<catalog>.db_<random>.events`` and append ROWS with a snapshot property."""
    namespace = f"{catalog}.db_{uuid.uuid4().hex[:8]}"
    table = f"{namespace}.events"
    spark.sql(f"CREATE NAMESPACE {namespace}")
    spark.sql(f"CREATE TABLE {table} ({SCHEMA}) USING iceberg")
    (spark.createDataFrame(ROWS, SCHEMA).writeTo(table)
     .option(f"snapshot-property.{PROPERTY}", f"x-{catalog}").append())
    return table


@pytest.mark.parametrize("catalog", ["lake", "pg"])
def test_iceberg_append_keeps_rows_and_snapshot_property(table_spark: Any, catalog: str) -> None:
    table = _append_iceberg(table_spark, catalog)

    assert _rows(table_spark.table(table)) == sorted(ROWS)
    snapshots = table_spark.sql(
        f"SELECT operation, summary FROM {table}.snapshots").collect()
    assert [s["operation"] for s in snapshots] == ["append"]
    assert snapshots[0]["summary"][PROPERTY] == f"x-{catalog}"
    assert snapshots[0]["summary"]["added-records"] == str(len(ROWS))


def test_pyiceberg_reads_the_pg_table_spark_wrote(table_spark: Any, pg_catalog: Any) -> None:
    table = _append_iceberg(table_spark, "pg")
    identifier = table.split(".", 1)[1]

    loaded = pg_catalog.load_table(identifier)
    assert _arrow_rows(loaded.scan().to_arrow()) == sorted(ROWS)
    assert loaded.current_snapshot().summary[PROPERTY] == "x-pg"
    # Both catalogs see the same table: the same metadata file.
    metadata = table_spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    assert Path(metadata.removeprefix("file:")) == Path(loaded.metadata_location
                                                        .removeprefix("file:"))


def test_delta_path_table_with_user_metadata(table_spark: Any, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    path = str(tmp_path / "events")
    (table_spark.createDataFrame(ROWS, SCHEMA).write.format("delta")
     .option("userMetadata", "kafka-spark run 1").save(path))

    assert _rows(table_spark.read.format("delta").load(path)) == sorted(ROWS)
    assert _arrow_rows(DeltaTable(path).to_pyarrow_table()) == sorted(ROWS)
    history = table_spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert [(h["version"], h["userMetadata"]) for h in history] == [(0, "kafka-spark run 1")]
    assert DeltaTable(path).history()[0]["userMetadata"] == "kafka-spark run 1"
