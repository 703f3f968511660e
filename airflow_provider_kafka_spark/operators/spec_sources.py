"""Where a resolve run's ``start`` and ``stop`` specs come from: one pure function over plain
values (the operator reads them from the Airflow context; no Airflow object is needed here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    OffsetSpec,
    OffsetSpecError,
    Timestamp,
    parse_offset_spec,
)
from airflow_provider_kafka_spark.offsets.intervals import Interval

Source = Literal["params", "arguments", "partition", "announced", "data_interval"]
"""Where a spec came from."""


@dataclass(frozen=True)
class SpecSources:
    """What a run offers as its specs. ``params``: the run's Params (keys ``start``,
    ``stop``); ``arguments``: the operator's ``(start, stop)``; ``partition``: the bounds of
    the run's partition (:func:`~airflow_provider_kafka_spark.operators.partitions.
    partition_bounds`), or the error saying why the run's partition has none (raised only when
    a side needs it); ``announced``: the consecutive intervals announced by the Kafka interval
    asset that started the run (``()``: none); ``data_interval``: the run's
    ``(data_interval_start, data_interval_end)``."""

    params: Mapping[str, Any]
    arguments: tuple[Any, Any] = (None, None)
    partition: tuple[Any, Any] | ConfigurationError = (None, None)
    announced: Sequence[Interval] = ()
    data_interval: tuple[datetime | None, datetime | None] = (None, None)


@dataclass(frozen=True)
class RunSpecs:
    """The chosen specs, and the source of each (``sources``: ``(start's, stop's)``)."""

    start: OffsetSpec
    stop: OffsetSpec
    sources: tuple[Source, Source]


def choose_specs(task_id: str, offered: SpecSources) -> RunSpecs:
    """The ``(start, stop)`` specs of a run, each side from the first source that gives it:

    =====  ==========================  =================================  ============================
    order  source                      start                              stop
    =====  ==========================  =================================  ============================
    1      Params ``start``/``stop``   the Param, when set (not None/"")  the Param, when set
    2      arguments ``start=/stop=``  the argument, when given           the argument, when given
    3      the run's partition         ``timestamp:<partition_date>``     ``timestamp:<next tick>``
    4      announced intervals         ``timestamp:<first's start>``      ``timestamp:<last's end>``
    5      data interval               ``timestamp:<interval start>``     ``timestamp:<interval end>``
    =====  ==========================  =================================  ============================

    Each side is chosen on its own (a Param ``stop`` with an announced start is fine).
    ``interval start``/``end``: the run's ``data_interval_start``/``data_interval_end``.
    The partition row: a partitioned run (Airflow 3.3, ``partition_key``; it has no data
    interval): ``partition_date`` .. the next tick of the DAG's ``CronPartitionTimetable``,
    or what the operator's ``partition_slice`` makes of the key.

    Raises:
        OffsetSpecError: a side no source gives (the run has no data interval), a spec that
            does not parse (named ``<task_id>: <side>:``), or a zero-width interval (start and
            stop the same instant), never a silent empty read.
        ConfigurationError: a side that comes to the partition row of a run whose partition
            has no bounds (``offered.partition``'s error).
    """
    announced = ((f"timestamp:{offered.announced[0].start_ms}",
                  f"timestamp:{offered.announced[-1].end_ms}")
                 if offered.announced else (None, None))
    partition = offered.partition
    chosen: dict[str, tuple[Source, OffsetSpec]] = {}
    for index, side in enumerate(("start", "stop")):
        candidates: tuple[tuple[Source, Any], ...] = (
            ("params", offered.params.get(side)),
            ("arguments", offered.arguments[index]),
            ("partition", partition if isinstance(partition, ConfigurationError)
             else partition[index]),
            ("announced", announced[index]),
            ("data_interval", offered.data_interval[index]),
        )
        found = next(((source, value) for source, value in candidates
                      if _bound(value) is not None), None)
        if found is None:
            raise OffsetSpecError(
                f"{task_id}: no {side} offset spec: the run has no data interval and no "
                "partition (a manual run without logical date or partition key, or an "
                f"asset-triggered run) and no Param '{side}'. "
                f"Trigger the run with the Params 'start' and 'stop', or pass {side}= to the "
                "operator."
            )
        chosen[side] = (found[0], parse_spec(task_id, side, found[1]))
    (start_source, start), (stop_source, stop) = chosen["start"], chosen["stop"]
    if isinstance(start, Timestamp) and isinstance(stop, Timestamp) and start == stop:
        raise OffsetSpecError(
            f"{task_id}: start and stop are the same instant ({start}): the run's data "
            "interval is zero-width, as for a manual or asset-triggered run. Trigger the run "
            "with the Params 'start' and 'stop' (e.g. {\"start\": "
            "\"timestamp:2024-05-01T00:00:00Z\", \"stop\": \"timestamp:2024-05-01T01:00:00Z\"}), "
            "or schedule the DAG with a timetable that has data intervals."
        )
    return RunSpecs(start, stop, (start_source, stop_source))


def _bound(value: Any) -> Any:
    """One side of a source: a spec, or None when not set ("" too); the error of a partition
    without bounds is raised here, when a side comes to it."""
    if isinstance(value, ConfigurationError):
        raise value
    return value or None


def parse_spec(task_id: str, side: str, value: Any) -> OffsetSpec:
    """:func:`parse_offset_spec`, its error prefixed with ``<task_id>: <side>:``."""
    try:
        return parse_offset_spec(value)
    except OffsetSpecError as exc:
        raise OffsetSpecError(f"{task_id}: {side}: {exc}") from None
