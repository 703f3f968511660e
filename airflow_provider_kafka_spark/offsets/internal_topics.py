"""The state this package keeps in Kafka itself: compacted topics, one place to create and read them.

Users: the exactly-once write's ledger (``spark/write/ledger.py``, topic ``_kafka_spark_ledger``) and
stores of per-key values such as pinned run ranges. Each keeps records under string keys in a
compacted topic, so the newest record of every key is kept forever::

    admin = admin_client(kafka_config)
    partitions = ensure_compacted_topic(admin, topic, partitions=8)
    partition = partition_for(key, partitions)           # every record of `key` lives here
    ...                                                  # the caller produces its records
    read = read_partition(kafka_config, topic, partition, keep=lambda k: k == key.encode())
    newest = read.records[-1].value if read.records else None

The caller owns what keys and values mean (and produces them); this module owns topic
creation, partition choice, offset lookups and bounded reads. Reads use
``isolation.level=read_committed``: records of open or aborted transactions are never returned.
No Spark and no Airflow here: only confluent-kafka.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from airflow_provider_kafka_spark.errors import InternalTopicError, OffsetResolutionError
from airflow_provider_kafka_spark.offsets.cluster import (
    RESULT_MARGIN,
    list_offsets,
    reach_cluster,
    retry_transient,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig


@dataclass(frozen=True)
class InternalRecord:
    """One committed record of an internal topic. ``value`` is ``None`` for a tombstone."""

    key: bytes
    value: bytes | None
    offset: int
    timestamp_ms: int = 0


@dataclass(frozen=True)
class PartitionRead:
    """The kept records of one partition, in offset order, read up to (excluding)
    ``end_offset``; ``scanned`` records were read to find them (kept or not)."""

    records: tuple[InternalRecord, ...]
    end_offset: int
    scanned: int = 0


def ensure_compacted_topic(admin: AdminClient, topic: str, *, partitions: int,
                           timeout: float = 30.0, config: Mapping[str, str] | None = None) -> int:
    """Create ``topic`` with ``partitions`` partitions and ``cleanup.policy=compact`` (plus the
    topic ``config`` given, e.g. ``segment.ms``) if it does not exist; return its number of
    partitions (an existing topic keeps its own count and config).

    Raises:
        InternalTopicError: the topic could not be created (e.g. not authorized), its metadata
            or config could not be read within ``timeout`` seconds, or it exists without
            ``compact`` in its ``cleanup.policy``; or no broker answered the first request
            within ``min(timeout, CONNECT_TIMEOUT_S)`` (the message says so, as
            :func:`~airflow_provider_kafka_spark.offsets.cluster.reach_cluster`'s does).
    """
    if not getattr(admin, "kafka_spark_reached", False):
        # The first request of an operation waits CONNECT_TIMEOUT_S for some broker, not the
        # whole timeout (the resolve operator's first request is the run's pins' topic).
        cluster = getattr(admin, "kafka_spark_cluster", "the cluster of the given AdminClient")
        try:
            reach_cluster(admin, cluster, timeout, what=f"the topic {topic!r}")
        except OffsetResolutionError as exc:
            raise InternalTopicError(str(exc)) from None
    count = _partition_count(admin, topic, timeout)
    if count is None:
        future = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                               replication_factor=-1,
                                               config={**(config or {}),
                                                       "cleanup.policy": "compact"})],
                                     request_timeout=timeout)[topic]
        try:
            future.result(timeout=timeout + RESULT_MARGIN)
        except (KafkaException, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) or \
                    exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                reason = "no answer" if isinstance(exc, TimeoutError) else exc.args[0].str()
                raise InternalTopicError(
                    f"could not create the topic {topic!r}: {reason}. Create it yourself with "
                    "cleanup.policy=compact (any number of partitions), or retry."
                ) from None
        deadline = time.monotonic() + timeout
        while (count := _partition_count(admin, topic, timeout)) is None:
            if time.monotonic() > deadline:
                raise InternalTopicError(f"the topic {topic!r} was created but its metadata did "
                                         f"not appear within {timeout}s; retry.")
            time.sleep(0.2)
    resource = ConfigResource(ResourceType.TOPIC, topic)

    def describe(seconds: float) -> Any:
        return admin.describe_configs([resource], request_timeout=seconds)[resource].result(
            timeout=seconds + RESULT_MARGIN)

    what = f"reading the config of the topic {topic!r}"
    try:  # asked again when the broker asked has just died
        configs = retry_transient(describe, what, time.monotonic() + timeout)
    except (KafkaException, TimeoutError) as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else exc.args[0].str()
        raise InternalTopicError(f"{what} failed: {reason}; retry.") from None
    policy = configs["cleanup.policy"].value or ""
    if "compact" not in policy.split(","):
        raise InternalTopicError(
            f"the topic {topic!r} has cleanup.policy={policy!r}; it needs 'compact' so that the "
            "newest record of every key is kept. Set cleanup.policy=compact on it."
        )
    return count


def _partition_count(admin: AdminClient, topic: str, timeout: float) -> int | None:
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise InternalTopicError(f"could not read metadata of the topic {topic!r}: "
                                 f"{exc.args[0].str()}.") from None
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)


def partition_for(key: str, num_partitions: int) -> int:
    """The partition of ``key`` among ``num_partitions``: CRC-32 of its UTF-8 bytes, modulo.

    Stable across processes, Python versions and releases of this package (unlike ``hash``),
    so every writer and reader of ``key`` meets in the same partition as long as the topic keeps
    its number of partitions.
    """
    return zlib.crc32(key.encode()) % num_partitions


def log_start_offset(admin: AdminClient, topic: str, partition: int, *,
                     timeout: float = 30.0) -> int:
    """The first offset still in ``topic[partition]`` (0 unless records were deleted).

    Retries while a partition has no leader (just created, or its leader died), up to
    ``timeout`` seconds.

    Raises:
        InternalTopicError: the offset could not be listed.
    """
    return _list_offset(admin, topic, partition, "earliest", "read_uncommitted", timeout)


def end_offset(admin: AdminClient, topic: str, partition: int, *, committed: bool,
               timeout: float = 30.0) -> int:
    """The end of ``topic[partition]``: with ``committed=True`` its last stable offset (below
    it every transaction is decided), else its high watermark.

    Retries while a partition has no leader (just created, or its leader died), up to
    ``timeout`` seconds.

    Raises:
        InternalTopicError: the offset could not be listed.
    """
    return _list_offset(admin, topic, partition, "latest",
                        "read_committed" if committed else "read_uncommitted", timeout)


def durable_producer(kafka_config: KafkaConfig, **settings: Any) -> Producer:
    """An ``acks=all`` producer for records of internal topics (``settings`` added, e.g.
    ``message.timeout.ms``), one request in flight so a retry cannot reorder records.

    Not idempotent: starting an idempotent producer costs a producer-id request (0.5 s here,
    measured) and gives nothing to these records, each produced and flushed on its own, whose
    readers take a duplicate as the same fact twice (the newest pin, the first boundary or
    slot record, a lease renewal)."""
    return Producer({**kafka_config.client(), "enable.idempotence": False, "acks": "all",
                     "max.in.flight.requests.per.connection": 1, "linger.ms": 0, **settings})


def produce_durably(producer: Producer, topic: str, partition: int, key: bytes, value: bytes,
                    timeout: float) -> str | None:
    """Produce one record and wait until every in-sync replica has it; ``None`` then, else why
    not (the delivery error, or that it was not acknowledged within ``timeout`` seconds)."""
    failures: list[KafkaError] = []
    producer.produce(topic, value, key, partition,
                     on_delivery=lambda err, _msg: failures.append(err) if err else None)
    if producer.flush(timeout) > 0 or failures:
        return failures[0].str() if failures else f"not acknowledged within {timeout:.0f}s"
    return None


def offset_for_time(admin: AdminClient, topic: str, partition: int, timestamp_ms: int, *,
                    timeout: float = 30.0) -> int:
    """The first offset of ``topic[partition]`` whose record timestamp is ``timestamp_ms`` or
    later (the broker's time index), or the high watermark when there is none: where a read of
    what was written since ``timestamp_ms`` starts, whatever came before.

    Raises:
        InternalTopicError: the offset could not be listed.
    """
    found = _list_offset(admin, topic, partition, timestamp_ms, "read_uncommitted", timeout)
    if found >= 0:
        return found
    return end_offset(admin, topic, partition, committed=False, timeout=timeout)


def high_watermark(kafka_config: KafkaConfig, topic: str, partition: int, *,
                   timeout: float = 30.0) -> int:
    """The high watermark of ``topic[partition]`` (open transactions' records included), asked
    by a short-lived ``read_uncommitted`` consumer: tens of milliseconds, where a new admin
    client's first offset lookup takes up to a second (its metadata first).

    Raises:
        InternalTopicError: no answer within ``timeout`` seconds.
    """
    config = kafka_config.consumer(isolation_level="read_uncommitted")
    consumer = Consumer(config)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return int(consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=max(0.1, min(
                        5.0, deadline - time.monotonic())), cached=False)[1])
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise InternalTopicError(
                        f"could not list the high watermark of {topic}[{partition}]: "
                        f"{exc.args[0].str()}") from None
                time.sleep(0.2)
    finally:
        consumer.close()


def _list_offset(admin: AdminClient, topic: str, partition: int,
                 kind: Literal["earliest", "latest"] | int, isolation_level: str,
                 timeout: float) -> int:
    try:
        return list_offsets(admin, [(topic, partition)], kind, isolation_level=isolation_level,
                            timeout=timeout)[(topic, partition)]
    except OffsetResolutionError as exc:
        raise InternalTopicError(f"could not list offsets of {topic}[{partition}]: {exc}") from None


def read_partition(
    kafka_config: KafkaConfig | Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    start_offset: int | None = None,
    until_offset: int | None = None,
    keep: Callable[[bytes], bool] | None = None,
    committed: bool = True,
    timeout: float = 30.0,
) -> PartitionRead:
    """The committed records of ``topic[partition]`` in ``[start_offset, until_offset)`` whose
    key ``keep`` accepts (all keyed records without ``keep``), in offset order.

    ``start_offset`` defaults to the log start offset, ``until_offset`` to the current high
    watermark. Reads with ``isolation.level=read_committed`` and waits until every record below
    ``until_offset`` is decided (committed or aborted), i.e. until the partition's last stable
    offset reaches it. Records without a key are skipped; tombstones are returned with
    ``value=None``. The read may go past ``until_offset``; ``end_offset`` says how far it went
    (``start_offset`` when ``until_offset <= start_offset``: nothing is read).
    ``committed=False`` reads ``read_uncommitted`` instead, without waiting: for records
    written outside transactions, next to transactional ones that may still be open.

    Raises:
        InternalTopicError: the records below ``until_offset`` were not all decided within
            ``timeout`` seconds (a transaction on the partition is still open), or the
            partition could not be read.
    """
    kafka_config = KafkaConfig.of(kafka_config)
    if start_offset is None:
        start_offset = log_start_offset(AdminClient(kafka_config.client()), topic,
                                        partition, timeout=timeout)
    if until_offset is None:
        until_offset = high_watermark(kafka_config, topic, partition, timeout=timeout)
    records: list[InternalRecord] = []
    if until_offset <= start_offset:
        return PartitionRead((), start_offset)
    config = kafka_config.consumer(
        isolation_level="read_committed" if committed else "read_uncommitted")
    config.setdefault("fetch.wait.max.ms", 20)  # internal partitions are small: do not linger
    consumer = Consumer(config)
    deadline = time.monotonic() + timeout
    scanned = 0
    try:
        consumer.assign([TopicPartition(topic, partition, start_offset)])
        while True:
            if time.monotonic() > deadline:
                raise InternalTopicError(
                    f"{topic}[{partition}] did not become readable up to offset {until_offset} "
                    f"within {timeout:.0f}s: a transaction on it is still open (the broker "
                    "aborts a crashed producer's transaction after its transaction.timeout.ms). "
                    "Retry after that."
                )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err, offset = msg.error(), msg.offset()
            assert offset is not None
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if offset >= until_offset:
                        return PartitionRead(tuple(records), offset, scanned)
                    continue
                raise InternalTopicError(f"could not read {topic}[{partition}]: {err.str()}.")
            scanned += 1
            key, value = msg.key(), msg.value()
            if isinstance(key, bytes) and (keep is None or keep(key)):
                records.append(InternalRecord(key, value if isinstance(value, bytes) else None,
                                              offset, msg.timestamp()[1]))
            if offset + 1 >= until_offset:
                return PartitionRead(tuple(records), offset + 1, scanned)
    finally:
        consumer.close()
