"""Deterministic input rows of exactly-once writes and a read_committed reader of the output:
the write_kafka tests, the kill points, the fault
soak and the write benchmark."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec


@dataclass(frozen=True)
class Record:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] | None
    timestamp: int


def row_key(index: int, row: int) -> bytes:
    return f"k{index}-{row}".encode()


def row_value(index: int, row: int) -> bytes:
    return f"v{index}-{row}".encode()


def partition_batches(index: int, rows: int, batch_rows: int,
                      pause_s: float = 0.0) -> Iterator[pa.RecordBatch]:
    """The rows of partition ``index`` (keys ``k<index>-<row>``) as Arrow batches."""
    for start in range(0, rows, batch_rows):
        stop = min(rows, start + batch_rows)
        if pause_s:
            time.sleep(pause_s)
        yield pa.RecordBatch.from_pydict({
            "key": pa.array([row_key(index, r) for r in range(start, stop)], pa.binary()),
            "value": pa.array([row_value(index, r) for r in range(start, stop)], pa.binary()),
        })


def expected_keys(partitions: int, rows: int) -> Counter[bytes]:
    return Counter(row_key(i, r) for i in range(partitions) for r in range(rows))


def read_committed(config: dict[str, Any], topic: str, timeout: float = 60.0,
                   isolation_level: str = "read_committed") -> list[Record]:
    """Every record of ``topic`` visible with ``isolation.level=read_committed`` (or
    ``isolation_level``).

    With read_committed, waits until the last stable offset of each partition reaches the high
    watermark seen at the start (commit markers are written after ``commit_transaction()``
    returns).
    """
    admin = AdminClient(config)
    partitions = len(admin.list_topics(topic=topic, timeout=30).topics[topic].partitions)
    tps = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    highs = {tp.partition: f.result(timeout=30).offset for tp, f in
             admin.list_offsets(tps, isolation_level=IsolationLevel.READ_UNCOMMITTED).items()}
    # auto.offset.reset=error: a fetch refused as out of range fails the read instead of
    # silently jumping to the end (and returning too few records).
    consumer = Consumer({**config, "group.id": "write-kafka-tests", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": isolation_level,
                         "auto.offset.reset": "error"})
    pending = {p for p, high in highs.items() if high > 0}
    consumer.assign([TopicPartition(topic, p, 0) for p in pending])
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    try:
        while pending:
            assert time.monotonic() < deadline, f"{topic}: partitions {pending} not readable"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() >= highs[msg.partition()]:
                    pending.discard(msg.partition())
                continue
            headers = msg.headers()
            records.append(Record(msg.partition(), msg.key(), msg.value(),
                                  None if headers is None else tuple(headers),
                                  msg.timestamp()[1]))
            if msg.offset() + 1 >= highs[msg.partition()]:
                pending.discard(msg.partition())
    finally:
        consumer.close()
    return records
