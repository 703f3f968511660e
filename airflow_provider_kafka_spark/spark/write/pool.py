"""The pool of transactional ids of one application: a few slots, leased to one write at a time.

An ``exactly_once`` write of the application ``p`` (its ``transactional_id_prefix``) writes
Spark partition ``i`` with the transactional id ``<p>-p<slot>-<i>``, where ``slot`` is a small
number the write keeps for its whole life: however many writes, runs and retries the
application makes, its ids are ``slots x write parallelism``, and the slots are as many as its
writes that ran at the same time.

**Safety does not depend on the lease.** A write's slot is recorded in its own ledger
partition the first time it runs (a *slot record* ``["slot", p, w]``, the first one wins, see
:mod:`~airflow_provider_kafka_spark.spark.write.ledger`), and every later attempt of the write
uses that slot again. So every attempt of task ``i`` of write ``w`` uses one transactional id,
exactly as when ids were derived from the write id, and ``init_transactions()`` fences an older
attempt before the task reads the ledger. Another write that uses the same slot later fences
what a crashed write left open on it before producing anything (``init_transactions()`` aborts
an open transaction of the id), which is also safe: the crashed write's re-run still finds its
committed tasks in its ledger and writes the others.

**The lease only keeps live writes apart**, so that two writes of one application running at
once (``max_active_runs > 1``) never fence each other: a slot is held by one write at a time.
Lease records live in the ledger topic, partition ``crc32("pool/<p>") % partitions``, written
outside transactions::

    key    ["pool", p, slot]
    value  {"format": "pool", "transactional_id_prefix": p, "slot": s, "write_id": w,
            "holder": "<random id of one driver>", "state": "held" | "free",
            "at_ms": <writer's clock>, "ttl_ms": <lease time to live>}

Every driver replays these records in offset order (:func:`slot_holders`): a ``held`` record
takes a slot that is free, expired (``at_ms + ttl_ms`` passed) or held by the same write; it
renews the lease of its holder; any other ``held`` record lost a race and counts for nothing.
``free`` releases it. A driver claims a slot by appending a ``held`` record and replaying up to
it: the log's order decides between two claims. The holder renews its lease every
``ttl / 6`` while the write runs and frees it at the end; a driver killed mid-write leaves its
slot to expire after ``ttl``, unless the write's own re-run takes it back at once. The replay
reads only the last ``3 x ttl`` of the partition (found by time): what a lookup reads does not
grow with the application's history.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import InternalTopicError, LedgerError
from airflow_provider_kafka_spark.offsets import internal_topics
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.internal_topics import InternalRecord

log = logging.getLogger(__name__)

LEASE_TTL_S = 60.0
"""How long a slot stays leased after its holder's last renewal (a killed driver's slot)."""

_POOL_TAG = "pool"


def pooled_transactional_id(prefix: str, slot: int, index: int) -> str:
    """``<prefix>-p<slot>-<index>``: the transactional id of Spark partition ``index`` of
    every write of ``prefix`` that holds ``slot``."""
    return f"{prefix}-p{slot}-{index}"


def pool_partition(prefix: str, partitions: int) -> int:
    """The ledger partition holding the lease records of the application ``prefix``."""
    return internal_topics.partition_for(f"{_POOL_TAG}/{prefix}", partitions)


def pool_key(prefix: str, slot: int) -> bytes:
    """The key of the lease records of ``slot`` of ``prefix``."""
    return json.dumps([_POOL_TAG, prefix, slot], separators=(",", ":")).encode()


@dataclass(frozen=True)
class LeaseRecord:
    """One lease record: ``holder`` (one driver of ``write_id``) holds or frees ``slot``."""

    prefix: str
    slot: int
    write_id: str
    holder: str
    state: str  # "held" | "free"
    at_ms: int
    ttl_ms: int

    def encode(self) -> tuple[bytes, bytes]:
        """The record's key and value."""
        value = {"format": _POOL_TAG, "transactional_id_prefix": self.prefix, "slot": self.slot,
                 "write_id": self.write_id, "holder": self.holder, "state": self.state,
                 "at_ms": self.at_ms, "ttl_ms": self.ttl_ms}
        return pool_key(self.prefix, self.slot), json.dumps(value, sort_keys=True).encode()

    @classmethod
    def decode(cls, prefix: str, record: InternalRecord) -> LeaseRecord | None:
        """The lease record of ``prefix`` that ``record`` is, or ``None``."""
        if record.value is None:
            return None
        try:
            doc = json.loads(record.value)
            found = cls(prefix=doc["transactional_id_prefix"], slot=int(doc["slot"]),
                        write_id=str(doc["write_id"]), holder=str(doc["holder"]),
                        state=str(doc["state"]), at_ms=int(doc["at_ms"]),
                        ttl_ms=int(doc["ttl_ms"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return found if found.prefix == prefix and found.state in ("held", "free") else None


def slot_holders(records: Iterable[LeaseRecord]) -> dict[int, LeaseRecord]:
    """Replay lease ``records`` (in offset order): each slot's current holder record (its
    newest valid ``held`` record; check its expiry against the clock), free slots absent."""
    holders: dict[int, LeaseRecord] = {}
    for record in records:
        current = holders.get(record.slot)
        if record.state == "free":
            if current is not None and current.holder == record.holder:
                del holders[record.slot]
            continue
        if (current is None or current.holder == record.holder
                or current.write_id == record.write_id
                or current.at_ms + current.ttl_ms < record.at_ms):
            holders[record.slot] = record
    return holders


def _now_ms() -> int:
    return int(time.time() * 1000)


class SlotLease:
    """A driver's lease of one slot of the pool of ``prefix``; renewed by a daemon thread
    until :meth:`release`.

    Use :func:`lease_slot` to get one.
    """

    def __init__(self, topic: str, partition: int, prefix: str, write_id: str, slot: int,
                 holder: str, ttl_s: float, producer: Producer) -> None:
        self.slot = slot
        self._record = LeaseRecord(prefix, slot, write_id, holder, "held", 0, int(ttl_s * 1000))
        self._topic, self._partition = topic, partition
        self._producer = producer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, args=(ttl_s / 6,),
                                         name=f"kafka-spark-lease-{prefix}-{slot}", daemon=True)
        self._thread.start()

    @property
    def producer(self) -> Producer:
        """The lease's idempotent producer (``acks=all``), also for the write's other records
        outside transactions."""
        return self._producer

    def _send(self, state: str) -> None:
        record = LeaseRecord(**{**self._record.__dict__, "state": state, "at_ms": _now_ms()})
        key, value = record.encode()
        self._producer.produce(self._topic, value, key, self._partition)
        self._producer.poll(0)

    def _renew(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                self._send("held")
            except Exception as exc:  # noqa: BLE001 - a renewal must never kill the write
                log.warning("could not renew the lease of slot %d: %s", self.slot, exc)

    def release(self) -> None:
        """Stop renewing and free the slot (a failure to free only delays its reuse by the
        lease's time to live)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        try:
            self._send("free")
            self._producer.flush(10)
        except Exception as exc:  # noqa: BLE001 - the lease expires anyway
            log.warning("could not free slot %d of the transactional id pool: %s", self.slot, exc)


def _read_leases(kafka_config: KafkaConfig, admin: AdminClient, topic: str,
                 partition: int, prefix: str, window_ms: int,
                 timeout: float) -> list[LeaseRecord]:
    start = internal_topics.offset_for_time(admin, topic, partition, _now_ms() - window_ms,
                                            timeout=timeout)
    prefix_key = json.dumps([_POOL_TAG, prefix], separators=(",", ":"))[:-1].encode() + b","
    read = internal_topics.read_partition(
        kafka_config, topic, partition, start_offset=start, committed=False,
        keep=lambda key: key.startswith(prefix_key), timeout=timeout)
    return [r for r in (LeaseRecord.decode(prefix, rec) for rec in read.records) if r]


def lease_slot(
    kafka_config: KafkaConfig,
    admin: AdminClient,
    topic: str,
    partitions: int,
    *,
    prefix: str,
    write_id: str,
    slot: int | None,
    ttl_s: float = LEASE_TTL_S,
    wait_s: float = 3600.0,
    timeout: float = 20.0,
) -> SlotLease:
    """Lease ``slot`` of ``prefix``'s pool for ``write_id`` (the slot its slot record names),
    or, when ``slot`` is ``None`` (a write's first run), the lowest slot no other live write
    holds. Waits while ``slot`` is held by another live write (its lease expires ``ttl_s``
    after its last renewal). ``admin`` is a client of the cluster, for offset lookups; a lease
    record not acknowledged by the in-sync replicas within ``timeout`` seconds fails.

    Raises:
        LedgerError: the slot stayed held by another write for ``wait_s`` seconds, or the
            lease records could not be written or read.
    """
    partition = pool_partition(prefix, partitions)
    holder = uuid.uuid4().hex
    ttl_ms = int(ttl_s * 1000)
    producer = internal_topics.durable_producer(kafka_config,
                                                **{"message.timeout.ms": int(timeout * 1000)})
    deadline = time.monotonic() + wait_s
    waited_for: LeaseRecord | None = None
    try:
        while True:
            holders = slot_holders(_read_leases(kafka_config, admin, topic, partition, prefix,
                                                3 * ttl_ms, timeout))
            now = _now_ms()
            live = {s: r for s, r in holders.items()
                    if r.at_ms + r.ttl_ms >= now and r.write_id != write_id}
            if slot is None:
                candidate = next(s for s in range(len(live) + 1) if s not in live)
            elif slot in live:
                if time.monotonic() > deadline:
                    raise LedgerError(
                        f"slot {slot} of the transactional id pool of {prefix!r}, which write_id "
                        f"{write_id!r} used before, stayed held by the write "
                        f"{live[slot].write_id!r} for {wait_s:.0f}s. Let that write finish (or "
                        "its lease expire), then re-run this one. Nothing was written.")
                if waited_for != live[slot]:
                    log.info("write %r waits for slot %d of %r, held by the write %r", write_id,
                             slot, prefix, live[slot].write_id)
                    waited_for = live[slot]
                time.sleep(1.0)
                continue
            else:
                candidate = slot
            claim = LeaseRecord(prefix, candidate, write_id, holder, "held", now, ttl_ms)
            _produce_durably(producer, topic, partition, claim, timeout)
            mine = slot_holders(_read_leases(kafka_config, admin, topic, partition, prefix,
                                             3 * ttl_ms, timeout)).get(candidate)
            if mine is not None and mine.holder == holder:
                return SlotLease(topic, partition, prefix, write_id, candidate, holder, ttl_s,
                                 producer)
    except InternalTopicError as exc:
        raise LedgerError(f"transactional id pool of {prefix!r}: {exc}") from None


def _produce_durably(producer: Producer, topic: str, partition: int, record: LeaseRecord,
                     timeout: float) -> None:
    reason = internal_topics.produce_durably(producer, topic, partition, *record.encode(),
                                             timeout + 5)
    if reason is not None:
        raise LedgerError(
            f"could not lease a slot of the transactional id pool of {record.prefix!r} in "
            f"{topic}[{partition}]: {reason}. The usual causes: brokers down, so that fewer "
            "replicas of the ledger topic are in sync than its min.insync.replicas (a write "
            "with acks=all is refused), or no permission to write the ledger topic. Nothing was "
            "written; check the brokers and the ledger topic's ACLs, then re-run the write.")
