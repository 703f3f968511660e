"""Exactly once into lakehouse tables: one table commit per run, the run and its offsets
recorded in the table's own commit metadata.

* :class:`IcebergSink`: a table of an Iceberg catalog (``lake.db.orders``);
* :class:`DeltaSink`: a Delta table by path or by name;
* :meth:`TableSink.recorded_offsets`: the stops an application recorded in its table, for the
  ``table`` start spec (``resolve_offsets(..., starting="table:earliest", table_offsets=...)``).

How a run lands once, whatever retries, clears, backfills or concurrent runs do: the module
docs of :mod:`~airflow_provider_kafka_spark.sinks.tables.sink` and
:mod:`~airflow_provider_kafka_spark.sinks.tables.commits`, and ``docs/tables.md``.
"""

from __future__ import annotations

from airflow_provider_kafka_spark.options import check_choice
from airflow_provider_kafka_spark.sinks.tables.commits import WRITE_COLUMN, CommitRecord
from airflow_provider_kafka_spark.sinks.tables.delta import DeltaSink
from airflow_provider_kafka_spark.sinks.tables.iceberg import IcebergSink
from airflow_provider_kafka_spark.sinks.tables.sink import TableSink

__all__ = ["TABLE_FORMATS", "WRITE_COLUMN", "CommitRecord", "DeltaSink", "IcebergSink",
           "TableSink", "table_sink"]

TABLE_FORMATS: dict[str, type[TableSink]] = {"iceberg": IcebergSink, "delta": DeltaSink}
"""The table sinks by ``table_format``."""


def table_sink(table_format: str, table: str, **arguments: object) -> TableSink:
    """The sink of ``table_format`` (``iceberg`` or ``delta``) for ``table``; ``arguments`` as
    :class:`TableSink` takes them."""
    check_choice("table_sink", "table_format", table_format, tuple(TABLE_FORMATS))
    return TABLE_FORMATS[table_format](table, **arguments)  # type: ignore[arg-type]
