"""The Kafka interval asset's watcher (``KafkaIntervalEventTrigger``) run the way Airflow 3.3's
triggerer runs it (:class:`Triggerer`) against the real broker: one announcement per complete
interval, in order, held back by an open transaction; resumed from its recorded position by a
new instance (a triggerer restart) without announcing anything twice; an announcement Airflow
has not stored yet (however long that takes) announced again after the triggerer dies, and the
claims that make that second announcement read nothing; an unknown topic announced as an
error, once."""

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

from airflow.triggers.shared_stream import AckTimeout, SharedStreamManager

from airflow_provider_kafka_spark.offsets import RunKey
from airflow_provider_kafka_spark.offsets.intervals import (
    Announcement,
    Interval,
    WatcherPosition,
    claim_intervals,
    read_position,
    record_position,
)
from airflow_provider_kafka_spark.triggers.intervals import KafkaIntervalEventTrigger
from tools.kafka_records import produce, transactional_producer

pytestmark = pytest.mark.integration

EVERY_MS = 60_000
POLL_S = 0.2
OLD_HANDOFF_S = 5.0
"""How long the watcher used to wait after an announcement before recording its position,
assuming Airflow had stored the event by then."""


@pytest.fixture(autouse=True)
def kafka_default(monkeypatch: pytest.MonkeyPatch, kafka_config: dict[str, Any]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": kafka_config}))


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


class Triggerer:
    """One trigger run as Airflow 3.3's triggerer runs it (``TriggerRunner.run_trigger``): a
    trigger with a shared stream key through a ``SharedStreamManager`` and its
    ``filter_shared_stream``, any other through ``run()``; after each event it asks for the next
    at once. Storing an event (the supervisor's ``Trigger.submit_event``, then its persist
    confirmation on the next state sync) is :meth:`store`."""

    TRIGGER_ID = 1

    def __init__(self, trigger: KafkaIntervalEventTrigger, ack_timeout: float = 300.0) -> None:
        self.manager = SharedStreamManager(ack_timeout=ack_timeout)
        self.key = trigger.shared_stream_key()
        self.events: AsyncIterator[Any] = trigger.run() if self.key is None else \
            trigger.filter_shared_stream(self.manager.subscribe(
                trigger_id=self.TRIGGER_ID, trigger=trigger, key=self.key))
        self.pending: asyncio.Future[Any] | None = None
        self.unstored: list[int] = []

    def _next(self) -> asyncio.Future[Any]:
        if self.pending is None:
            self.pending = asyncio.ensure_future(self.events.__anext__())
        return self.pending

    async def announcement(self, *, store: bool = True, timeout: float = 30.0) -> dict[str, Any]:
        """The next event's payload; stored at once unless ``store=False``."""
        event = await asyncio.wait_for(asyncio.shield(self._next()), timeout)
        self.pending = None
        if self.key is not None:  # bound to its raw event before anything else runs
            seq = self.manager.bind_pending_event(trigger_id=self.TRIGGER_ID, key=self.key)
            assert seq is not None, "the event is not bound to the stream's persist gate"
            self.unstored.append(seq)
        self._next()  # the triggerer goes on with the trigger at once
        if store:
            self.store()
        return dict(event.payload)

    def store(self) -> None:
        """Airflow stored the events announced so far."""
        self.manager.confirm_persisted(self.unstored)
        self.unstored = []

    async def quiet(self, seconds: float) -> None:
        """Nothing is announced within ``seconds``."""
        done, _ = await asyncio.wait({self._next()}, timeout=seconds)
        assert not done, f"announced: {self._next().result()}"

    async def kill(self) -> None:
        """The triggerer dies: the trigger stops where it is; nothing more is stored."""
        if self.pending is not None:
            self.pending.cancel()
            await asyncio.gather(self.pending, return_exceptions=True)
        await self.manager.stop_all()


async def wait_for_position(kafka_config: dict[str, Any], state: str,
                            expected: WatcherPosition) -> None:
    deadline = time.monotonic() + 10
    while (found := await asyncio.to_thread(read_position, kafka_config, "w", topic=state)) \
            != expected:
        assert time.monotonic() < deadline, f"the position is {found}, not {expected}"
        await asyncio.sleep(0.1)


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
        triggerer = Triggerer(watcher(topic, state, t0))
        first = await triggerer.announcement()
        assert first == Announcement(
            "w", f"topics:{topic}", Interval(t0, t0 + EVERY_MS)).to_payload()
        assert (first["start"], first["end"]) == interval(0, t0)
        assert first["partition_key"] == datetime.fromtimestamp(t0 / 1000, UTC).strftime(
            "%Y-%m-%dT%H:%M:%S")  # CronPartitionTimetable's default key format, in UTC
        # Interval 1 is held back by the open transaction, however long it stays open.
        await triggerer.quiet(1.5)
        await asyncio.to_thread(txn.commit_transaction, 30)
        second = await triggerer.announcement()
        third = await triggerer.announcement()
        assert [(p["start"], p["end"]) for p in (second, third)] == [interval(1, t0),
                                                                    interval(2, t0)]
        # Interval 3 has no record at or after its end: nothing more. Each announcement was
        # stored: the position reaches interval 3.
        await wait_for_position(kafka_config, state, WatcherPosition(t0 + 3 * EVERY_MS))
        await triggerer.quiet(0)
        await triggerer.kill()

        # A new instance (a triggerer restart) resumes at interval 3, whatever its start says.
        triggerer = Triggerer(watcher(topic, state, t0 - 10 * EVERY_MS))
        await triggerer.quiet(1.0)
        await asyncio.to_thread(produce, kafka_config, topic,
                                [(0, b"a4", b"", at(4, 1)), (1, b"b4", b"", at(4, 2))])
        fourth = await triggerer.announcement()
        assert (fourth["start"], fourth["end"]) == interval(3, t0)
        await triggerer.kill()

    asyncio.run(scenario())


def test_an_announcement_airflow_has_not_stored_is_announced_again_after_the_triggerer_dies(
        new_topic: Any, internal_topic: Any, kafka_config: dict[str, Any]) -> None:
    topic, state, pins = new_topic(partitions=1), internal_topic("watchers"), \
        internal_topic("pins")
    t0 = (int(time.time() * 1000) - 3 * EVERY_MS) // EVERY_MS * EVERY_MS
    produce(kafka_config, topic, [(0, b"x", b"", t0 + 1000), (0, b"y", b"", t0 + EVERY_MS + 1)])

    async def scenario() -> dict[str, Any]:
        triggerer = Triggerer(watcher(topic, state, t0))
        first = await triggerer.announcement(store=False)
        # Storing the event takes longer than the 5 s the watcher used to wait before it
        # recorded its position (a loaded database); then the triggerer dies.
        await asyncio.sleep(OLD_HANDOFF_S + 1)
        assert await asyncio.to_thread(read_position, kafka_config, "w", topic=state) \
            == WatcherPosition(t0), "the position moved past an event Airflow has not stored"
        await triggerer.kill()
        # The next triggerer announces that interval again; once stored, the position moves.
        triggerer = Triggerer(watcher(topic, state, t0))
        assert await triggerer.announcement() == first
        await wait_for_position(kafka_config, state, WatcherPosition(t0 + EVERY_MS))
        await triggerer.kill()
        return first

    first = asyncio.run(scenario())
    assert (first["start"], first["end"]) == interval(0, t0)

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


def test_an_announcement_the_triggerer_gives_up_on_fails_the_trigger_and_is_announced_again(
        new_topic: Any, internal_topic: Any, kafka_config: dict[str, Any]) -> None:
    topic, state = new_topic(partitions=1), internal_topic("watchers")
    t0 = (int(time.time() * 1000) - 3 * EVERY_MS) // EVERY_MS * EVERY_MS
    produce(kafka_config, topic, [(0, b"x", b"", t0 + 1000), (0, b"y", b"", t0 + EVERY_MS + 1)])

    async def scenario() -> None:
        # The triggerer waits 1 s ([triggerer] shared_stream_ack_timeout) for the event to be
        # stored, then fails the trigger; Airflow starts it again.
        triggerer = Triggerer(watcher(topic, state, t0), ack_timeout=1.0)
        first = await triggerer.announcement(store=False)
        with pytest.raises(AckTimeout):
            await triggerer.announcement()
        await triggerer.kill()
        assert await asyncio.to_thread(read_position, kafka_config, "w", topic=state) \
            == WatcherPosition(t0)
        triggerer = Triggerer(watcher(topic, state, t0))
        assert await triggerer.announcement() == first
        await triggerer.kill()

    asyncio.run(scenario())


def test_an_unknown_topic_is_announced_as_an_error_once_then_intervals_once_it_exists(
        internal_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any) -> None:
    from confluent_kafka.admin import NewTopic

    topic, state = f"t-later-{uuid.uuid4().hex[:8]}", internal_topic("watchers")
    t0 = (int(time.time() * 1000) - 3 * EVERY_MS) // EVERY_MS * EVERY_MS

    async def scenario() -> None:
        triggerer = Triggerer(watcher(topic, state, t0))
        error = await triggerer.announcement()
        assert error["status"] == "error" and error["watcher"] == "w"
        assert f"unknown topic(s) ['{topic}']" in error["error"], error
        # Stored: the watcher records that it announced it.
        deadline = time.monotonic() + 10
        while (await asyncio.to_thread(read_position, kafka_config, "w", topic=state)
               ).error is None:
            assert time.monotonic() < deadline, "the error announced was not recorded"
            await asyncio.sleep(0.1)
        await triggerer.kill()
        # Restarted with the topic still missing: the same error is not announced again.
        triggerer = Triggerer(watcher(topic, state, t0))
        await triggerer.quiet(1.0)
        await asyncio.to_thread(lambda: kafka_admin.create_topics(
            [NewTopic(topic, num_partitions=1)])[topic].result(timeout=30))
        await asyncio.to_thread(produce, kafka_config, topic, [(0, b"x", b"", t0 + EVERY_MS)])
        first = await triggerer.announcement()
        assert (first["status"], first["start"], first["end"]) == (
            "complete", *interval(0, t0))
        await triggerer.kill()

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
