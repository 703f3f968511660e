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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka.admin import AdminClient

import airflow_provider_kafka_spark.offsets.specs as offset_specs
from airflow_provider_kafka_spark.errors import InternalTopicError
from airflow_provider_kafka_spark.offsets.cluster import Key, admin_client
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.internal_topics import (
    InternalRecord,
    durable_producer,
    ensure_compacted_topic,
    partition_for,
    produce_durably,
    read_partition,
)
from airflow_provider_kafka_spark.offsets.pins import (
    PINS_PARTITIONS,
    PINS_TOPIC,
    RunKey,
    lookup_pin,
    pin_ranges,
    read_start,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.offsets.resolve import OffsetRequest, resolve_request

_BOUNDARY_VERSION = 1


@dataclass(frozen=True)
class Boundary:
    """Where the runs of one task meet at ``millis``: ``offsets`` per partition, fixed by
    ``fixed_by`` (the run that first resolved that instant, as its ``side``: start or stop)."""

    millis: int
    offsets: Mapping[Key, int]
    fixed_by: RunKey
    side: str

    def __str__(self) -> str:
        return f"the {self.side} of {self.fixed_by}"


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
    serves the whole resolution (the pin lookup, the boundaries, the offsets, the pin).

    Raises:
        what :func:`resolve_offsets` raises, before anything is pinned;
        PinnedRequestChangedError: the run's pin answers another request;
        InternalTopicError: the pins topic could not be read or written.
    """
    kafka_config = KafkaConfig.of(kafka_config)
    topic, timeout = request.pins_topic, request.timeout
    admin = admin_client(kafka_config)
    scanned = 0
    if not re_resolve:
        pinned = lookup_pin(kafka_config, run, request.recorded(), since=since, topic=topic,
                            timeout=timeout, admin=admin)
        if pinned.ranges is not None:
            return RunResolution(pinned.ranges, pinned=True, pins_read=pinned.scanned)
        scanned = pinned.scanned
    recorded = table_offsets() if callable(table_offsets) else table_offsets
    boundaries = _Boundaries(kafka_config, run, since, topic, timeout, admin=admin)
    sides = {side: spec.millis for side, spec in (("start", request.start), ("stop", request.stop))
             if isinstance(spec, offset_specs.Timestamp)}
    found = {side: boundaries.find(millis) for side, millis in sides.items()}

    def resolve(taken: Mapping[str, Boundary | None]) -> OffsetRanges:
        start, stop = taken.get("start"), taken.get("stop")
        return resolve_request(kafka_config, request, table_offsets=recorded, admin=admin,
                               boundaries=(start.offsets if start else None,
                                           stop.offsets if stop else None))

    ranges = resolve(found)
    fixing = {side: sides[side] for side, boundary in found.items() if boundary is None}
    if fixing:
        winners = boundaries.fix({
            side: (millis, {(r.topic, r.partition): r.start if side == "start" else r.stop
                            for r in ranges})
            for side, millis in fixing.items()})
        lost_race = {side: b for side, b in winners.items() if b.fixed_by != run}
        if lost_race:
            found |= lost_race
            ranges = resolve(found)
    pin_ranges(kafka_config, run, ranges, request.recorded(), topic=topic, timeout=timeout,
               admin=admin)
    return RunResolution(ranges, pinned=False, start_boundary=found.get("start"),
                         stop_boundary=found.get("stop"),
                         pins_read=scanned + boundaries.read)


class _Boundaries:
    """The boundary records of one run's task in the pins topic."""

    def __init__(self, kafka_config: KafkaConfig, run: RunKey, since: datetime | None,
                 topic: str, timeout: float, *, admin: AdminClient) -> None:
        self.kafka_config, self.run, self.since = kafka_config, run, since
        self.topic, self.timeout = topic, timeout
        self.admin = admin
        self.partitions = ensure_compacted_topic(self.admin, topic, partitions=PINS_PARTITIONS,
                                                 timeout=timeout)
        self.read = 0

    def _prefix(self, millis: int) -> str:
        run = self.run
        return json.dumps(["boundary", _BOUNDARY_VERSION, run.dag_id, run.task_id,
                           run.map_index, millis])

    def find(self, millis: int) -> Boundary | None:
        """The first boundary record of ``millis`` written since the lookup's start."""
        prefix = self._prefix(millis)
        partition = partition_for(prefix, self.partitions)
        since = self.since
        moment = datetime.fromtimestamp(millis / 1000, UTC)
        start = read_start(self.admin, self.topic, partition,
                           None if since is None else min(since, moment), self.timeout)
        head = prefix[:-1].encode() + b", "
        read = read_partition(self.kafka_config, self.topic, partition, start_offset=start,
                              keep=lambda k: k.startswith(head), timeout=self.timeout)
        self.read += read.scanned
        for record in read.records:
            if record.value is not None:
                return self._decode(millis, record)
        return None

    def fix(self, sides: Mapping[str, tuple[int, Mapping[Key, int]]]) -> dict[str, Boundary]:
        """Write this run's boundary record for each side, then return the boundary that won
        each instant (the first record in the log: this run's, or a neighbour's written
        meanwhile)."""
        producer = durable_producer(self.kafka_config)
        for side, (millis, offsets) in sides.items():
            prefix = self._prefix(millis)
            key = json.dumps([*json.loads(prefix), self.run.run_id]).encode()
            value = {"side": side, "offsets": [[t, p, o] for (t, p), o in sorted(offsets.items())]}
            reason = produce_durably(producer, self.topic, partition_for(prefix, self.partitions),
                                     key, json.dumps(value).encode(), self.timeout)
            if reason is not None:
                raise InternalTopicError(
                    f"could not record where {self.run} {side}s in {self.topic!r}: {reason}. "
                    "Nothing was pinned or read; retry the task.")
        winners: dict[str, Boundary] = {}
        for side, (millis, _offsets) in sides.items():
            winner = self.find(millis)
            if winner is None:
                raise InternalTopicError(
                    f"the boundary record {self.run} just wrote to {self.topic!r} is not there "
                    "when read back: the topic's records are being deleted. Check its "
                    "cleanup.policy (compact) and retention; retry the task.")
            winners[side] = winner
        return winners

    def _decode(self, millis: int, record: InternalRecord) -> Boundary:
        assert record.value is not None
        try:
            *_, dag_id, task_id, map_index, _millis, run_id = json.loads(record.key)
            value = json.loads(record.value)
            offsets = {(str(t), int(p)): int(o) for t, p, o in value["offsets"]}
            side = str(value["side"])
        except (ValueError, TypeError, KeyError) as exc:
            raise InternalTopicError(
                f"a boundary record of {self.run.dag_id}/{self.run.task_id} in {self.topic!r} "
                f"at offset {record.offset} cannot be read ({exc}): another version of this "
                "package wrote it. Resolve the run with explicit offsets.") from None
        return Boundary(millis, offsets, RunKey(dag_id, task_id, run_id, map_index), side)
