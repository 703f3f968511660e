"""Sensors in poke mode and deferred, and their triggers' ``run()`` driven directly in asyncio,
against the real broker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pendulum
import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import TriggerEvent
from confluent_kafka.admin import NewPartitions

from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    KafkaSparkError,
    Subscription,
    Timestamp,
    resolve_offsets,
)
from airflow_provider_kafka_spark.offsets.completeness import check_interval_complete, check_partitions
from airflow_provider_kafka_spark.sensors import (
    KafkaIntervalCompleteSensor,
    KafkaPartitionsSensor,
)
from airflow_provider_kafka_spark.triggers import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)
from tools.kafka_records import MINUTE_MS, produce, transactional_producer, wait_for_markers

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def kafka_default(monkeypatch: pytest.MonkeyPatch, kafka_config: dict[str, Any]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": kafka_config}))


async def _first(trigger: Any) -> TriggerEvent:
    async for event in trigger.run():
        return event
    raise AssertionError("the trigger ended without an event")


def first_event(trigger: Any, timeout: float = 30.0) -> TriggerEvent:
    """Run ``trigger.run()`` in a fresh event loop until its first event."""
    return asyncio.run(asyncio.wait_for(_first(trigger), timeout))


def until(call: Any, accept: Any, timeout: float = 15.0) -> Any:
    """Call ``call()`` until ``accept(result)``; return that result."""
    deadline = time.monotonic() + timeout
    while not accept(result := call()):
        assert time.monotonic() < deadline, f"still {result!r} after {timeout}s"
        time.sleep(0.1)
    return result


def rebuilt(trigger: Any) -> Any:
    """The trigger the triggerer would build from ``serialize()`` (through JSON)."""
    classpath, kwargs = trigger.serialize()
    assert classpath == f"{type(trigger).__module__}.{type(trigger).__qualname__}"
    return type(trigger)(**json.loads(json.dumps(kwargs)))


def test_partitions_sensor_waits_for_the_topic_then_for_scale_out(
        new_topic: Any, kafka_admin: Any) -> None:
    prefix = f"disc{uuid.uuid4().hex[:6]}"
    sensor = KafkaPartitionsSensor(task_id="discover", topic_pattern=f"{prefix}-.*",
                                   min_partitions=3)
    assert sensor.poke({}) is False
    topic = new_topic(partitions=2, prefix=prefix)
    # Cluster metadata can lag a created topic or partition by a moment: poke until it shows.
    result = until(lambda: sensor.check({}), lambda r: "matches no topic" not in r.waiting_for)
    assert not result.done and "has 2 partition(s), waiting for 3" in result.waiting_for
    kafka_admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    poked = until(lambda: sensor.poke({}), lambda r: r is not False)
    assert isinstance(poked, PokeReturnValue) and poked.is_done
    assert poked.xcom_value == [[topic, 0], [topic, 1], [topic, 2]]


def test_interval_sensor_completeness_and_idleness(
        new_topic: Any, kafka_config: dict[str, Any]) -> None:
    topic = new_topic(partitions=3)
    end = int(time.time() * 1000) - 60 * MINUTE_MS
    produce(kafka_config, topic, [(0, None, b"late-enough", end + 1),
                                  (1, None, b"old", end - 30 * MINUTE_MS)])

    def check(idle_timeout: float | None) -> Any:
        return KafkaIntervalCompleteSensor(task_id="complete", topics=topic, end=str(end),
                                           idle_timeout=idle_timeout).check({})

    waiting = check(None)
    assert not waiting.done
    assert waiting.waiting_for.startswith("2 of 3 partition(s) not complete up to ")
    assert f"{topic}/1 newest record at" in waiting.waiting_for
    assert f"{topic}/2 has no record yet" in waiting.waiting_for
    # Partition 1's newest record is 90 min old: idle for 10 min, not for 3 h.
    assert check(600).payload["idle"] == [[topic, 1], [topic, 2]]
    three_hours = check(3 * 3600)
    assert not three_hours.done and f"{topic}/1" in three_hours.waiting_for \
        and f"{topic}/2" not in three_hours.waiting_for

    produce(kafka_config, topic, [(1, None, b"at-end", end), (2, None, b"later", end + 5)])
    poked = KafkaIntervalCompleteSensor(task_id="complete", topics=topic).poke(
        {"data_interval_end": _datetime(end)})
    assert isinstance(poked, PokeReturnValue)
    assert poked.xcom_value["idle"] == []


def test_interval_sensor_waits_for_open_transactions_that_began_before_the_end(
        new_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any) -> None:
    """A record past the end inside an open transaction does not complete the interval: the
    in-interval record before it may still be committed. Idleness never skips an open one."""
    topic = new_topic(partitions=2)
    end = int(time.time() * 1000) - 60 * MINUTE_MS
    produce(kafka_config, topic, [(0, None, b"before", end - 5 * MINUTE_MS)])
    tx = transactional_producer(kafka_config)
    tx.begin_transaction()
    produce(kafka_config, topic, [(0, None, b"in", end - MINUTE_MS),
                                  (0, None, b"past", end + MINUTE_MS),
                                  (1, None, b"old-in", end - 30 * MINUTE_MS)], tx)
    assert tx.flush(30) == 0

    def check(idle_timeout: float | None) -> Any:
        return KafkaIntervalCompleteSensor(task_id="complete", topics=topic, end=str(end),
                                           idle_timeout=idle_timeout).check({})

    for idle_timeout in (None, 60.0):
        waiting = check(idle_timeout)
        assert not waiting.done
        assert f"{topic}/0 has an open transaction from offset 1" in waiting.waiting_for
        assert f"{topic}/1 has an open transaction from offset 0" in waiting.waiting_for

    tx.commit_transaction(30)
    wait_for_markers(kafka_admin, topic, 2)
    # p0 has a committed record past the end; p1 only an old one, so it is complete by
    # idleness only (and its commit marker, stamped now, is past the end anyway).
    done = check(60.0)
    assert done.done
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest",
                             Timestamp(end))
    assert {r.partition: (r.start, r.stop) for r in ranges} == {0: (0, 2), 1: (0, 1)}


def test_deferred_interval_sensor_resumes_when_the_last_partition_catches_up(
        new_topic: Any, kafka_config: dict[str, Any]) -> None:
    topic = new_topic(partitions=2)
    end = int(time.time() * 1000) - 10 * MINUTE_MS
    produce(kafka_config, topic, [(0, None, b"a", end), (1, None, b"b", end - 1)])
    sensor = KafkaIntervalCompleteSensor(task_id="complete", topics=topic, deferrable=True,
                                         poke_interval=0.2, timeout=60)
    context = {"data_interval_end": _datetime(end)}
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, KafkaIntervalCompleteTrigger)
    assert trigger.serialize()[1] == {"kafka_conn_id": "kafka_default", "topics": [topic],
                                      "poll_interval": 0.2, "end_ms": end, "idle_timeout": None}

    async def late_record_then_event() -> TriggerEvent:
        task = asyncio.ensure_future(_first(rebuilt(trigger)))
        await asyncio.sleep(0.5)
        assert not task.done()  # still waiting for partition 1
        await asyncio.to_thread(produce, kafka_config, topic, [(1, None, b"c", end + 1)])
        return await asyncio.wait_for(task, 30)

    event = asyncio.run(late_record_then_event())
    assert event.payload == {"status": "success",
                             "end": _datetime(end).isoformat(timespec="milliseconds")
                             .replace("+00:00", "Z"), "idle": []}
    # Run twice (a triggerer restart): the same answer.
    assert first_event(rebuilt(trigger)).payload == event.payload
    assert sensor.execute_complete(context, event.payload) == {
        "end": event.payload["end"], "idle": []}


def test_partitions_trigger_fires_once_the_topic_exists(new_topic: Any) -> None:
    prefix = f"trig{uuid.uuid4().hex[:6]}"
    trigger = rebuilt(KafkaPartitionsTrigger(topic_pattern=f"{prefix}-.*", min_partitions=1,
                                             poll_interval=0.2))

    async def create_then_event() -> tuple[str, TriggerEvent]:
        task = asyncio.ensure_future(_first(trigger))
        await asyncio.sleep(0.5)
        assert not task.done()
        topic = await asyncio.to_thread(new_topic, 1, prefix)
        return topic, await asyncio.wait_for(task, 30)

    topic, event = asyncio.run(create_then_event())
    assert event.payload == {"status": "success", "partitions": [[topic, 0]]}


def test_a_broken_connection_fails_the_deferred_sensor_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_BROKEN", json.dumps(
        {"conn_type": "kafka", "extra": {"sasl.password": "x-secret-1"}}))
    trigger = KafkaPartitionsTrigger(kafka_conn_id="kafka_broken", topics="t", poll_interval=0.1)
    event = first_event(trigger)
    assert event.payload["status"] == "error"
    assert "bootstrap.servers" in event.payload["message"]
    assert "x-secret-1" not in event.payload["message"]
    sensor = KafkaPartitionsSensor(task_id="discover", kafka_conn_id="kafka_broken", topics="t")
    with pytest.raises(KafkaSparkError, match="discover: the trigger stopped waiting: Airflow "
                                              "connection 'kafka_broken'"):
        sensor.execute_complete({}, event.payload)


def _datetime(millis: int) -> pendulum.DateTime:
    return pendulum.from_timestamp(millis / 1000, tz="UTC")


def test_a_negative_idle_timeout_is_refused_not_taken_for_completeness(
        new_topic: Any, kafka_config: dict[str, Any]) -> None:
    """The partition holds a record before ``end`` and none after: not complete. A negative
    ``idle_timeout`` made every partition idle, i.e. the interval complete at once."""
    topic = new_topic(partitions=1)
    now = int(time.time() * 1000)
    produce(kafka_config, topic, [(0, None, b"recent", now - MINUTE_MS)])
    end = now + 60 * MINUTE_MS
    subscription = Subscription.topics([topic])

    with pytest.raises(ConfigurationError, match=r"^complete: idle_timeout=-3600 is not a "
                                                 r"positive, finite duration; pass"):
        KafkaIntervalCompleteSensor(task_id="complete", topics=topic, end=str(end),
                                    idle_timeout=-3600)
    with pytest.raises(ConfigurationError, match=r"^KafkaIntervalCompleteTrigger: idle_timeout="):
        KafkaIntervalCompleteTrigger(topics=topic, end_ms=end, idle_timeout=-3600)
    with pytest.raises(ConfigurationError, match=r"^check_interval_complete: idle_timeout=-3600"):
        check_interval_complete(kafka_config, subscription, end, -3600)
    with pytest.raises(ConfigurationError, match=r"^check_partitions: min_partitions=0"):
        check_partitions(kafka_config, subscription, 0)

    waiting = KafkaIntervalCompleteSensor(task_id="complete", topics=topic, end=str(end),
                                          idle_timeout=3600).check({})
    assert not waiting.done and f"{topic}/0 newest record at" in waiting.waiting_for


def test_a_templated_min_partitions_is_checked_once_rendered(
        new_topic: Any) -> None:
    topic = new_topic(partitions=2)
    sensor = KafkaPartitionsSensor(task_id="discover", topics=topic,
                                   min_partitions="{{ params.n }}", poke_interval=0.1, timeout=5)
    sensor.min_partitions = "-2"  # as rendered
    with pytest.raises(ConfigurationError, match=r"^discover: min_partitions='-2' is not valid"):
        sensor.execute({})
    sensor.min_partitions = "2"
    assert sensor.execute({}) == [[topic, 0], [topic, 1]]
