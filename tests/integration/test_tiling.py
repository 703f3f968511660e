"""Runs that tile by construction (offsets/runs.py), against a real broker: consecutive
``timestamp:`` runs of a task meet at the offsets the first of them fixed, whatever happens to
the log between them, and every lookup reads a bounded part of the pins topic."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from airflow_provider_kafka_spark.offsets import (
    DataLossError,
    OffsetRanges,
    Subscription,
    Timestamp,
)
from airflow_provider_kafka_spark.offsets.cluster import admin_client
from airflow_provider_kafka_spark.offsets.internal_topics import ensure_compacted_topic
from airflow_provider_kafka_spark.offsets.pins import PINS_PARTITIONS, PinsTopic, RunKey
from airflow_provider_kafka_spark.offsets.runs import RunRequest, resolve_run
from airflow_provider_kafka_spark.operators.resolve import KafkaResolveOffsetsOperator
from tools.kafka_records import MINUTE_MS, produce, transactional_producer, wait_for_markers

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _kafka_default(kafka_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": kafka_config}))

BASE = (int(time.time() * 1000) - 3 * 3600 * 1000) // MINUTE_MS * MINUTE_MS


def at(minute: float) -> int:
    return BASE + int(minute * MINUTE_MS)


def iso(millis: int) -> str:
    return f"timestamp:{datetime.fromtimestamp(millis / 1000, UTC).isoformat()}"


def resolve(topic: str, task_id: str, run_id: str, start: int, stop: int,
            **kwargs: Any) -> OffsetRanges:
    """One run of a resolve task, through the operator as Airflow runs it."""
    operator = KafkaResolveOffsetsOperator(task_id=task_id, topics=topic, start=iso(start),
                                           stop=iso(stop), **kwargs)
    return OffsetRanges.from_json(operator.execute({"run_id": run_id, "params": {}}))


def spans(ranges: OffsetRanges) -> dict[int, tuple[int, int]]:
    return {r.partition: (r.start, r.stop) for r in ranges}


def values(kafka_config: dict[str, Any], topic: str, ranges: OffsetRanges) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({**kafka_config, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    out: list[bytes] = []
    try:
        for r in ranges:
            if r.start == r.stop:
                continue
            consumer.assign([TopicPartition(topic, r.partition, r.start)])
            while True:
                msg = consumer.poll(10)
                assert msg is not None and msg.error() is None
                if msg.offset() >= r.stop:
                    break
                out.append(msg.value())
                if msg.offset() + 1 >= r.stop:
                    break
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("anchor", ["out-of-order record", "transaction marker"])
def test_a_deleted_stop_offset_no_longer_skips_the_next_intervals_records(
        kafka_config, kafka_admin, new_topic, anchor):
    """README's former known limit: interval A's stop T lands on an offset stamped >= T that
    older-stamped records follow; that offset is deleted; interval B used to look T up again
    and start past those records, silently. Now B starts where A stopped: the deleted offset
    is a reported loss, and the older-stamped records are read by B."""
    topic = new_topic(partitions=1, **{"retention.ms": "-1"})
    task = f"resolve_{uuid.uuid4().hex[:6]}"
    if anchor == "out-of-order record":
        # offsets 0, 1 in A's interval; 2 is stamped after T; 3, 4 before T; 5 after T.
        produce(kafka_config, topic, [(0, None, b"a0", at(1)), (0, None, b"a1", at(2)),
                                      (0, None, b"late-stamp", at(6))])
    else:
        # offsets 0, 1 in a transaction whose commit marker (offset 2) has a wall-clock stamp.
        tx = transactional_producer(kafka_config)
        tx.begin_transaction()
        produce(kafka_config, topic, [(0, None, b"a0", at(1)), (0, None, b"a1", at(2))], tx)
        tx.commit_transaction(30)
        wait_for_markers(kafka_admin, topic, 1)
    produce(kafka_config, topic, [(0, None, b"b3", at(3)), (0, None, b"b4", at(4)),
                                  (0, None, b"b5", at(7)), (0, None, b"c6", at(11))])

    first = resolve(topic, task, "a", at(0), at(5))
    assert spans(first) == {0: (0, 2)}
    for future in kafka_admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result(30)

    # Offset 2 (B's first offset) is gone: a loss B reports, exactly, instead of a silent skip.
    with pytest.raises(DataLossError) as err:
        resolve(topic, task, "b", at(5), at(10))
    assert err.value.lost == {(topic, 0): 1}
    second = resolve(topic, task, "b", at(5), at(10), on_data_loss="skip", re_resolve=True)
    assert spans(second) == {0: (3, 6)}
    assert second.lost == {(topic, 0): 1}
    # The records stamped before T that followed the deleted offset: read by B, once.
    assert values(kafka_config, topic, second) == [b"b3", b"b4", b"b5"]


def test_out_of_order_runs_meet_where_the_first_resolved_run_fixed_the_boundary(
        kafka_config, new_topic):
    """A backfill out of order: the later interval resolves first; records stamped before its
    start arrive afterwards; the earlier interval then stops exactly where the later one
    started, and the late records belong to the run after that."""
    topic = new_topic(partitions=2)
    task = f"resolve_{uuid.uuid4().hex[:6]}"
    produce(kafka_config, topic, [(p, None, f"p{p}-{m}".encode(), at(m))
                                  for p in (0, 1) for m in (1, 2, 6, 7)])
    later = resolve(topic, task, "later", at(5), at(10))
    assert spans(later) == {0: (2, 4), 1: (2, 4)}
    # Late records stamped inside the earlier interval, after the boundary was fixed.
    produce(kafka_config, topic, [(0, None, b"late", at(3)), (0, None, b"after", at(12))])
    earlier = resolve(topic, task, "earlier", at(0), at(5))
    assert spans(earlier) == {0: (0, 2), 1: (0, 2)}
    # The run after `later` starts at later's stop and reads the late record.
    last = resolve(topic, task, "last", at(10), at(15))
    assert spans(last) == {0: (4, 6), 1: (4, 4)}
    assert values(kafka_config, topic, last) == [b"late", b"after"]
    # A re-resolve keeps the boundaries fixed: same offsets.
    assert spans(resolve(topic, task, "later", at(5), at(10), re_resolve=True)) == spans(later)


def test_a_boundary_another_run_fixed_first_wins(kafka_config, new_topic):
    """Two neighbours resolving at once both find no boundary; the record first in the log
    wins for both. Here the neighbour's record is already there, with an answer a lookup
    would not give now (it was the end of the log when it resolved): the run takes it."""
    topic = new_topic(partitions=1)
    task = f"resolve_{uuid.uuid4().hex[:6]}"
    produce(kafka_config, topic, [(0, None, f"r{m}".encode(), at(m)) for m in (1, 2, 3, 7)])
    run = RunKey("tiling", task, "b")
    neighbour = RunKey("tiling", task, "a")
    subscription = Subscription.topics([topic])
    # The neighbour stopped at offset 2 when records 2.. had not arrived yet.
    from airflow_provider_kafka_spark.offsets.config import KafkaConfig

    config = KafkaConfig.of(kafka_config)  # what resolve_run hands its pins topic, with its admin
    pins = PinsTopic(config, admin_client(config))
    winners = pins.fix_boundaries(neighbour, {"stop": (at(5), {(topic, 0): 2})}, None)
    assert winners["stop"].fixed_by == neighbour
    resolution = resolve_run(kafka_config, run,
                             RunRequest(subscription, Timestamp(at(5)), Timestamp(at(10))))
    assert resolution.start_boundary is not None
    assert resolution.start_boundary.fixed_by == neighbour
    assert spans(resolution.ranges) == {0: (2, 4)}
    # A record this run writes for an instant already fixed loses to the first one.
    again = pins.fix_boundaries(run, {"start": (at(5), {(topic, 0): 3})}, None)
    assert again["start"].fixed_by == neighbour and again["start"].offsets == {(topic, 0): 2}


def test_lookups_read_a_bounded_part_of_the_pins_topic(kafka_config, new_topic):
    """100,000 pins and boundary records of other runs, written two days ago: a run's pin
    lookup and its boundary lookups read only what was written since the run began."""
    topic = new_topic(partitions=2)
    pins_topic = f"_kafka_spark_pins_{uuid.uuid4().hex[:8]}"
    task = f"resolve_{uuid.uuid4().hex[:6]}"
    produce(kafka_config, topic, [(p, None, b"v", at(m)) for p in (0, 1) for m in (1, 6)])
    subscription = Subscription.topics([topic])
    ranges = OffsetRanges(())
    ensure_compacted_topic(admin_client(kafka_config), pins_topic, partitions=PINS_PARTITIONS)
    old = int(time.time() * 1000) - 2 * 24 * 3600 * 1000
    producer = Producer({**kafka_config, "linger.ms": 50, "batch.num.messages": 10000})
    failures: list[Any] = []
    for i in range(100_000):
        other = RunKey("other_dag", "resolve", f"scheduled__{i}")
        value = {"pin": 2, "request": {}, "ranges": ranges.to_dict()}
        producer.produce(pins_topic, json.dumps(value).encode(), other.encode(),
                         partition=i % PINS_PARTITIONS, timestamp=old + i,
                         on_delivery=lambda err, _msg: err and failures.append(err))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0 and not failures, failures[:3]

    began = datetime.now(UTC) - timedelta(seconds=1)
    first = resolve_run(kafka_config, RunKey("tiling", task, "first"),
                        RunRequest(subscription, Timestamp(at(0)), Timestamp(at(5)),
                                   pins_topic=pins_topic), since=began)
    assert spans(first.ranges) == {0: (0, 1), 1: (0, 1)}
    run = RunKey("tiling", task, "second")
    second = RunRequest(subscription, Timestamp(at(5)), Timestamp(at(10)),
                        pins_topic=pins_topic)
    resolution = resolve_run(kafka_config, run, second, since=began)
    assert spans(resolution.ranges) == {0: (1, 2), 1: (1, 2)}
    assert resolution.start_boundary is not None  # found among the recent records
    assert resolution.pins_read < 2_000, resolution.pins_read
    # Its pin, found again (a retry): bounded too.
    again = resolve_run(kafka_config, run, second, since=began)
    assert again.pinned and again.ranges == resolution.ranges
    assert again.pins_read < 2_000, again.pins_read
    # Without `since` the same lookups read the whole history.
    unbounded = resolve_run(kafka_config, RunKey("tiling", task, "third"),
                            RunRequest(subscription, Timestamp(at(10)), Timestamp(at(15)),
                                       pins_topic=pins_topic))
    assert unbounded.pins_read >= 100_000 / PINS_PARTITIONS
