"""When the operators', sensors' and triggers' arguments are checked (the checks themselves
are :mod:`airflow_provider_kafka_spark.options`).

Every failed check is a :class:`ConfigurationError` that names the task (or the trigger), the
argument, the value and what to pass instead, e.g.::

    ingest: max_records_per_split=0 is not valid; pass a positive int (the most offsets one
    Spark partition reads), e.g. 100000, or None for the default.

When they run:

* a **literal** argument is checked in ``__init__``, i.e. when the DAG file is parsed, so a
  bad value is an import error of the DAG, not a failed run;
* a **templated** one (a template field holding Jinja markup such as ``"{{ params.n }}"``, or
  an ``XComArg`` such as ``resolve.output``) is checked once rendered, at the start of
  ``execute``, before any call to Kafka or Spark.

No Spark import here: the checks run while the DAG file is parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import Any

from airflow_provider_kafka_spark.offsets import OffsetRanges, OffsetSpecError
from airflow_provider_kafka_spark.options import shown

TEMPLATE_MARKERS: tuple[str, ...] = ("{{", "{%", "{#")
"""A string holding one of these is a Jinja template (Airflow's default delimiters)."""


def is_templated(value: Any) -> bool:
    """Whether Airflow replaces ``value`` when it renders the task: a string with Jinja
    markup, an ``XComArg`` or other lazy value (anything with ``resolve``), or a list, tuple,
    set or dict holding one."""
    if isinstance(value, str):
        return any(marker in value for marker in TEMPLATE_MARKERS)
    if isinstance(value, Mapping):
        return any(is_templated(v) for v in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return any(is_templated(v) for v in value)
    return not isinstance(value, PathLike) and callable(getattr(value, "resolve", None))


def checkable(value: Any, *, rendered: bool) -> bool:
    """Whether a template field's value can be checked now: always once rendered; before,
    only when it is a literal."""
    return rendered or not is_templated(value)


def parse_ranges(owner: str, ranges: Any) -> OffsetRanges:
    """``ranges`` (the resolve task's XCom, its JSON, or ``OffsetRanges``), parsed.

    Raises:
        OffsetSpecError: they are not offset ranges (the message names ``owner``).
    """
    try:
        return OffsetRanges.from_json(ranges)
    except OffsetSpecError as exc:
        raise OffsetSpecError(
            f"{owner}: ranges={shown(ranges, 200)} are not offset ranges: {exc} "
            "Pass the resolve task's XCom (ranges=resolve.output) or its JSON."
        ) from None
