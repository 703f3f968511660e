"""Pinned run ranges: the first resolution of a run, kept in Kafka so every later try reuses it.

A scheduler's run (in Airflow: ``dag_id``, ``task_id``, ``run_id``, ``map_index``) resolves its
offset specs once; :func:`pin_ranges` stores the result in the compacted topic
``_kafka_spark_pins`` (created on first use) and :func:`pinned_ranges` finds it again. A retry,
a cleared task or a cleared run therefore reads exactly the slice its first try read, even with
``latest`` or ``committed`` specs whose answers have moved on since. Re-resolving is an
explicit choice of the caller, who pins the new result over the old one.

A pin also records the request it answers (the subscription, the specs, the group and the
isolation level, as text). A run whose request differs from its pin's (a run deleted and
created again under the same id with another conf, a DAG whose topics were edited before an
old run was cleared) is refused with :class:`PinnedRequestChangedError` instead of silently
re-reading the old slice or reading a new one: the caller decides, by re-resolving.

Each run's records live in one partition of the pins topic, chosen by a hash of the run key,
and the newest record of a key wins. Compaction keeps the newest record of every key forever
(the topic has no time retention), so a run can be cleared years later.

**Lookups do not grow with history.** A run's pins are written when it resolves, never before
the run exists. A lookup given ``since`` (the run's own start, in Airflow its ``run_after``)
finds the first offset stamped at ``since - PIN_MARGIN`` through the broker's time index and
reads from there: it costs the pins written since the run began, whatever came before. A
scheduled run, a retry or a clear of a recent run reads minutes to days of pins; a clear of a
run a year old reads that year's pins of one partition (once). Without ``since`` a lookup
reads the partition from its log start, as before.

**Boundaries.** The same topic keeps the *boundary records* of the runs that tile
(:mod:`~airflow_provider_kafka_spark.offsets.runs` says what they mean): where the runs of
one task meet at an instant, written by the first run that resolved it, read by its neighbours.
One operation goes through one :class:`PinsTopic`: its admin client, the topic's partition
count asked once, one producer.

**Retention.** None by time: the topic is compacted only, one record per run (plus one per
interval boundary). Should an operator set
``retention.ms`` on it anyway, a clear of a run older than that finds no pin and resolves its
specs again, as a first resolution (logged as such): ``timestamp:`` intervals give the same
slice while their records are retained; ``latest`` and ``committed`` answer anew.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import InternalTopicError, PinnedRequestChangedError
from airflow_provider_kafka_spark.offsets.cluster import Key, admin_client
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.internal_topics import (
    InternalRecord,
    durable_producer,
    end_offset,
    ensure_compacted_topic,
    log_start_offset,
    offset_for_time,
    partition_for,
    produce_durably,
    read_partition,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.offsets.subscription import INTERNAL_TOPIC_PREFIX

PINS_TOPIC = f"{INTERNAL_TOPIC_PREFIX}pins"
"""The default compacted topic of pinned run ranges."""

PINS_PARTITIONS = 8
"""Partitions of a pins topic this package creates."""

PIN_MARGIN = timedelta(hours=1)
"""How long before its ``since`` a lookup starts reading: room for clock skew between the
scheduler and the brokers, and for a run resolved somewhat before the time it is anchored to."""

_KEY_VERSION = 1
_PIN_VERSION = 2  # {"pin": 2, "request": {...}, "ranges": {...}}; version 1 was bare ranges
_BOUNDARY_VERSION = 1


@dataclass(frozen=True)
class RunKey:
    """Which run a pin belongs to. ``map_index`` is -1 for an unmapped task."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    def encode(self) -> bytes:
        """The record key: a JSON array, unambiguous whatever characters the ids hold."""
        return json.dumps([_KEY_VERSION, self.dag_id, self.task_id, self.run_id,
                           self.map_index]).encode()

    def __str__(self) -> str:
        mapped = f"[{self.map_index}]" if self.map_index >= 0 else ""
        return f"{self.dag_id}/{self.task_id}{mapped} run {self.run_id}"


def pinned_ranges(kafka_config: KafkaConfig | Mapping[str, Any], run: RunKey,
                  request: Mapping[str, str | None], *, since: datetime | None = None,
                  topic: str = PINS_TOPIC, timeout: float = 30.0) -> OffsetRanges | None:
    """The ranges pinned for ``run``, or ``None`` when it has none (its first resolution).

    ``request`` is what the run asks for now (e.g. ``{"subscription": "topics:orders",
    "start": "earliest", "stop": "latest", ...}``); it must equal the request the pin was made
    for. Pins written before requests were recorded are used as they are.

    ``since``: when the run began (in Airflow its ``run_after``); pins written before
    ``since - PIN_MARGIN`` are not read. ``None`` reads the pins partition from its log start.

    Raises:
        InternalTopicError: the pins topic could not be created or read.
        PinnedRequestChangedError: the pin answers another request (names what changed).
    """
    config = KafkaConfig.of(kafka_config)
    pins = PinsTopic(config, admin_client(config), topic=topic, timeout=timeout)
    return pins.pinned(run, request, since)


def pin_ranges(kafka_config: KafkaConfig | Mapping[str, Any], run: RunKey, ranges: OffsetRanges,
               request: Mapping[str, str | None], *, topic: str = PINS_TOPIC,
               timeout: float = 30.0) -> None:
    """Store ``ranges``, the answer to ``request``, as the pinned ranges of ``run`` (replacing
    earlier ones), durably: returns once every in-sync replica has the record.

    Raises:
        InternalTopicError: the pins topic could not be created or written.
    """
    config = KafkaConfig.of(kafka_config)
    PinsTopic(config, admin_client(config), topic=topic, timeout=timeout).pin(run, ranges, request)


@dataclass(frozen=True)
class Pin:
    """The newest pinned ranges of one run. ``request`` is ``None`` for pins written before
    requests were recorded; ``pinned_at`` is when the record was written (its timestamp)."""

    run: RunKey
    ranges: OffsetRanges
    request: Mapping[str, str | None] | None
    pinned_at: datetime


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


class PinsTopic:
    """The pins topic as one operation uses it: through the operation's ``admin`` client,
    its partition count asked once (the topic is created on first use, compacted), one
    durable producer made on the first write. ``scanned``: the records its lookups read.

    It keeps the runs' pins (:meth:`pinned`, :meth:`pin`, :meth:`pins_of`) and the boundary
    records of their tasks (:meth:`boundary`, :meth:`fix_boundaries`).

    Raises:
        InternalTopicError: the topic could not be created or its config read, or it is
            not compacted.
    """

    def __init__(self, kafka_config: KafkaConfig, admin: AdminClient, *,
                 topic: str = PINS_TOPIC, timeout: float = 30.0) -> None:
        self.kafka_config, self.admin = kafka_config, admin
        self.topic, self.timeout = topic, timeout
        self.partitions = ensure_compacted_topic(admin, topic, partitions=PINS_PARTITIONS,
                                                 timeout=timeout)
        self.scanned = 0
        self._producer: Producer | None = None

    def pinned(self, run: RunKey, request: Mapping[str, str | None],
               since: datetime | None = None) -> OffsetRanges | None:
        """:func:`pinned_ranges`: the ranges pinned for ``run`` (``None``: none), answering
        ``request``, looked for in what was written since ``since - PIN_MARGIN``."""
        key = run.encode()
        records = self._read(partition_for(key.decode(), self.partitions), since,
                             lambda k: k == key)
        if not records or records[-1].value is None:
            return None
        found = _decode_pin(run, records[-1], self.topic)
        pinned_request, ranges = found.request, found.ranges
        if pinned_request is not None and dict(pinned_request) != dict(request):
            changes = "; ".join(
                f"{name} {pinned_request.get(name)!r} -> {request.get(name)!r}"
                for name in sorted(set(pinned_request) | set(request))
                if pinned_request.get(name) != request.get(name))
            raise PinnedRequestChangedError(
                f"{run} first resolved another request than it makes now ({changes}); its "
                f"pinned ranges (resolved at {ranges.resolved_at.isoformat()}) answer the old "
                "one. Nothing was read. To read what the run asks for now, re-resolve it "
                "(re_resolve=True or the Param re_resolve); to re-read the old slice, run it "
                "with its old settings."
            )
        return ranges

    def pin(self, run: RunKey, ranges: OffsetRanges, request: Mapping[str, str | None]) -> None:
        """:func:`pin_ranges`."""
        key = run.encode()
        value = {"pin": _PIN_VERSION, "request": dict(request), "ranges": ranges.to_dict()}
        reason = self._write(key.decode(), key, json.dumps(value, sort_keys=True).encode())
        if reason is not None:
            raise InternalTopicError(
                f"could not pin the resolved ranges of {run} in {self.topic!r}: {reason}. "
                "Nothing was read yet; retry the task."
            )

    def pins_of(self, dag_id: str, *, task_id: str | None = None,
                since: datetime) -> list[Pin]:
        """The pins of ``dag_id`` (of ``task_id`` only, when given) written since
        ``since - PIN_MARGIN``, the newest per run, ordered by ``pinned_at``.

        Reads every partition of the pins topic from the offset its time index gives for that
        moment: the cost is the pins written since then, whatever came before.

        Raises:
            InternalTopicError: the pins topic could not be read, or holds a pin of this DAG
                that another version of this package wrote.
        """
        newest: dict[RunKey, InternalRecord] = {}
        for partition in range(self.partitions):
            for record in self._read(partition, since,
                                     lambda k: _pin_of(k, dag_id, task_id) is not None):
                run = _pin_of(record.key, dag_id, task_id)
                assert run is not None
                newest[run] = record
        pins = [_decode_pin(run, record, self.topic) for run, record in newest.items()
                if record.value is not None]
        return sorted(pins, key=lambda pin: (pin.pinned_at, str(pin.run)))

    def boundary(self, run: RunKey, millis: int, since: datetime | None) -> Boundary | None:
        """The first boundary record of ``run``'s task (and map index) at ``millis``, looked
        for in what was written since ``min(since, millis) - PIN_MARGIN`` (``since`` ``None``:
        since the log start); ``None``: no neighbour fixed that instant yet."""
        prefix = _boundary_prefix(run, millis)
        moment = datetime.fromtimestamp(millis / 1000, UTC)
        head = prefix[:-1].encode() + b", "
        records = self._read(partition_for(prefix, self.partitions),
                             None if since is None else min(since, moment),
                             lambda k: k.startswith(head))
        for record in records:
            if record.value is not None:
                return self._decode_boundary(run, millis, record)
        return None

    def fix_boundaries(self, run: RunKey, sides: Mapping[str, tuple[int, Mapping[Key, int]]],
                       since: datetime | None) -> dict[str, Boundary]:
        """Write ``run``'s boundary record for each side (``{side: (millis, offsets)}``), then
        return the boundary that won each instant (the first record in the log: this run's,
        or a neighbour's written meanwhile; see :meth:`boundary` for ``since``).

        Raises:
            InternalTopicError: a record could not be written, or is not there when read back.
        """
        for side, (millis, offsets) in sides.items():
            prefix = _boundary_prefix(run, millis)
            key = json.dumps([*json.loads(prefix), run.run_id]).encode()
            value = {"side": side, "offsets": [[t, p, o] for (t, p), o in sorted(offsets.items())]}
            reason = self._write(prefix, key, json.dumps(value).encode())
            if reason is not None:
                raise InternalTopicError(
                    f"could not record where {run} {side}s in {self.topic!r}: {reason}. "
                    "Nothing was pinned or read; retry the task.")
        winners: dict[str, Boundary] = {}
        for side, (millis, _offsets) in sides.items():
            winner = self.boundary(run, millis, since)
            if winner is None:
                raise InternalTopicError(
                    f"the boundary record {run} just wrote to {self.topic!r} is not there "
                    "when read back: the topic's records are being deleted. Check its "
                    "cleanup.policy (compact) and retention; retry the task.")
            winners[side] = winner
        return winners

    def _read(self, partition: int, since: datetime | None,
              keep: Callable[[bytes], bool]) -> tuple[InternalRecord, ...]:
        """The records of ``partition`` whose key ``keep`` accepts, written since
        ``since - PIN_MARGIN`` (``None``: since the log start), up to its high watermark: both
        asked through the operation's admin client, which knows the cluster already."""
        start = read_start(self.admin, self.topic, partition, since, self.timeout)
        if start is None:
            start = log_start_offset(self.admin, self.topic, partition, timeout=self.timeout)
        end = end_offset(self.admin, self.topic, partition, committed=False,
                         timeout=self.timeout)
        read = read_partition(self.kafka_config, self.topic, partition, start_offset=start,
                              until_offset=end, keep=keep, timeout=self.timeout)
        self.scanned += read.scanned
        return read.records

    def _write(self, partition_key: str, key: bytes, value: bytes) -> str | None:
        """Produce one record, durably, to the partition of ``partition_key``: ``None``, else
        why not."""
        if self._producer is None:
            self._producer = durable_producer(self.kafka_config)
        return produce_durably(self._producer, self.topic,
                               partition_for(partition_key, self.partitions), key, value,
                               self.timeout)

    def _decode_boundary(self, run: RunKey, millis: int, record: InternalRecord) -> Boundary:
        assert record.value is not None
        try:
            *_, dag_id, task_id, map_index, _millis, run_id = json.loads(record.key)
            value = json.loads(record.value)
            offsets = {(str(t), int(p)): int(o) for t, p, o in value["offsets"]}
            side = str(value["side"])
        except (ValueError, TypeError, KeyError) as exc:
            raise InternalTopicError(
                f"a boundary record of {run.dag_id}/{run.task_id} in {self.topic!r} at offset "
                f"{record.offset} cannot be read ({exc}): another version of this package "
                "wrote it. Resolve the run with explicit offsets.") from None
        return Boundary(millis, offsets, RunKey(dag_id, task_id, run_id, map_index), side)


def read_start(admin: AdminClient, topic: str, partition: int, since: datetime | None,
               timeout: float) -> int | None:
    """Where a lookup of records written since ``since - PIN_MARGIN`` starts reading
    ``topic[partition]`` (``None``: at the log start)."""
    if since is None:
        return None
    millis = int((since - PIN_MARGIN).timestamp() * 1000)
    return offset_for_time(admin, topic, partition, max(millis, 0), timeout=timeout)


def _boundary_prefix(run: RunKey, millis: int) -> str:
    """The start of the key of every boundary record of ``run``'s task at ``millis`` (the
    writer's run id follows); the records of one instant share its partition."""
    return json.dumps(["boundary", _BOUNDARY_VERSION, run.dag_id, run.task_id, run.map_index,
                       millis])


def _pin_of(key: bytes, dag_id: str, task_id: str | None) -> RunKey | None:
    """The run of a pin record's key when it belongs to ``dag_id`` (and ``task_id``)."""
    if not key.startswith(b"[1, "):
        return None
    try:
        version, dag, task, run_id, map_index = json.loads(key)
    except ValueError:
        return None
    if version != _KEY_VERSION or dag != dag_id or (task_id is not None and task != task_id):
        return None
    return RunKey(dag, task, run_id, map_index)


def _decode_pin(run: RunKey, record: InternalRecord, topic: str) -> Pin:
    assert record.value is not None
    try:
        value = json.loads(record.value)
        pinned_request = value.get("request") if value.get("pin") == _PIN_VERSION else None
        ranges = OffsetRanges.from_json(value["ranges"] if pinned_request is not None else value)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise InternalTopicError(
            f"the ranges pinned for {run} in {topic!r} cannot be read ({exc}); they were "
            "written by another version of this package. Re-resolve the run explicitly "
            "(re_resolve=True) to pin new ranges."
        ) from None
    return Pin(run, ranges, pinned_request,
               datetime.fromtimestamp(record.timestamp_ms / 1000, UTC))
