"""How a run's output columns meet a table's: the check before the read (same names, the
same types or a narrower integer or float, new columns only with schema evolution) and the
rows put in the table's order and types for Spark's writers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.sinks.tables.commits import WRITE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


_WIDENING = {"byte": 0, "short": 1, "integer": 2, "long": 3}


def check_columns(owner: str, table: str, output: StructType, schema: StructType,
                   evolution: bool) -> None:
    """Each output column must be a column of the table with the same type (or a narrower
    integer, or a float into a double); columns the table lacks only with ``evolution``."""
    if WRITE_COLUMN in output.names:
        raise ConfigurationError(
            f"{owner}: the output has a column {WRITE_COLUMN!r}, which the sink writes itself "
            "(the write id of each row); drop or rename it in the transform.")
    in_table = {f.name.lower(): f for f in schema.fields}
    missing, different = [], []
    for f in output.fields:
        target = in_table.get(f.name.lower())
        if target is None:
            missing.append(f"{f.name} {f.dataType.simpleString()}")
        elif not _fits(f.dataType, target.dataType):
            different.append(f"{f.name}: output {f.dataType.simpleString()}, table "
                             f"{target.dataType.simpleString()}")
    if different:
        raise ConfigurationError(
            f"{owner}: the output's columns do not fit the table {table}: {'; '.join(different)}."
            " Cast them in the transform (or sql) to the table's types. Nothing was read or "
            "written.")
    if missing and not evolution:
        raise ConfigurationError(
            f"{owner}: the table {table} lacks the output's column(s) {', '.join(missing)}. Add "
            "them to the table (ALTER TABLE ... ADD COLUMNS), drop them in the transform, or "
            "pass schema_evolution=True (table_schema_evolution=True on the operator) to add "
            "them with the commit. Nothing was read or written.")


def _fits(output: Any, table: Any) -> bool:
    from pyspark.sql.types import ArrayType, DoubleType, FloatType, MapType, StructType

    if isinstance(output, StructType) and isinstance(table, StructType):
        fields = {f.name.lower(): f.dataType for f in table.fields}
        return all(f.name.lower() in fields and _fits(f.dataType, fields[f.name.lower()])
                   for f in output.fields)
    if isinstance(output, ArrayType) and isinstance(table, ArrayType):
        return _fits(output.elementType, table.elementType)
    if isinstance(output, MapType) and isinstance(table, MapType):
        return _fits(output.keyType, table.keyType) and _fits(output.valueType, table.valueType)
    if output.typeName() in _WIDENING and table.typeName() in _WIDENING:
        return _WIDENING[output.typeName()] <= _WIDENING[table.typeName()]
    if isinstance(output, FloatType) and isinstance(table, DoubleType):
        return True
    return bool(output.simpleString() == table.simpleString())


def in_table_order(df: DataFrame, schema: StructType | None) -> DataFrame:
    """``df``'s columns in the table's order, then the new ones (schema evolution), then
    :data:`WRITE_COLUMN` where the table has it: Iceberg's writer wants the table's order. A
    column narrower than the table's (an int into a bigint, a float into a double: what the
    column check lets through) is cast to the table's type: Delta's writer refuses it as is."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if schema is None:
        return df
    types = {f.name.lower(): f.dataType for f in schema.fields}
    given = {f.name: f.dataType for f in df.schema.fields}

    def column(name: str) -> Any:
        wanted = types.get(name.lower())
        if wanted is None or isinstance(wanted, (ArrayType, MapType, StructType)) or \
                wanted.simpleString() == given[name].simpleString():
            return F.col(f"`{name}`")
        return F.col(f"`{name}`").cast(wanted).alias(name)

    by_name = {c.lower(): c for c in df.columns}
    ordered = [by_name[f.name.lower()] for f in schema.fields if f.name.lower() in by_name]
    ordered += [c for c in df.columns if c not in ordered]
    placed = [column(c) for c in ordered]
    if WRITE_COLUMN in schema.names:  # the commit fills it in; keep its place
        names = [f.name for f in schema.fields if f.name.lower() in by_name or
                 f.name == WRITE_COLUMN]
        placed = [F.lit(None).cast("string").alias(WRITE_COLUMN) if n == WRITE_COLUMN
                  else column(by_name[n.lower()]) for n in names]
        placed += [F.col(f"`{c}`") for c in df.columns
                   if c.lower() not in {n.lower() for n in names}]
    return df.select(*placed)
