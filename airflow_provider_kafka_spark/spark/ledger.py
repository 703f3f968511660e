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
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from airflow_provider_kafka_spark.offsets.config import consumer_config
from airflow_provider_kafka_spark.spark.write_errors import LedgerError

# Partitions of a ledger topic we create. Writes spread over them by hash of the write id.
LEDGER_PARTITIONS = 8

# Compaction keeps the newest record per key forever: a write can be re-run at any time later
# (an Airflow clear of an old run) and still finds its committed tasks. Keys are never reused,
# so compaction only removes records of aborted transactions and transaction markers.
LEDGER_TOPIC_CONFIG = {"cleanup.policy": "compact"}


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
    return zlib.crc32(write_id.encode()) % num_partitions


def ensure_ledger_topic(admin: AdminClient, topic: str, *, timeout: float = 30.0) -> int:
    """Create the compacted ledger ``topic`` if missing; return its number of partitions.

    Raises:
        LedgerError: the topic could not be created (e.g. not authorized) or exists without
            ``cleanup.policy=compact``.
    """
    partitions = _partition_count(admin, topic, timeout)
    if partitions is None:
        future = admin.create_topics(
            [NewTopic(topic, num_partitions=LEDGER_PARTITIONS, replication_factor=-1,
                      config=LEDGER_TOPIC_CONFIG)]
        )[topic]
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise LedgerError(
                    f"could not create the ledger topic {topic!r}: {exc.args[0].str()}. "
                    f"Create it yourself with cleanup.policy=compact (any number of partitions) "
                    f"or pass ledger_topic= naming an existing compacted topic."
                ) from None
        deadline = time.monotonic() + timeout
        while (partitions := _partition_count(admin, topic, timeout)) is None:
            if time.monotonic() > deadline:
                raise LedgerError(f"the ledger topic {topic!r} was created but its metadata did "
                                  f"not appear within {timeout}s; retry the write.")
            time.sleep(0.2)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout=timeout)
    except KafkaException as exc:
        raise LedgerError(
            f"could not read the config of the ledger topic {topic!r}: {exc.args[0].str()}."
        ) from None
    policy = configs["cleanup.policy"].value or ""
    if "compact" not in policy.split(","):
        raise LedgerError(
            f"the ledger topic {topic!r} has cleanup.policy={policy!r}; it needs 'compact' so "
            "that committed tasks are remembered until a write is re-run. Set "
            "cleanup.policy=compact on it or pass another ledger_topic=."
        )
    return partitions


def _partition_count(admin: AdminClient, topic: str, timeout: float) -> int | None:
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise LedgerError(f"could not read metadata of the ledger topic {topic!r}: "
                          f"{exc.args[0].str()}.") from None
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)


def ledger_start_offset(admin: AdminClient, topic: str, partition: int, *,
                        timeout: float = 30.0) -> int:
    """The log start offset of a ledger partition (0 unless records were deleted)."""
    return _list_offset(admin, topic, partition, OffsetSpec.earliest(),
                        IsolationLevel.READ_UNCOMMITTED, timeout)


def ledger_end_offset(
    admin: AdminClient, topic: str, partition: int, *, committed: bool, timeout: float = 30.0
) -> int:
    """The last stable offset (``committed=True``) or high watermark of a ledger partition."""
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    return _list_offset(admin, topic, partition, OffsetSpec.latest(), isolation, timeout)


# A partition of a ledger topic created a moment ago may have no leader yet.
_NOT_READY = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                        KafkaError.UNKNOWN_TOPIC_OR_PART})


def _list_offset(admin: AdminClient, topic: str, partition: int, spec: OffsetSpec,
                 isolation: IsolationLevel, timeout: float) -> int:
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = admin.list_offsets({tp: spec}, isolation_level=isolation,
                                      request_timeout=timeout)[tp].result(timeout=timeout)
            return int(info.offset)
        except KafkaException as exc:
            err = exc.args[0]
            if (err.code() in _NOT_READY or err.retriable()) and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            raise LedgerError(f"could not list offsets of ledger partition {topic}[{partition}]: "
                              f"{err.str()}.") from None


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
    entries: dict[int, LedgerEntry] = {}
    if until_offset <= start_offset:
        return LedgerView(entries, start_offset)
    config = consumer_config(kafka_config, isolation_level="read_committed")
    config.setdefault("fetch.wait.max.ms", 20)  # the ledger tail is tiny: do not linger
    consumer = Consumer(config)
    prefix = f"{write_id}/".encode()
    deadline = time.monotonic() + timeout
    try:
        consumer.assign([TopicPartition(topic, partition, start_offset)])
        while True:
            if time.monotonic() > deadline:
                raise LedgerError(
                    f"ledger partition {topic}[{partition}] did not become readable up to "
                    f"offset {until_offset} within {timeout:.0f}s: a transaction on it is still "
                    "open (a crashed writer's transaction is aborted by the broker after its "
                    "transaction.timeout.ms). Re-run the write."
                )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err, offset = msg.error(), msg.offset()
            assert offset is not None
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if offset >= until_offset:
                        return LedgerView(entries, offset)
                    continue
                raise LedgerError(f"could not read ledger partition {topic}[{partition}]: "
                                  f"{err.str()}.")
            key, value = msg.key(), msg.value()
            if isinstance(key, bytes) and key.startswith(prefix) and isinstance(value, bytes):
                entry = LedgerEntry.from_value(value)
                entries[entry.index] = entry
            if offset + 1 >= until_offset:
                return LedgerView(entries, offset + 1)
    finally:
        consumer.close()
