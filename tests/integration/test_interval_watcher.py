"""The Kafka interval asset's watcher (``KafkaIntervalEventTrigger``) driven directly in asyncio
against the real broker: one announcement per complete interval, in order, held back by an
open transaction; resumed from its recorded position by a new instance (a triggerer restart)
without announcing anything twice; an interval announced again when the process died before
its position was recorded, and the claims that make that second announcement read nothing; an
unknown topic announced as an error, once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow_provider_kafka_spark.offsets import RunKey
from airflow_provider_kafka_spark.offsets.intervals import (
    Announcement,
    Interval,
    WatcherPosition,
    claim_intervals,
    read_position,
    record_position,
)
from airflow_provider_kafka_spark.triggers import intervals as watcher_module
from airflow_provider_kafka_spark.triggers.intervals import KafkaIntervalEventTrigger
from tools.kafka_records import produce, transactional_producer

pytestmark = pytest.mark.integration

EVERY_MS = 60_000
POLL_S = 0.2


@pytest.fixture(autouse=True)
def kafka_default(monkeypatch: pytest.MonkeyPatch, kafka_config: dict[str, Any]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    # Seconds between an announcement and its recorded position: short, for a quick test.
    monkeypatch.setattr(watcher_module, "HANDOFF_S", 0.3)


@pytest.fixture
def internal_topic(kafka_admin: Any) -> Iterator[Callable[[str], str]]:
    """Factory: a fresh name for an internal topic the code under test creates; deleted
    after."""
    names: list[str] = []

    def name(kind: str) -> str:
        names.append(f"_kafka_spark_{kind}-{uuid.uuid4().hex[:8]}")
        return names[-1]

    yield name
    existing = set(kafka_admin.list_topics(timeout=30).topics)
    if gone := [n for n in names if n in existing]:
        for future in kafka_admin.delete_topics(gone).values():
            future.result(timeout=30)


def watcher(topic: str, state_topic: str, start_ms: int, name: str = "w") -> Any:
    return KafkaIntervalEventTrigger(
        watcher=name, every=EVERY_MS / 1000, start=datetime.fromtimestamp(start_ms / 1000, UTC),
        topics=topic, poll_interval=POLL_S, state_topic=state_topic)


async def next_payload(events: AsyncIterator[Any], timeout: float = 30.0) -> dict[str, Any]:
    return dict((await asyncio.wait_for(events.__anext__(), timeout)).payload)


def interval(k: int, t0: int) -> tuple[str, str]:
    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    return iso(t0 + k * EVERY_MS), iso(t0 + (k + 1) * EVERY_MS)


def test_each_complete_interval_is_announced_once_in_order_and_a_restart_resumes_after_the_last(
        new_topic: Any, internal_topic: Any, kafka_config: dict[str, Any]) -> None:
    topic, state = new_topic(partitions=2), internal_topic("watchers")
    # Four past intervals [t0 + k min, t0 + (k+1) min), k = 0..3; their ends have passed.
    t0 = (int(time.time() * 1000) - 5 * EVERY_MS) // EVERY_MS * EVERY_MS

    def at(k: int, s: int) -> int:
        return t0 + k * EVERY_MS + s * 1000

    produce(kafka_config, topic, [(0, b"a0", b"", at(0, 1)), (1, b"b0", b"", at(0, 2)),
                                  (0, b"a1", b"", at(1, 1)), (1, b"b1", b"", at(1, 2))])
    # An open transaction inside interval 1 on partition 1; then records of intervals 2 and 3.
    txn = transactional_producer(kafka_config)
    txn.begin_transaction()
    produce(kafka_config, topic, [(1, b"open", b"", at(1, 3))], producer=txn)
    txn.flush(30)
    produce(kafka_config, topic, [(0, b"a2", b"", at(2, 1)), (1, b"b2", b"", at(2, 2)),
                                  (0, b"a3", b"", at(3, 1)), (1, b"b3", b"", at(3, 2))])

    async def scenario() -> None:
        events = watcher(topic, state, t0).run()
        first = await next_payload(events)
        assert first == Announcement(
            "w", f"topics:{topic}", Interval(t0, t0 + EVERY_MS)).to_payload()
        assert (first["start"], first["end"]) == interval(0, t0)
        # Interval 1 is held back by the open transaction, however long it stays open.
        pending = asyncio.ensure_future(events.__anext__())
        done, _ = await asyncio.wait({pending}, timeout=1.5)
        assert not done, f"announced while a transaction inside it is open: {pending.result()}"
        await asyncio.to_thread(txn.commit_transaction, 30)
        second = dict((await asyncio.wait_for(pending, 30)).payload)
        third = await next_payload(events)
        assert [(p["start"], p["end"]) for p in (second, third)] == [interval(1, t0),
                                                                    interval(2, t0)]
        # Interval 3 has no record at or after its end: nothing more. The position reaches it.
        pending = asyncio.ensure_future(events.__anext__())
        deadline = time.monotonic() + 10
        while (await asyncio.to_thread(read_position, kafka_config, "w", topic=state)) \
                != WatcherPosition(t0 + 3 * EVERY_MS):
            assert time.monotonic() < deadline, "the position of interval 3 was not recorded"
            await asyncio.sleep(0.1)
        assert not pending.done()
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()

        # A new instance (a triggerer restart) resumes at interval 3, whatever its start says.
        events = watcher(topic, state, t0 - 10 * EVERY_MS).run()
        pending = asyncio.ensure_future(events.__anext__())
        done, _ = await asyncio.wait({pending}, timeout=1.0)
        assert not done, f"announced again after a restart: {pending.result()}"
        await asyncio.to_thread(produce, kafka_config, topic,
                                [(0, b"a4", b"", at(4, 1)), (1, b"b4", b"", at(4, 2))])
        fourth = dict((await asyncio.wait_for(pending, 30)).payload)
        assert (fourth["start"], fourth["end"]) == interval(3, t0)
        await events.aclose()

    asyncio.run(scenario())


def test_a_crash_before_the_position_is_recorded_announces_again_and_the_claims_read_it_once(
        new_topic: Any, internal_topic: Any, kafka_config: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    topic, state, pins = new_topic(partitions=1), internal_topic("watchers"), \
        internal_topic("pins")
    t0 = (int(time.time() * 1000) - 3 * EVERY_MS) // EVERY_MS * EVERY_MS
    produce(kafka_config, topic, [(0, b"x", b"", t0 + 1000), (0, b"y", b"", t0 + EVERY_MS + 1)])
    monkeypatch.setattr(watcher_module, "HANDOFF_S", 30.0)  # the crash comes within it

    async def announce_then_die() -> dict[str, Any]:
        events = watcher(topic, state, t0).run()
        payload = await next_payload(events)
        pending = asyncio.ensure_future(events.__anext__())  # now in the handoff wait
        await asyncio.sleep(0.5)
        pending.cancel()  # the process dies before it records the position
        await asyncio.gather(pending, return_exceptions=True)
        return payload

    first = asyncio.run(announce_then_die())
    assert read_position(kafka_config, "w", topic=state) == WatcherPosition(t0)
    again = asyncio.run(announce_then_die())
    assert again == first  # at least once: the same interval, announced a second time

    # Each announcement starts a run; the first run to claim the interval reads it, the second
    # finds it claimed and reads nothing; a retry of the first still holds it.
    announced = Announcement.from_payload(first)
    assert announced is not None and announced.interval is not None
    one, two = (RunKey("d", "resolve", f"asset_triggered__{n}") for n in (1, 2))
    since = datetime.now(UTC)
    assert claim_intervals(kafka_config, one, [announced.interval], since=since,
                           topic=pins) == {announced.interval: one}
    assert claim_intervals(kafka_config, two, [announced.interval], since=since,
                           topic=pins) == {announced.interval: one}
    assert claim_intervals(kafka_config, one, [announced.interval], since=since,
                           topic=pins) == {announced.interval: one}
    # Another task of the DAG claims for itself.
    other = RunKey("d", "resolve_other", two.run_id)
    assert claim_intervals(kafka_config, other, [announced.interval], since=since,
                           topic=pins) == {announced.interval: other}


def test_an_unknown_topic_is_announced_as_an_error_once_then_intervals_once_it_exists(
        internal_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any) -> None:
    from confluent_kafka.admin import NewTopic

    topic, state = f"t-later-{uuid.uuid4().hex[:8]}", internal_topic("watchers")
    t0 = (int(time.time() * 1000) - 3 * EVERY_MS) // EVERY_MS * EVERY_MS

    async def scenario() -> None:
        events = watcher(topic, state, t0).run()
        error = await next_payload(events)
        assert error["status"] == "error" and error["watcher"] == "w"
        assert f"unknown topic(s) ['{topic}']" in error["error"], error
        pending = asyncio.ensure_future(events.__anext__())  # records that it announced it
        deadline = time.monotonic() + 10
        while (await asyncio.to_thread(read_position, kafka_config, "w", topic=state)
               ).error is None:
            assert time.monotonic() < deadline, "the error announced was not recorded"
            await asyncio.sleep(0.1)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        # Restarted with the topic still missing: the same error is not announced again.
        events = watcher(topic, state, t0).run()
        pending = asyncio.ensure_future(events.__anext__())
        done, _ = await asyncio.wait({pending}, timeout=1.0)
        assert not done, f"announced again: {pending.result()}"
        await asyncio.to_thread(lambda: kafka_admin.create_topics(
            [NewTopic(topic, num_partitions=1)])[topic].result(timeout=30))
        await asyncio.to_thread(produce, kafka_config, topic, [(0, b"x", b"", t0 + EVERY_MS)])
        first = dict((await asyncio.wait_for(pending, 30)).payload)
        assert (first["status"], first["start"], first["end"]) == (
            "complete", *interval(0, t0))
        await events.aclose()

    try:
        asyncio.run(scenario())
    finally:
        if topic in kafka_admin.list_topics(timeout=30).topics:
            kafka_admin.delete_topics([topic])[topic].result(timeout=30)


def test_positions_are_kept_per_watcher_newest_first(internal_topic: Any,
                                                     kafka_config: dict[str, Any]) -> None:
    state = internal_topic("watchers")
    assert read_position(kafka_config, "a", topic=state) is None
    record_position(kafka_config, "a", WatcherPosition(1_000), topic=state)
    record_position(kafka_config, "b", WatcherPosition(5_000, "boom"), topic=state)
    record_position(kafka_config, "a", WatcherPosition(2_000), topic=state)
    assert read_position(kafka_config, "a", topic=state) == WatcherPosition(2_000)
    assert read_position(kafka_config, "b", topic=state) == WatcherPosition(5_000, "boom")
