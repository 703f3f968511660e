"""The ledger of an exactly-once write: which Spark tasks of which write have committed.

The ledger is a compacted Kafka topic (kept by
:mod:`~airflow_provider_kafka_spark.offsets.internal_topics`). Task ``i`` of write ``w`` of the
application whose ``transactional_id_prefix`` is ``p`` writes one record *inside the same
Kafka transaction* as its output, so the record is committed if and only if the output is. A
write's entries are those of exactly its own ``(p, w)``: two applications may use the same
write id, and a write id may begin with another one and a slash. All records of one write id go
to ledger partition ``crc32(w) % partitions``, so one partition read answers "what is done
already".

The records (format 2)::

    key    JSON array ["v2", p, w, i]   e.g. ["v2","orders","orders/clean/2024-05-04",3]
    value  JSON object {"format": 2, "transactional_id_prefix": p, "write_id": w, "index": i,
                        "num_partitions": ..., "records": ..., "topics": [...],
                        "digest": "<16 hex digits>" | "identity": "<64 hex digits>"}

``records``, ``topics`` and ``digest`` are the task's input fingerprint (:class:`TaskInput`): a
later write with the same prefix and write id whose input differs is refused
(:func:`check_inputs`) instead of silently counting as a completed re-run. A write whose input
is a pinned slice (``write_kafka``'s ``input_identity``) records instead the SHA-256 of that
identity in every entry (``identity``; ``records`` and ``topics`` are then what the task wrote)
and refuses entries of another identity. Entries written before fingerprints have no
``digest``; their content is unknown and only their ``records`` and ``topics`` are compared.

Reads use ``isolation.level=read_committed``: a record of an open or aborted transaction is
never seen as done.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import InternalTopicError, LedgerError
from airflow_provider_kafka_spark.offsets import internal_topics
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.internal_topics import InternalRecord

# Partitions of a ledger topic we create. Writes spread over them by hash of the write id.
LEDGER_PARTITIONS = 8

# The ledger topic is compacted (internal_topics.ensure_compacted_topic): the newest record per
# key is kept forever, so a write can be re-run at any time later (an Airflow clear of an old
# run) and still finds its committed tasks. Keys are never reused, so compaction only removes
# records of aborted transactions and transaction markers.

_KEY_TAG = "v2"


@dataclass(frozen=True)
class LedgerKey:
    """Which task a ledger record is about: task ``index`` of ``write_id`` of the application
    with ``transactional_id_prefix``."""

    transactional_id_prefix: str
    write_id: str
    index: int

    def encode(self) -> bytes:
        """``["v2", prefix, write_id, index]`` as compact JSON."""
        return json.dumps([_KEY_TAG, self.transactional_id_prefix, self.write_id, self.index],
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LedgerKey | None:
        """The key ``raw`` encodes; ``None`` if it is no ledger key."""
        if not raw.startswith(f'["{_KEY_TAG}",'.encode()):
            return None
        try:
            parts = json.loads(raw)
        except ValueError:
            return None
        if (isinstance(parts, list) and len(parts) == 4 and isinstance(parts[1], str)
                and isinstance(parts[2], str) and type(parts[3]) is int and parts[3] >= 0):
            return cls(parts[1], parts[2], parts[3])
        return None

    def belongs_to(self, transactional_id_prefix: str, write_id: str) -> bool:
        """Whether this key is one of the write ``(transactional_id_prefix, write_id)``."""
        return (self.transactional_id_prefix, self.write_id) == (transactional_id_prefix,
                                                                 write_id)


@dataclass(frozen=True)
class LedgerEntry:
    """One committed Spark task of one write."""

    transactional_id_prefix: str
    write_id: str
    index: int
    num_partitions: int
    records: int
    topics: tuple[str, ...]
    digest: str | None = None  # the input's content digest; None: unknown (older entries)
    identity: str | None = None  # SHA-256 of the write's input_identity; None: none given

    def key(self) -> LedgerKey:
        """The key of this entry's ledger record."""
        return LedgerKey(self.transactional_id_prefix, self.write_id, self.index)

    def value(self) -> bytes:
        """The value of this entry's ledger record (JSON, see the module doc)."""
        doc: dict[str, Any] = {
            "format": 2,
            "transactional_id_prefix": self.transactional_id_prefix,
            "write_id": self.write_id,
            "index": self.index,
            "num_partitions": self.num_partitions,
            "records": self.records,
            "topics": list(self.topics),
        }
        if self.digest is not None:
            doc["digest"] = self.digest
        if self.identity is not None:
            doc["identity"] = self.identity
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_value(cls, value: bytes) -> LedgerEntry:
        """The entry a ledger record's value holds.

        Raises:
            LedgerError: ``value`` is not a ledger entry.
        """
        try:
            doc = json.loads(value)
            return cls(
                transactional_id_prefix=str(doc["transactional_id_prefix"]),
                write_id=doc["write_id"],
                index=int(doc["index"]),
                num_partitions=int(doc["num_partitions"]),
                records=int(doc["records"]),
                topics=tuple(doc["topics"]),
                digest=None if doc.get("digest") is None else str(doc["digest"]),
                identity=None if doc.get("identity") is None else str(doc["identity"]),
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise LedgerError(
                f"a ledger record's value is not a ledger entry ({type(exc).__name__}: {exc}); "
                "the ledger topic holds records this package did not write. Pass a "
                "ledger_topic= that only write_kafka writes to."
            ) from None


@dataclass(frozen=True)
class TaskInput:
    """The fingerprint of one task's input, from the driver's pre-pass over the DataFrame:
    its row count, the topics its rows go to, and a content ``digest`` (``None``: unknown).

    ``write_kafka``'s digest: Spark's ``xxhash64`` (seed 42) of each row's ``topic`` (the
    ``topic=`` argument when given), ``key``, ``value``, ``partition``, ``headers`` and
    ``timestamp`` (absent columns skipped: an absent column hashes like a null one), summed
    over the partition's rows modulo 2**64, as 16 hex digits. The order of the rows does not
    change it; any changed, added or removed row does (up to 64-bit hash collisions).
    """

    records: int
    topics: tuple[str, ...]
    digest: str | None = None

    def differences(self, entry: LedgerEntry) -> list[str]:
        """How ``entry`` (a committed task) differs from this input; empty if it may be the
        same. A digest is compared only when both sides know it."""
        found = []
        if entry.records != self.records:
            found.append(f"rows: {entry.records} committed, {self.records} now")
        if tuple(entry.topics) != tuple(self.topics):
            found.append(f"topics: {list(entry.topics)} committed, {list(self.topics)} now")
        if entry.digest is not None and self.digest is not None and entry.digest != self.digest:
            found.append(f"content digest: {entry.digest} committed, {self.digest} now")
        return found


def check_inputs(
    entries: Mapping[int, LedgerEntry],
    inputs: Sequence[TaskInput],
    *,
    transactional_id_prefix: str,
    write_id: str,
) -> None:
    """Refuse committed ``entries`` (by partition index) whose input fingerprint differs from
    this write's ``inputs`` (one per partition index).

    Raises:
        LedgerError: the first task (lowest index) that differs, with what differs.
    """
    for index in sorted(entries):
        found = inputs[index].differences(entries[index]) if index < len(inputs) else \
            [f"partition index {index} is not in this DataFrame"]
        if found:
            raise input_mismatch(transactional_id_prefix, write_id, index, found,
                                 "Nothing was written.")


def input_identity_digest(input_identity: str) -> str:
    """The SHA-256 (64 hex digits) of ``write_kafka``'s ``input_identity``, which every ledger
    entry of such a write records."""
    return hashlib.sha256(input_identity.encode()).hexdigest()


def check_identity(entries: Mapping[int, LedgerEntry], identity: str, *,
                   transactional_id_prefix: str, write_id: str, outcome: str) -> None:
    """Refuse committed ``entries`` that recorded another input identity than ``identity``
    (an :func:`input_identity_digest`). An entry without one (written by a write that
    fingerprinted its input) cannot be compared and counts as the same input.

    Raises:
        LedgerError: the first task (lowest index) whose identity differs; ``outcome`` says
            what this write did.
    """
    for index in sorted(entries):
        recorded = entries[index].identity
        if recorded is not None and recorded != identity:
            raise input_mismatch(transactional_id_prefix, write_id, index,
                                 [f"input identity: {recorded[:16]} committed, "
                                  f"{identity[:16]} now"], outcome)


def input_mismatch(transactional_id_prefix: str, write_id: str, index: int,
                   differences: Iterable[str], outcome: str) -> LedgerError:
    """The error for a committed task whose input differs from this write's; ``outcome`` says
    what this write did."""
    return LedgerError(
        f"write_id {write_id!r} of transactional_id_prefix {transactional_id_prefix!r} already "
        f"committed task {index} from other input ({'; '.join(differences)}). A write_id names "
        "one write of one input: a re-run must give every Spark partition the same rows (and "
        "topics), so that it can skip what was committed. To write different data, use a new "
        f"write_id; if the input is meant to be the same, make the DataFrame deterministic per "
        f"partition. {outcome}"
    )


@dataclass(frozen=True)
class LedgerView:
    """The committed tasks of one write, as read up to (excluding) ``end_offset``, the slot of
    the transactional id pool its first slot record names (``None``: none read), and how many
    ledger records the read went through (``scanned``)."""

    entries: Mapping[int, LedgerEntry]
    end_offset: int
    slot: int | None = None
    scanned: int = 0


def slot_key(transactional_id_prefix: str, write_id: str) -> bytes:
    """The key of the write's slot records: ``["slot", prefix, write_id]``."""
    return json.dumps(["slot", transactional_id_prefix, write_id],
                      separators=(",", ":")).encode()


def slot_value(transactional_id_prefix: str, write_id: str, slot: int) -> bytes:
    """A slot record's value: the pool slot whose transactional ids the write uses."""
    return json.dumps({"format": "slot", "transactional_id_prefix": transactional_id_prefix,
                       "write_id": write_id, "slot": slot}, sort_keys=True).encode()


def first_slot(records: Iterable[InternalRecord], key: bytes) -> int | None:
    """The slot the first slot record with ``key`` among ``records`` names (the first one
    wins: every attempt of a write uses the slot its first attempt recorded)."""
    for record in records:
        if record.key == key and record.value is not None:
            try:
                return int(json.loads(record.value)["slot"])
            except (ValueError, TypeError, KeyError):
                raise LedgerError(
                    f"the ledger record at offset {record.offset} is not a slot record; the "
                    "ledger topic holds records this package did not write. Pass a "
                    "ledger_topic= that only write_kafka writes to.") from None
    return None


def ledger_partition(write_id: str, num_partitions: int) -> int:
    """The ledger partition holding every record of ``write_id``: ``crc32(write_id) %
    num_partitions``. The prefix is not part of it: applications sharing a write id share a
    partition, each reading its own keys."""
    return internal_topics.partition_for(write_id, num_partitions)


def committed_entries(
    records: Iterable[InternalRecord],
    *,
    transactional_id_prefix: str,
    write_id: str,
) -> dict[int, LedgerEntry]:
    """The committed tasks of the write ``(transactional_id_prefix, write_id)`` among ledger
    ``records`` (in offset order), by partition index. The newest record of a key wins; a
    tombstone (``value=None``) forgets the task; records of any other key are ignored.

    Raises:
        LedgerError: a record's value is not a ledger entry or disagrees with its key.
    """
    entries: dict[int, LedgerEntry] = {}
    for record in records:
        key = LedgerKey.decode(record.key)
        if key is None or not key.belongs_to(transactional_id_prefix, write_id):
            continue
        if record.value is None:
            entries.pop(key.index, None)
            continue
        entry = LedgerEntry.from_value(record.value)
        if entry.key() != key:
            raise LedgerError(
                f"the ledger record at offset {record.offset} has the key {key} but its value "
                f"is about {entry.key()}; the ledger topic holds records this package did not "
                "write. Pass a ledger_topic= that only write_kafka writes to."
            )
        entries[key.index] = entry
    return entries


_OFFSETS_HINT = (" Check that the brokers are up and that this client may describe the ledger "
                 "topic (ACL DESCRIBE on it), then re-run the write.")


@contextmanager
def _ledger_errors(hint: str = "") -> Iterator[None]:
    """Re-raise an :class:`InternalTopicError` as :class:`LedgerError`, with ``hint`` added."""
    try:
        yield
    except InternalTopicError as exc:
        raise LedgerError(f"ledger: {exc}{hint}") from None


def ensure_ledger_topic(admin: AdminClient, topic: str, *, timeout: float = 30.0) -> int:
    """Create the compacted ledger ``topic`` (``LEDGER_PARTITIONS`` partitions) if missing;
    return its number of partitions.

    Raises:
        LedgerError: the topic could not be created (e.g. not authorized) or exists without
            ``cleanup.policy=compact``.
    """
    with _ledger_errors(" Or pass ledger_topic= naming an existing compacted topic."):
        return internal_topics.ensure_compacted_topic(admin, topic, partitions=LEDGER_PARTITIONS,
                                                      timeout=timeout)


def ledger_start_offset(admin: AdminClient, topic: str, partition: int, *,
                        timeout: float = 30.0) -> int:
    """The log start offset of a ledger partition (0 unless records were deleted)."""
    with _ledger_errors(_OFFSETS_HINT):
        return internal_topics.log_start_offset(admin, topic, partition, timeout=timeout)


def ledger_offset_since(admin: AdminClient, topic: str, partition: int, timestamp_ms: int, *,
                        timeout: float = 30.0) -> int:
    """The first offset of a ledger partition written at ``timestamp_ms`` or later (its high
    watermark if none): where a write that began after ``timestamp_ms`` finds its records."""
    with _ledger_errors(_OFFSETS_HINT):
        return internal_topics.offset_for_time(admin, topic, partition, timestamp_ms,
                                               timeout=timeout)


def write_slot_record(kafka_config: KafkaConfig, topic: str, partition: int, *,
                      transactional_id_prefix: str, write_id: str, slot: int, start_offset: int,
                      producer: Producer | None = None, timeout: float = 30.0) -> int | None:
    """Record (durably, outside any transaction) that the write uses ``slot`` of its
    application's transactional id pool; return the slot of the **first** slot record of the
    write at or after ``start_offset`` (where the caller's read, which found none, ended),
    which every attempt uses: another attempt may have recorded one a moment earlier.
    ``producer``: an idempotent producer of the cluster to write with (else a new one).

    Raises:
        LedgerError: the record could not be written or read back.
    """
    key = slot_key(transactional_id_prefix, write_id)
    reason = internal_topics.produce_durably(
        producer or internal_topics.durable_producer(kafka_config), topic, partition, key,
        slot_value(transactional_id_prefix, write_id, slot), timeout)
    if reason is not None:
        raise LedgerError(f"could not write the slot record of write_id {write_id!r} to "
                          f"{topic}[{partition}]: {reason}. Nothing was written; re-run the "
                          "write.")
    with _ledger_errors(_OFFSETS_HINT):
        read = internal_topics.read_partition(kafka_config, topic, partition,
                                              start_offset=start_offset,
                                              keep=lambda k: k == key, committed=False,
                                              timeout=timeout)
    return first_slot(read.records, key)


def ledger_high_watermark(kafka_config: KafkaConfig, topic: str, partition: int, *,
                          timeout: float = 30.0) -> int:
    """The high watermark of a ledger partition (a task's cheap lookup: no admin client)."""
    with _ledger_errors(_OFFSETS_HINT):
        return internal_topics.high_watermark(kafka_config, topic, partition, timeout=timeout)


def ledger_end_offset(
    admin: AdminClient, topic: str, partition: int, *, committed: bool, timeout: float = 30.0
) -> int:
    """The last stable offset (``committed=True``) or high watermark of a ledger partition."""
    with _ledger_errors(_OFFSETS_HINT):
        return internal_topics.end_offset(admin, topic, partition, committed=committed,
                                          timeout=timeout)


def read_ledger(
    kafka_config: KafkaConfig,
    topic: str,
    partition: int,
    *,
    transactional_id_prefix: str,
    write_id: str,
    start_offset: int,
    until_offset: int,
    timeout: float,
) -> LedgerView:
    """The committed tasks of the write ``(transactional_id_prefix, write_id)`` whose ledger
    records lie in ``[start_offset, until_offset)`` of ``topic[partition]`` (see
    :func:`committed_entries`), and its slot. Reads with ``isolation.level=read_committed``
    and waits until every record below ``until_offset`` is decided (committed or aborted), i.e.
    until the partition's last stable offset reaches ``until_offset``.

    Raises:
        LedgerError: the records below ``until_offset`` were not all decided within
            ``timeout`` seconds (an open transaction on the ledger partition), a read error, or
            a record this package did not write.
    """
    own_slot_key = slot_key(transactional_id_prefix, write_id)

    def keep(raw: bytes) -> bool:
        if raw == own_slot_key:
            return True
        key = LedgerKey.decode(raw)
        return key is not None and key.belongs_to(transactional_id_prefix, write_id)

    with _ledger_errors(" If it persists, check that this client may read the ledger topic "
                        "(ACL READ on it), then re-run the write."):
        read = internal_topics.read_partition(
            kafka_config, topic, partition, start_offset=start_offset, until_offset=until_offset,
            keep=keep, timeout=timeout)
    entries = committed_entries([r for r in read.records if r.key != own_slot_key],
                                transactional_id_prefix=transactional_id_prefix,
                                write_id=write_id)
    return LedgerView(entries, read.end_offset, first_slot(read.records, own_slot_key),
                      read.scanned)
