"""Helpers that arrange exact data in a real broker and read it back (the tests and
``tools/fault_soak.py``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

MINUTE_MS = 60_000

Record = tuple[int, bytes | None, bytes, int]
"""(partition, key, value, timestamp millis)."""


def produce(config: dict[str, Any], topic: str, records: Iterable[Record],
            producer: Producer | None = None) -> None:
    """Produce ``records`` in order with explicit CreateTime timestamps and wait for acks."""
    own = producer is None
    producer = producer or Producer({**config, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for partition, key, value, ts in records:
        producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts,
                         on_delivery=on_delivery)
        producer.poll(0)
    if own:
        assert producer.flush(30) == 0, "records still in flight after 30 s"
    assert not failures, failures


OPEN_FOR_LONG_MS = 900_000
"""``transaction.timeout.ms`` for a transaction a fixture keeps open while its tests run: the
broker's maximum (``transaction.max.timeout.ms``, 15 min). With librdkafka's default (60 s)
the coordinator aborted a module's open transaction when the module took longer on a loaded
machine; the tests after that saw no open transaction, and the fixture's abort was fenced."""


def transactional_producer(config: dict[str, Any], timeout_ms: int = 60_000) -> Producer:
    """A producer with a new ``transactional.id``, its transactions aborted by the broker
    ``timeout_ms`` after they began unless they ended before."""
    producer = Producer({**config, "transactional.id": f"test-{uuid.uuid4().hex[:8]}",
                         "transaction.timeout.ms": timeout_ms})
    producer.init_transactions(30)
    return producer


def high_watermarks(admin: AdminClient, topic: str, partitions: int,
                    level: IsolationLevel) -> dict[int, int]:
    tps = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    futures = admin.list_offsets(tps, isolation_level=level)
    return {tp.partition: f.result(timeout=30).offset for tp, f in futures.items()}


def wait_for_markers(admin: AdminClient, topic: str, partitions: int,
                     timeout: float = 30.0) -> None:
    """Wait until the last stable offset reaches the high watermark on every partition.

    The transaction coordinator writes commit/abort markers after commit_transaction()
    returns, so a test must wait before relying on them.
    """
    deadline = time.monotonic() + timeout
    while True:
        lso = high_watermarks(admin, topic, partitions, IsolationLevel.READ_COMMITTED)
        hw = high_watermarks(admin, topic, partitions, IsolationLevel.READ_UNCOMMITTED)
        if lso == hw:
            return
        assert time.monotonic() < deadline, f"markers not written: lso={lso} hw={hw}"
        time.sleep(0.05)


def consume_all(config: dict[str, Any], topic: str, partitions: int,
                isolation_level: str = "read_uncommitted") -> list[tuple[int, int, bytes | None,
                                                                          bytes, int]]:
    """Every record of ``topic`` as (partition, offset, key, value, timestamp), by offset."""
    consumer = Consumer({
        **config, "group.id": f"check-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": isolation_level,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records = []
    done: set[int] = set()
    deadline = time.monotonic() + 30
    while len(done) < partitions and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1.0):
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            records.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                            msg.timestamp()[1]))
    consumer.close()
    assert len(done) == partitions, "did not reach the end of every partition"
    return sorted(records)


def read_committed(config: dict[str, Any], topic: str, expected: int,
                   timeout: float = 30.0, settle: float = 2.0) -> list[Any]:
    """The messages of ``topic`` a plain ``read_committed`` consumer sees: polled until
    ``expected`` arrived, then ``settle`` seconds more (so a duplicate would show); asserts
    exactly ``expected``."""
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    found: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                found.append(msg)
            if len(found) >= expected:
                deadline = min(deadline, time.monotonic() + settle)
    finally:
        consumer.close()
    assert len(found) == expected, f"{len(found)} message(s) in {topic}, expected {expected}"
    return found
