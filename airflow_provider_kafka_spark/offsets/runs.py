"""Runs that tile: resolve a scheduler's run once, pin it, and meet its neighbours exactly.

A run (in Airflow: ``dag_id``, ``task_id``, ``run_id``, ``map_index``, a
:class:`~airflow_provider_kafka_spark.offsets.pins.RunKey`) resolves its specs once and pins the
answer (:mod:`~airflow_provider_kafka_spark.offsets.pins`); every later try reuses it.

**Boundaries.** Consecutive ``timestamp:`` intervals of a task meet at an instant ``T``: the
stop of one run, the start of the next. Looking ``T`` up twice can give two answers: the
first offset stamped ``>= T`` moves when retention or ``delete_records`` removes it (a
transaction marker, or an out-of-order record stamped ``>= T`` followed by older-stamped ones),
and a stop resolved before any record ``>= T`` arrived is the end of the log at that moment.
So ``T`` is resolved once per task: the first run that resolves ``T`` (as its start or its
stop) records where it lands per partition, a *boundary record* in the pins topic, and every
other run of the same task and map index whose start or stop is ``timestamp:T`` takes those
offsets instead of looking ``T`` up. Consecutive runs therefore tile the offsets whatever
happens to the log between them:

* records stamped before ``T`` that arrive after the boundary was fixed are read by the run
  after it, as late records (as a stop at the end of the log already did);
* an offset deleted between the two runs is a loss the later run reports exactly
  (:class:`~airflow_provider_kafka_spark.errors.DataLossError`, or ``lost`` with
  ``on_data_loss="skip"``), never a silent skip.

Precisely:

* **Neighbour.** Runs of the same ``dag_id``, ``task_id`` and ``map_index`` (each map index
  tiles with the same index of other runs) whose start or stop spec is ``timestamp:T`` for the
  same ``T``. Any run counts: scheduled, backfill, manual with Params.
* **Order does not matter.** A backfill running intervals out of order, or two neighbours
  resolving at the same moment: whichever boundary record of ``T`` comes first in the pins
  partition's log wins, for everyone; a run that wrote a losing record resolves again with
  the winner's offsets before it pins anything.
* **No neighbour yet** (the first run, a gap in the schedule, runs pinned by an older version of
  this package): ``T`` is looked up as :func:`resolve_offsets` documents, and the answer becomes
  the boundary (``RunResolution.start_boundary``/``stop_boundary`` say which happened).
  Partitions the boundary does not list (added since) are looked up.
* **re_resolve** resolves ``latest``, ``committed`` and the rest anew, but a boundary, once
  fixed, stays: re-resolving with the same ``timestamp:`` specs gives the same offsets. A
  re-resolve with another ``T`` meets the runs at that ``T``, if any (an overlap with the runs
  in between is then the caller's choice; the audit shows it).
* **Lookups are bounded.** A boundary of ``T`` is looked for in what was written since
  ``min(T, since) - PIN_MARGIN``: runs that resolve ``T`` long before ``T`` (an ad-hoc stop in
  the future) are not seen, and their neighbour looks ``T`` up.

The boundary records are kept next to the pins, by
:class:`~airflow_provider_kafka_spark.offsets.pins.PinsTopic`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import airflow_provider_kafka_spark.offsets.specs as offset_specs
from airflow_provider_kafka_spark.offsets.cluster import Key, admin_client
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.pins import PINS_TOPIC, Boundary, PinsTopic, RunKey
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.offsets.resolve import OffsetRequest, resolve_request


@dataclass(frozen=True)
class RunResolution:
    """What :func:`resolve_run` did. ``pinned``: the run's pinned ranges were returned (nothing
    was resolved). ``start_boundary`` / ``stop_boundary``: the boundary a ``timestamp:`` side
    took from a neighbouring run, ``None`` when it was looked up (then this run fixed it).
    ``pins_read``: records of the pins topic the lookups read (bounded by time)."""

    ranges: OffsetRanges
    pinned: bool
    start_boundary: Boundary | None = None
    stop_boundary: Boundary | None = None
    pins_read: int = 0


@dataclass(frozen=True)
class RunRequest(OffsetRequest):
    """What a run resolves (an :class:`~airflow_provider_kafka_spark.offsets.resolve.OffsetRequest`,
    checked when built) and ``pins_topic``, the compacted topic of its pins and boundaries."""

    pins_topic: str = PINS_TOPIC

    def recorded(self) -> dict[str, str | None]:
        """What the run asks for, as its pin records it (see :func:`pins.pinned_ranges`)."""
        return {"subscription": str(self.subscription), "start": str(self.start),
                "stop": str(self.stop), "group_id": self.group_id or None,
                "isolation_level": self.isolation_level}


def resolve_run(
    kafka_config: KafkaConfig | Mapping[str, Any],
    run: RunKey,
    request: RunRequest,
    *,
    since: datetime | None = None,
    re_resolve: bool = False,
    table_offsets: Mapping[Key, int] | Callable[[], Mapping[Key, int] | None] | None = None,
) -> RunResolution:
    """The ranges of ``run``: its pinned ones, else ``request`` resolved (tiling with its
    neighbours, see the module doc) and pinned.

    ``since``: when the run began (in Airflow its ``run_after``); lookups read the pins
    written since ``since - PIN_MARGIN`` (``None``: from the log start). ``re_resolve``:
    resolve even when the run has pinned ranges, and pin the new ones. ``table_offsets`` may
    be a function, called only when the run is resolved (reading a table's commits takes a
    Spark session); see
    :func:`~airflow_provider_kafka_spark.offsets.resolve.resolve_offsets`. One admin client
    serves the whole resolution (the pins topic, the offsets), and one
    :class:`~airflow_provider_kafka_spark.offsets.pins.PinsTopic` its pin and boundaries.

    Raises:
        what :func:`resolve_offsets` raises, before anything is pinned;
        PinnedRequestChangedError: the run's pin answers another request;
        InternalTopicError: the pins topic could not be read or written.
    """
    kafka_config = KafkaConfig.of(kafka_config)
    admin = admin_client(kafka_config)
    pins = PinsTopic(kafka_config, admin, topic=request.pins_topic, timeout=request.timeout)
    if not re_resolve:
        pinned = pins.pinned(run, request.recorded(), since)
        if pinned is not None:
            return RunResolution(pinned, pinned=True, pins_read=pins.scanned)
    recorded = table_offsets() if callable(table_offsets) else table_offsets
    sides = {side: spec.millis for side, spec in (("start", request.start), ("stop", request.stop))
             if isinstance(spec, offset_specs.Timestamp)}
    found = {side: pins.boundary(run, millis, since) for side, millis in sides.items()}

    def resolve(taken: Mapping[str, Boundary | None]) -> OffsetRanges:
        start, stop = taken.get("start"), taken.get("stop")
        return resolve_request(kafka_config, admin, request, table_offsets=recorded,
                               boundaries=(start.offsets if start else None,
                                           stop.offsets if stop else None))

    ranges = resolve(found)
    fixing = {side: sides[side] for side, boundary in found.items() if boundary is None}
    if fixing:
        winners = pins.fix_boundaries(run, {
            side: (millis, {(r.topic, r.partition): r.start if side == "start" else r.stop
                            for r in ranges})
            for side, millis in fixing.items()}, since)
        lost_race = {side: b for side, b in winners.items() if b.fixed_by != run}
        if lost_race:
            found |= lost_race
            ranges = resolve(found)
    pins.pin(run, ranges, request.recorded())
    return RunResolution(ranges, pinned=False, start_boundary=found.get("start"),
                         stop_boundary=found.get("stop"), pins_read=pins.scanned)
