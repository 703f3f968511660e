"""Iceberg's schema as the readers' Parquet files meet it: the Iceberg type pyarrow's column of
a Spark type is read as, a Java Iceberg type as comparable text, and the table's name mapping
completed by the current schema's (so files without field ids are read by column name)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType


def iceberg_type_of(spark_type: DataType) -> str | None:
    """The Iceberg type a Parquet column the readers write of ``spark_type`` is read as (as
    :func:`described_type` writes it), or None for a type the readers do not write."""
    from pyspark.sql.types import ArrayType, StructType

    if isinstance(spark_type, ArrayType):
        element = iceberg_type_of(spark_type.elementType)
        required = "" if spark_type.containsNull else "required "
        return None if element is None else f"list<{required}{element}>"
    if isinstance(spark_type, StructType):
        fields = [(f, iceberg_type_of(f.dataType)) for f in spark_type.fields]
        if any(t is None for _, t in fields):
            return None
        return "struct<" + ", ".join(
            f"{f.name}: {'optional' if f.nullable else 'required'} {t}" for f, t in fields) + ">"
    return _PRIMITIVES.get(spark_type.typeName())


_PRIMITIVES = {"binary": "binary", "string": "string", "integer": "int", "long": "long",
               "timestamp": "timestamptz", "boolean": "boolean", "double": "double",
               "float": "float"}
"""Spark's type -> the Iceberg type of the Parquet column pyarrow writes for it (a timestamp is
microseconds adjusted to UTC: ``timestamptz``)."""


def described_type(iceberg_type: Any) -> str:
    """An Iceberg (Java) type as text without field ids, with each nested field's and list
    element's and map value's optionality: ``list<struct<key: optional string, ...>>``."""
    if iceberg_type.isPrimitiveType():
        return str(iceberg_type.toString())
    if iceberg_type.isListType():
        listed = iceberg_type.asListType()
        required = "" if listed.isElementOptional() else "required "
        return f"list<{required}{described_type(listed.elementType())}>"
    if iceberg_type.isMapType():
        mapped = iceberg_type.asMapType()
        required = "" if mapped.isValueOptional() else "required "
        return (f"map<{described_type(mapped.keyType())}, {required}"
                f"{described_type(mapped.valueType())}>")
    fields = iceberg_type.asStructType().fields()
    return "struct<" + ", ".join(
        f"{f.name()}: {'optional' if f.isOptional() else 'required'} {described_type(f.type())}"
        for f in fields) + ">"


def merged_mapping(present: list[Any], wanted: list[Any]) -> list[Any]:
    """The name mapping ``present`` (Iceberg's JSON: ``[{"field-id", "names", "fields"}]``)
    completed by ``wanted`` (the current schema's): each wanted field's names added to the
    present field of its id (the present names kept, its nested fields merged alike), the
    wanted fields present lacks appended, and a present name that now means another column
    dropped. Equal to ``present`` when it maps every wanted name already."""
    owner = {name: w.get("field-id") for w in wanted for name in w.get("names", [])}
    by_id = {w.get("field-id"): w for w in wanted}
    merged: list[Any] = []
    seen = set()
    for field in present:
        if not isinstance(field, dict):
            continue
        fid = field.get("field-id")
        names = [n for n in field.get("names", []) if owner.get(n, fid) == fid]
        if not names:
            continue  # every name of it means another column now
        entry = {**field, "names": names}
        match = by_id.get(fid) if fid is not None else None
        if match is not None:
            seen.add(fid)
            entry["names"] = names + [n for n in match.get("names", []) if n not in names]
            if match.get("fields"):
                entry["fields"] = merged_mapping(field.get("fields") or [], match["fields"])
        merged.append(entry)
    merged += [w for w in wanted if w.get("field-id") not in seen]
    return merged
