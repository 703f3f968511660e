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

**Retention.** None by time: the topic is compacted only, one record per run (plus one per
interval boundary, :mod:`~airflow_provider_kafka_spark.offsets.runs`). Should an operator set
``retention.ms`` on it anyway, a clear of a run older than that finds no pin and resolves its
specs again, as a first resolution (logged as such): ``timestamp:`` intervals give the same
slice while their records are retained; ``latest`` and ``committed`` answer anew.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import InternalTopicError, PinnedRequestChangedError
from airflow_provider_kafka_spark.offsets.cluster import admin_client
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.internal_topics import (
    InternalRecord,
    durable_producer,
    ensure_compacted_topic,
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
    return lookup_pin(config, run, request, since=since, topic=topic, timeout=timeout,
                      admin=admin_client(config)).ranges


@dataclass(frozen=True)
class PinLookup:
    """What :func:`lookup_pin` found: the pinned ranges (``None``: none), and how many records
    of the pins topic it read to find them."""

    ranges: OffsetRanges | None
    scanned: int


def lookup_pin(kafka_config: KafkaConfig, run: RunKey,
               request: Mapping[str, str | None], *, since: datetime | None = None,
               topic: str = PINS_TOPIC, timeout: float = 30.0,
               admin: AdminClient) -> PinLookup:
    """:func:`pinned_ranges`, with the count of records read; ``admin``: the operation's
    admin client."""
    partitions = ensure_compacted_topic(admin, topic, partitions=PINS_PARTITIONS,
                                        timeout=timeout)
    key = run.encode()
    partition = partition_for(key.decode(), partitions)
    read = read_partition(kafka_config, topic, partition,
                          start_offset=read_start(admin, topic, partition, since, timeout),
                          keep=lambda k: k == key, timeout=timeout)
    if not read.records or read.records[-1].value is None:
        return PinLookup(None, read.scanned)
    found = _decode_pin(run, read.records[-1], topic)
    pinned_request, ranges = found.request, found.ranges
    if pinned_request is not None and dict(pinned_request) != dict(request):
        changes = "; ".join(
            f"{name} {pinned_request.get(name)!r} -> {request.get(name)!r}"
            for name in sorted(set(pinned_request) | set(request))
            if pinned_request.get(name) != request.get(name))
        raise PinnedRequestChangedError(
            f"{run} first resolved another request than it makes now ({changes}); its pinned "
            f"ranges (resolved at {ranges.resolved_at.isoformat()}) answer the old one. Nothing "
            "was read. To read what the run asks for now, re-resolve it (re_resolve=True or the "
            "Param re_resolve); to re-read the old slice, run it with its old settings."
        )
    return PinLookup(ranges, read.scanned)


@dataclass(frozen=True)
class Pin:
    """The newest pinned ranges of one run. ``request`` is ``None`` for pins written before
    requests were recorded; ``pinned_at`` is when the record was written (its timestamp)."""

    run: RunKey
    ranges: OffsetRanges
    request: Mapping[str, str | None] | None
    pinned_at: datetime


def read_pins(kafka_config: KafkaConfig, admin: AdminClient, dag_id: str, *,
              task_id: str | None = None, since: datetime, topic: str = PINS_TOPIC,
              timeout: float = 30.0) -> list[Pin]:
    """The pins of ``dag_id`` (of ``task_id`` only, when given) written since
    ``since - PIN_MARGIN``, the newest per run, ordered by ``pinned_at``.

    Reads every partition of the pins topic from the offset its time index gives for that
    moment: the cost is the pins written since then, whatever came before.

    Raises:
        InternalTopicError: the pins topic could not be read, or holds a pin of this DAG that
            another version of this package wrote.
    """
    partitions = ensure_compacted_topic(admin, topic, partitions=PINS_PARTITIONS,
                                        timeout=timeout)
    newest: dict[RunKey, InternalRecord] = {}
    for partition in range(partitions):
        read = read_partition(kafka_config, topic, partition,
                              start_offset=read_start(admin, topic, partition, since, timeout),
                              keep=lambda k: _pin_of(k, dag_id, task_id) is not None,
                              timeout=timeout)
        for record in read.records:
            run = _pin_of(record.key, dag_id, task_id)
            assert run is not None
            newest[run] = record
    pins = [_decode_pin(run, record, topic) for run, record in newest.items()
            if record.value is not None]
    return sorted(pins, key=lambda pin: (pin.pinned_at, str(pin.run)))


def read_start(admin: AdminClient, topic: str, partition: int, since: datetime | None,
               timeout: float) -> int | None:
    """Where a lookup of records written since ``since - PIN_MARGIN`` starts reading
    ``topic[partition]`` (``None``: at the log start)."""
    if since is None:
        return None
    millis = int((since - PIN_MARGIN).timestamp() * 1000)
    return offset_for_time(admin, topic, partition, max(millis, 0), timeout=timeout)


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


def pin_ranges(kafka_config: KafkaConfig | Mapping[str, Any], run: RunKey, ranges: OffsetRanges,
               request: Mapping[str, str | None], *, topic: str = PINS_TOPIC,
               timeout: float = 30.0, admin: AdminClient | None = None) -> None:
    """Store ``ranges``, the answer to ``request``, as the pinned ranges of ``run`` (replacing
    earlier ones), durably: returns once every in-sync replica has the record. ``admin``: the
    caller's admin client (``None``: a new one).

    Raises:
        InternalTopicError: the pins topic could not be created or written.
    """
    kafka_config = KafkaConfig.of(kafka_config)
    admin = admin if admin is not None else admin_client(kafka_config)
    partitions = ensure_compacted_topic(admin, topic, partitions=PINS_PARTITIONS,
                                        timeout=timeout)
    key = run.encode()
    value = {"pin": _PIN_VERSION, "request": dict(request), "ranges": ranges.to_dict()}
    reason = produce_durably(durable_producer(kafka_config), topic,
                             partition_for(key.decode(), partitions), key,
                             json.dumps(value, sort_keys=True).encode(), timeout)
    if reason is not None:
        raise InternalTopicError(
            f"could not pin the resolved ranges of {run} in {topic!r}: {reason}. Nothing was "
            "read yet; retry the task."
        )
