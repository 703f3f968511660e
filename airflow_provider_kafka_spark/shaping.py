"""What an ingest lands (:class:`Shape`): which columns of the records read (and decoded) to
keep, under which names, and partition columns computed from a timestamp by a named transform.
A value checked when it is built, so a DAG file with a bad one fails to import. No Airflow and
no Spark import.

The readers apply a shape to their Arrow batches themselves (no Spark rows) when they land the
records (a ``FileSink`` of Parquet, also partitioned by the shape's columns); any other write
applies the same function to the records through Spark
(:mod:`~airflow_provider_kafka_spark.spark.shape`), with the same result.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_kafka_spark.options import bad_argument, check_choice

__all__ = ["Derived", "Shape"]

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                 "headers")
"""The columns of the records read (Spark's Kafka source's)."""
TRANSFORMS = ("identity", "year", "month", "day", "hour")
"""How :class:`Derived` computes its value from a timestamp: itself, or its UTC year
(``2026``), month (``2026-12``), day (``2026-12-04``) or hour (``2026-12-04-07``) as text."""
UNITS = ("s", "ms", "us")
"""The units of an integer timestamp since the epoch: seconds, milliseconds, microseconds."""
_COLUMN = re.compile(r"\s*(key|value)\.(\*|[A-Za-z_][A-Za-z0-9_]*)\s*$|\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")
_RENAMED = re.compile(r"(.+?)\s+[Aa][Ss]\s+([A-Za-z_][A-Za-z0-9_]*)\s*$")


@dataclass(frozen=True)
class Derived:
    """A column computed from ``source`` by ``transform`` (one of :data:`TRANSFORMS`).

    :param source: a column of the records read (``timestamp``, the Kafka timestamp) or a
        top-level field of a decoded key or value (``value.created_at``): a timestamp, or with
        ``unit`` an integer since the epoch.
    :param transform: ``hour``, ``day``, ``month``, ``year`` (UTC, as text: ``2026-12-04-07``,
        ``2026-12-04``, ``2026-12``, ``2026``) or ``identity`` (the value itself).
    :param unit: ``s``, ``ms`` or ``us`` for an integer ``source``; None for a timestamp.

    Raises:
        ConfigurationError: an unknown transform or unit, or a source that names no column.
    """

    source: str
    transform: str = "identity"
    unit: str | None = None

    def __post_init__(self) -> None:
        owner = "Derived"
        check_choice(owner, "transform", self.transform, TRANSFORMS)
        if self.unit is not None:
            check_choice(owner, "unit", self.unit, UNITS)
        if not isinstance(self.source, str) or not _source_column(self.source) \
                or self.source.strip().endswith(".*"):
            raise bad_argument(owner, "source", self.source,
                               "pass a column of the records read (e.g. 'timestamp') or a "
                               "field of the decoded value (e.g. 'value.created_at')")


@dataclass(frozen=True)
class Shape:
    """The columns an ingest lands, in this order: ``columns``, then ``derived``.

    :param columns: each a column of the records read (``partition``, ``offset``,
        ``timestamp``...: :data:`KAFKA_COLUMNS`), a field of the decoded key or value
        (``value.id``), every field of it (``value.*``), each optionally renamed
        (``"value.id AS order_id"``).
    :param derived: new columns by name, each a :class:`Derived`, e.g.
        ``{"hour": Derived("value.ts", "hour", unit="ms")}``; a ``FileSink(partition_by=...)``
        of them gets a folder per value (``hour=2026-12-04-07/``).

    Raises:
        ConfigurationError: a column that names nothing, a name given twice, or no column.
    """

    columns: Sequence[str]
    derived: Mapping[str, Derived] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = "Shape"
        if isinstance(self.columns, str) or not isinstance(self.columns, Sequence) \
                or not self.columns:
            raise bad_argument(owner, "columns", self.columns,
                               "pass a list of columns, e.g. ['partition', 'offset', 'value.*']")
        object.__setattr__(self, "columns", tuple(self.columns))
        if not isinstance(self.derived, Mapping):
            raise bad_argument(owner, "derived", self.derived,
                               "pass a dict of name -> Derived(source, transform)")
        object.__setattr__(self, "derived", dict(self.derived))
        for column in self.columns:
            if not isinstance(column, str) or parse_column(column) is None:
                raise bad_argument(owner, "columns", column,
                                   f"name a column of the records read ({', '.join(KAFKA_COLUMNS)}),"
                                   " 'value.<field>', 'value.*' (or key.), optionally "
                                   "'... AS <name>'", problem="names no column")
        for name, value in self.derived.items():
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) \
                    or not isinstance(value, Derived):
                raise bad_argument(owner, "derived", {name: value},
                                   "pass a column name -> Derived(source, transform)")
        named = self.names()
        twice = sorted({n for n in named if named.count(n) > 1})
        if twice:
            raise bad_argument(owner, "columns", twice, "give each column one name (AS <name>)",
                               problem="names columns more than once")

    def names(self) -> list[str]:
        """The names of the columns the shape makes, in order, but those of ``value.*``
        (known only from the decoded value's fields)."""
        named = [n for n in (parse_column(c)[1] for c in self.columns) if n != "*"]  # type: ignore[index]
        return named + list(self.derived)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready; :meth:`from_json` makes it again."""
        return {"columns": list(self.columns),
                "derived": {n: [d.source, d.transform, d.unit] for n, d in self.derived.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Shape:
        return cls(data["columns"], {n: Derived(*d) for n, d in data["derived"].items()})


def parse_column(text: str) -> tuple[str, str] | None:
    """``(source, name)`` of a column of :attr:`Shape.columns`: ``("value.id", "order_id")``
    of ``"value.id AS order_id"``; ``("value.*", "*")`` of ``"value.*"``; None: not one."""
    renamed = _RENAMED.fullmatch(text)
    source, name = (renamed.group(1), renamed.group(2)) if renamed else (text, None)
    found = _source_column(source)
    if found is None or (name is not None and found.endswith(".*")):
        return None
    return found, name or found.split(".")[-1]


def _source_column(text: str) -> str | None:
    match = _COLUMN.fullmatch(text)
    if match is None:
        return None
    if match.group(3) is not None:
        return match.group(3) if match.group(3) in KAFKA_COLUMNS else None
    return f"{match.group(1)}.{match.group(2)}"
