"""The ledger of an exactly-once write: which Spark tasks of which write have committed.

The ledger is a compacted Kafka topic. The task with partition index ``i`` of write ``w`` writes
one record keyed ``<w>/<i>`` *inside the same Kafka transaction* as its output, so the record is
committed if and only if the output is. All records of one write go to one ledger partition,
chosen by a hash of the write id, so one partition read answers "what is done already".

Reads use ``isolation.level=read_committed``: a record of an open or aborted transaction is
never seen as done.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.offsets import internal_topics
from airflow_provider_kafka_spark.offsets.internal_topics import InternalTopicError
from airflow_provider_kafka_spark.spark.write_errors import LedgerError

# Partitions of a ledger topic we create. Writes spread over them by hash of the write id.
LEDGER_PARTITIONS = 8

# The ledger topic is compacted (internal_topics.ensure_compacted_topic): the newest record per
# key is kept forever, so a write can be re-run at any time later (an Airflow clear of an old
# run) and still finds its committed tasks. Keys are never reused, so compaction only removes
# records of aborted transactions and transaction markers.


@dataclass(frozen=True)
class LedgerEntry:
    """One committed Spark task of one write."""

    write_id: str
    index: int
    num_partitions: int
    records: int
    topics: tuple[str, ...]

    def key(self) -> bytes:
        return ledger_key(self.write_id, self.index)

    def value(self) -> bytes:
        return json.dumps(
            {
                "write_id": self.write_id,
                "index": self.index,
                "num_partitions": self.num_partitions,
                "records": self.records,
                "topics": list(self.topics),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_value(cls, value: bytes) -> LedgerEntry:
        doc = json.loads(value)
        return cls(
            write_id=doc["write_id"],
            index=int(doc["index"]),
            num_partitions=int(doc["num_partitions"]),
            records=int(doc["records"]),
            topics=tuple(doc["topics"]),
        )


@dataclass(frozen=True)
class LedgerView:
    """The committed tasks of one write, as read up to (excluding) ``end_offset``."""

    entries: Mapping[int, LedgerEntry]
    end_offset: int


def ledger_key(write_id: str, index: int) -> bytes:
    """The ledger key of task ``index`` of ``write_id``: ``<write_id>/<index>``."""
    return f"{write_id}/{index}".encode()


def ledger_partition(write_id: str, num_partitions: int) -> int:
    """The ledger partition holding every record of ``write_id`` (stable CRC-32 hash)."""
    return internal_topics.partition_for(write_id, num_partitions)


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
    with _ledger_errors():
        return internal_topics.log_start_offset(admin, topic, partition, timeout=timeout)


def ledger_end_offset(
    admin: AdminClient, topic: str, partition: int, *, committed: bool, timeout: float = 30.0
) -> int:
    """The last stable offset (``committed=True``) or high watermark of a ledger partition."""
    with _ledger_errors():
        return internal_topics.end_offset(admin, topic, partition, committed=committed,
                                          timeout=timeout)


def read_ledger(
    kafka_config: Mapping[str, Any],
    topic: str,
    partition: int,
    write_id: str,
    *,
    start_offset: int,
    until_offset: int,
    timeout: float,
) -> LedgerView:
    """Read the committed ledger records of ``write_id`` in ``[start_offset, until_offset)``.

    Reads with ``isolation.level=read_committed`` and waits until every record below
    ``until_offset`` is decided (committed or aborted), i.e. until the partition's last stable
    offset reaches ``until_offset``.

    Raises:
        LedgerError: the records below ``until_offset`` were not all decided within
            ``timeout`` seconds (an open transaction on the ledger partition), or a read error.
    """
    prefix = f"{write_id}/".encode()
    with _ledger_errors():
        read = internal_topics.read_partition(
            kafka_config, topic, partition, start_offset=start_offset, until_offset=until_offset,
            keep=lambda key: key.startswith(prefix), timeout=timeout)
    entries: dict[int, LedgerEntry] = {}
    for record in read.records:
        if record.value is not None:
            entry = LedgerEntry.from_value(record.value)
            entries[entry.index] = entry
    return LedgerView(entries, read.end_offset)
