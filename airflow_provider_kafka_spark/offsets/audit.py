"""An audit of what a task read: the offset ranges its runs pinned, tiled per partition.

Every resolution pins its ranges (:mod:`~airflow_provider_kafka_spark.offsets.pins`), so the
pins of a task since a moment say exactly which offsets its runs read. :func:`audit` lays
them side by side per topic partition and reports what does not tile:

* a **gap**: offsets between two runs' ranges that no run read. It is *explained* when the run
  right after it (its range starts where the gap stops) recorded the loss when it resolved:
  ``OffsetRanges.lost`` of that partition is at least the gap's size (``on_data_loss="skip"``
  moved its start past deleted data). Any other gap is *unexplained*: a run with explicit
  offsets that skipped some, a re-resolution that moved on, a run cleared and deleted. The
  audit also says how many of the gap's offsets are deleted now (below the partition's log
  start offset), i.e. whether they can still be read.
* an **overlap**: offsets that two or more runs read, with the runs.

:func:`audit_ranges` is the arithmetic on plain data; :func:`audit` reads the pins and the
log start offsets and calls it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from airflow_provider_kafka_spark.errors import ConfigurationError, InternalTopicError
from airflow_provider_kafka_spark.offsets.cluster import (
    admin_client,
    list_offsets,
    partition_counts,
)
from airflow_provider_kafka_spark.offsets.commit import committed_offsets
from airflow_provider_kafka_spark.offsets.config import KafkaConfig, check_timeout
from airflow_provider_kafka_spark.offsets.pins import PINS_TOPIC, Pin, PinsTopic
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.offsets.specs import check_topic_name, shown

Key = tuple[str, int]
"""A partition: ``(topic, partition)``."""


@dataclass(frozen=True)
class AuditedRun:
    """One run of the audited task (one map index of it, for a mapped task) and the ranges of
    its newest pin. ``map_index`` is -1 for an unmapped task; ``pinned_at`` is when the pin
    was written."""

    run_id: str
    map_index: int
    pinned_at: datetime
    ranges: OffsetRanges

    @classmethod
    def from_pin(cls, pin: Pin) -> AuditedRun:
        return cls(pin.run.run_id, pin.run.map_index, pin.pinned_at, pin.ranges)

    def __str__(self) -> str:
        return self.run_id if self.map_index < 0 else f"{self.run_id}[{self.map_index}]"

    def to_dict(self) -> dict[str, Any]:
        """The run as :meth:`Audit.to_dict` lists it."""
        ranges = self.ranges
        return {
            "run_id": self.run_id,
            "map_index": self.map_index,
            "pinned_at": _iso(self.pinned_at),
            "resolved_at": _iso(ranges.resolved_at),
            "starting": ranges.starting,
            "stopping": ranges.stopping,
            "offsets": ranges.total(),
            "lost": [{"topic": t, "partition": p, "offsets": n}
                     for (t, p), n in ranges.lost.items()],
            "lag": [{"topic": t, "partition": p, "offsets": n}
                    for (t, p), n in ranges.lag.items()],
            "ranges": [{"topic": r.topic, "partition": r.partition, "start": r.start,
                        "stop": r.stop} for r in ranges],
        }


@dataclass(frozen=True)
class Gap:
    """Offsets ``[start, stop)`` of one partition that no run read, between the range of
    ``after_run`` (it stops at ``start``) and that of ``before_run`` (it starts at ``stop``).

    ``deleted``: how many of them are below the partition's log start offset now (all of them
    when the partition no longer exists). ``explained``: ``before_run`` recorded at least
    ``stop - start`` offsets of this partition as lost to deletion when it resolved.
    ``reason`` says which, in words, and how to read what is still there.
    """

    topic: str
    partition: int
    start: int
    stop: int
    after_run: AuditedRun
    before_run: AuditedRun
    deleted: int
    explained: bool
    reason: str

    @property
    def size(self) -> int:
        """``stop - start``: the offsets no run read."""
        return self.stop - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "stop": self.stop, "after_run": self.after_run.run_id,
                "before_run": self.before_run.run_id, "deleted": self.deleted,
                "explained": self.explained, "reason": self.reason}


@dataclass(frozen=True)
class Overlap:
    """Offsets ``[start, stop)`` of one partition that every run of ``runs`` (two or more,
    in the order they were pinned) read. A stretch read by a changing set of runs is one
    overlap per set."""

    topic: str
    partition: int
    start: int
    stop: int
    runs: tuple[AuditedRun, ...]

    @property
    def size(self) -> int:
        """``stop - start``: the offsets read more than once."""
        return self.stop - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "stop": self.stop, "runs": [r.run_id for r in self.runs]}


@dataclass(frozen=True)
class PartitionAudit:
    """One topic partition that the audited runs' ranges name.

    ``covered``: the offsets read, as merged ``(start, stop)`` ranges in offset order (empty
    ranges cover nothing). ``gaps`` lie between ``first`` and ``last``; nothing is said about
    offsets before the first range or after the last. ``log_start``: the partition's log start
    offset at the audit, ``None`` when it no longer exists. ``committed``: with a ``group_id``,
    the group's committed offset on the partition (``None``: none, or no group asked); after
    the commit task of the newest run it equals ``last``, and anything else says that the
    group moved apart from the runs (another consumer, a manual reset, a commit that failed).
    """

    topic: str
    partition: int
    log_start: int | None
    covered: tuple[tuple[int, int], ...]
    gaps: tuple[Gap, ...]
    overlaps: tuple[Overlap, ...]
    committed: int | None = None

    @property
    def first(self) -> int | None:
        """The lowest offset read (the start of the first covered range); ``None`` when every
        range of this partition is empty."""
        return self.covered[0][0] if self.covered else None

    @property
    def last(self) -> int | None:
        """The stop (exclusive) of the last covered range; ``None`` when nothing was read."""
        return self.covered[-1][1] if self.covered else None

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "log_start": self.log_start,
                "first": self.first, "last": self.last,
                "covered": [[start, stop] for start, stop in self.covered],
                "gaps": [gap.to_dict() for gap in self.gaps],
                "overlaps": [overlap.to_dict() for overlap in self.overlaps],
                "committed": self.committed}


@dataclass(frozen=True)
class Audit:
    """What the runs of ``dag_id``/``task_id`` pinned in ``pins_topic`` since ``since`` read.

    ``runs``: the newest pin of every run (every map index) written at or after ``since``,
    ordered by ``pinned_at``. ``partitions``: one :class:`PartitionAudit` per partition named
    by any of their ranges, sorted by (topic, partition).
    """

    dag_id: str
    task_id: str
    since: datetime
    pins_topic: str
    runs: tuple[AuditedRun, ...]
    partitions: tuple[PartitionAudit, ...]
    group_id: str | None = None

    @property
    def gaps(self) -> tuple[Gap, ...]:
        """Every gap, by partition then offset."""
        return tuple(gap for p in self.partitions for gap in p.gaps)

    @property
    def unexplained_gaps(self) -> tuple[Gap, ...]:
        return tuple(gap for gap in self.gaps if not gap.explained)

    @property
    def overlaps(self) -> tuple[Overlap, ...]:
        """Every overlap, by partition then offset."""
        return tuple(overlap for p in self.partitions for overlap in p.overlaps)

    @property
    def ok(self) -> bool:
        """No unexplained gap and no overlap: every offset between a partition's first and
        last range was read exactly once, or recorded as deleted by the run after it."""
        return not self.unexplained_gaps and not self.overlaps

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the audit's fields, ``runs`` and ``partitions`` as lists of
        dicts, times in ISO-8601 (UTC), and the counts ``gaps``, ``unexplained_gaps``,
        ``overlaps`` and ``ok``. Gaps and overlaps name runs by ``run_id`` (see ``runs`` for
        the map indexes)."""
        return {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "since": _iso(self.since),
            "pins_topic": self.pins_topic,
            "group_id": self.group_id,
            "runs": [run.to_dict() for run in self.runs],
            "partitions": [p.to_dict() for p in self.partitions],
            "gaps": len(self.gaps),
            "unexplained_gaps": len(self.unexplained_gaps),
            "overlaps": len(self.overlaps),
            "ok": self.ok,
        }


def audit(kafka_config: KafkaConfig | Mapping[str, Any], dag_id: str, task_id: str, *, since: datetime,
          group_id: str | None = None, pins_topic: str = PINS_TOPIC,
          timeout: float = 30.0) -> Audit:
    """Audit what the runs of ``dag_id``/``task_id`` read: the newest pin of every run (every
    map index of a mapped task, all together per partition) written at or after ``since``,
    tiled per partition by :func:`audit_ranges`.

    Asks the cluster for its metadata once, reads the pins (the cost is the pins written since
    ``since`` minus :data:`~airflow_provider_kafka_spark.offsets.pins.PIN_MARGIN`), then the log
    start offsets of every partition the ranges name, in one batched request. Nothing is
    created or written.

    ``since``: an aware datetime. ``group_id``: the consumer group the runs commit to (the
    commit task's group), whose committed offsets are reported per partition
    (:attr:`PartitionAudit.committed`); they do not change :attr:`Audit.ok`. ``timeout``:
    seconds for each of those cluster calls.

    Raises:
        ConfigurationError: an empty ``dag_id`` or ``task_id``, a naive ``since``, a bad
            ``timeout`` or client config (before any cluster call).
        InternalTopicError: ``pins_topic`` does not exist on the cluster (no run ever pinned
            there: check the name and the cluster), or cannot be read.
        OffsetResolutionError: the cluster did not answer within ``timeout``.
    """
    for name, value in (("dag_id", dag_id), ("task_id", task_id)):
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(f"audit: {name}={shown(value)} is not valid; pass the id "
                                     "of the resolving task's DAG and of the task, e.g. "
                                     "dag_id='kafka_hourly_ingest', task_id='resolve'.")
    if not isinstance(since, datetime) or since.utcoffset() is None:
        raise ConfigurationError(f"audit: since={shown(since)} must be an aware datetime, e.g. "
                                 "datetime.now(UTC) - timedelta(days=7).")
    if group_id is not None and (not isinstance(group_id, str) or not group_id.strip()):
        raise ConfigurationError(f"audit: group_id={shown(group_id)} is not valid; pass the "
                                 "consumer group the commit task commits to, or None.")
    check_topic_name(pins_topic, "audit: pins_topic")
    seconds = check_timeout(timeout)
    kafka_config = KafkaConfig.of(kafka_config)
    admin = admin_client(kafka_config)
    counts = partition_counts(admin, kafka_config.cluster, seconds)
    if pins_topic not in counts:
        raise InternalTopicError(
            f"the pins topic {pins_topic!r} does not exist on the Kafka cluster at "
            f"{kafka_config.cluster}: no run pinned ranges there. Check the pins topic's "
            f"name (the default is {PINS_TOPIC!r}) and that this is the cluster the DAG reads."
        )
    pins = PinsTopic(kafka_config, admin, topic=pins_topic, timeout=seconds).pins_of(
        dag_id, task_id=task_id, since=since)
    runs = tuple(AuditedRun.from_pin(pin) for pin in pins if pin.pinned_at >= since)
    named = sorted({(r.topic, r.partition) for run in runs for r in run.ranges})
    existing = [key for key in named if key[1] < counts.get(key[0], 0)]
    log_starts: dict[Key, int | None] = dict.fromkeys(named)
    if existing:
        log_starts.update(list_offsets(admin, existing, "earliest",
                                       isolation_level="read_uncommitted", timeout=seconds))
    partitions = audit_ranges(runs, log_starts)
    if group_id is not None and existing:
        committed = committed_offsets(kafka_config, group_id, existing,
                                      time.monotonic() + seconds)
        partitions = tuple(replace(p, committed=committed.get((p.topic, p.partition)))
                           for p in partitions)
    return Audit(dag_id, task_id, since, pins_topic, runs, partitions, group_id)


def audit_ranges(runs: Sequence[AuditedRun],
                 log_starts: Mapping[Key, int | None]) -> tuple[PartitionAudit, ...]:
    """Tile the ranges of ``runs`` per partition: what they cover, the gaps between them and
    the overlaps (no I/O).

    ``runs``: distinct runs (one pin each), in the order they were pinned (the order of
    ``runs`` and ``Overlap.runs``). ``log_starts``: each partition's log start offset now;
    ``None`` or absent: the partition no longer exists (every offset of a gap is deleted).

    Per partition, with empty ranges (``start == stop``) covering nothing:

    * ``covered``: the union of the ranges, merged.
    * a gap is every stretch between the lowest start and the highest stop that no range
      covers. ``after_run``: the run whose range stops where the gap starts (of several, the
      last pinned). ``before_run``: a run whose range starts where the gap stops, an empty
      range included; of several, the first pinned whose ``lost`` covers the gap, else the
      first pinned with a non-empty range. The gap is explained when ``before_run`` recorded
      ``lost >= stop - start`` for the partition.
    * an overlap is every stretch that two or more ranges cover, with those runs; adjacent
      stretches covered by the same runs are one overlap.

    Returns one :class:`PartitionAudit` per partition that any range names (empty ranges
    included), sorted by (topic, partition).
    """
    by_partition: dict[Key, list[tuple[int, AuditedRun, PartitionRange]]] = defaultdict(list)
    for order, run in enumerate(runs):
        for r in run.ranges:
            by_partition[(r.topic, r.partition)].append((order, run, r))
    return tuple(_audit_partition(key, entries, log_starts.get(key))
                 for key, entries in sorted(by_partition.items()))


def _audit_partition(key: Key, entries: list[tuple[int, AuditedRun, PartitionRange]],
                     log_start: int | None) -> PartitionAudit:
    """A sweep over the boundaries of the non-empty ranges: between two boundaries the set of
    covering runs is constant; none is a gap, two or more an overlap."""
    starts_at: dict[int, list[int]] = defaultdict(list)
    stops_at: dict[int, list[int]] = defaultdict(list)
    for i, (_, _, r) in enumerate(entries):
        if r.start < r.stop:
            starts_at[r.start].append(i)
            stops_at[r.stop].append(i)
    bounds = sorted(starts_at.keys() | stops_at.keys())
    covered: list[tuple[int, int]] = []
    gaps: list[Gap] = []
    overlaps: list[Overlap] = []
    active: set[int] = set()
    for low, high in zip(bounds, bounds[1:], strict=False):
        active.difference_update(stops_at.get(low, ()))
        active.update(starts_at.get(low, ()))
        if not active:
            after = max(stops_at[low], key=lambda i: entries[i][0])
            gaps.append(_gap(key, low, high, entries, after, log_start))
            continue
        if covered and covered[-1][1] == low:
            covered[-1] = (covered[-1][0], high)
        else:
            covered.append((low, high))
        if len(active) >= 2:
            runs = tuple(entries[i][1] for i in sorted(active, key=lambda i: entries[i][0]))
            if overlaps and overlaps[-1].stop == low and overlaps[-1].runs == runs:
                overlaps[-1] = Overlap(key[0], key[1], overlaps[-1].start, high, runs)
            else:
                overlaps.append(Overlap(key[0], key[1], low, high, runs))
    return PartitionAudit(key[0], key[1], log_start, tuple(covered), tuple(gaps),
                          tuple(overlaps))


def _gap(key: Key, start: int, stop: int, entries: list[tuple[int, AuditedRun, PartitionRange]],
         after: int, log_start: int | None) -> Gap:
    size = stop - start
    nexts = sorted((e for e in entries if e[2].start == stop), key=lambda e: e[0])
    explaining = [e for e in nexts if e[1].ranges.lost.get(key, 0) >= size]
    before = explaining[0] if explaining else next(e for e in nexts if e[2].size > 0)
    deleted = size if log_start is None else max(0, min(stop, log_start) - start)
    lost = before[1].ranges.lost.get(key, 0)
    where = f"{key[0]}/{key[1]}"
    if explaining:
        reason = (f"run {before[1]} recorded {lost} offset(s) of {where} as lost to deletion "
                  f"when it resolved (on_data_loss='skip'); ")
    elif lost:
        reason = (f"no run read offsets [{start}, {stop}) of {where}; run {before[1]}, which "
                  f"starts after them, recorded {lost} lost offset(s), fewer than the gap's "
                  f"{size}; ")
    else:
        reason = (f"no run read offsets [{start}, {stop}) of {where} and run {before[1]}, which "
                  "starts after them, recorded no loss; ")
    if log_start is None:
        reason += "the partition no longer exists."
    elif deleted == size:
        reason += f"all {size} are deleted now (below the log start offset {log_start})."
    else:
        readable = max(start, log_start)
        if deleted:
            reason += (f"{deleted} of the {size} are deleted now (below the log start offset "
                       f"{log_start}); ")
        else:
            reason += f"none is deleted (the log starts at {log_start}); "
        reason += (f"[{readable}, {stop}) can still be read, e.g. with the explicit offsets "
                   f"start {_offsets(key, readable)}, stop {_offsets(key, stop)}.")
    return Gap(key[0], key[1], start, stop, entries[after][1], before[1], deleted,
               bool(explaining), reason)


def _offsets(key: Key, offset: int) -> str:
    """An explicit offsets spec of one partition, as ``parse_offset_spec`` reads it."""
    return json.dumps({key[0]: {str(key[1]): offset}}, separators=(",", ":"))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()
