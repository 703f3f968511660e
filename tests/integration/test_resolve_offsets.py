"""Every resolution rule, checked against a real broker's answers on exactly arranged data.

The module's topic has 3 partitions, all timestamps explicit (CreateTime), one minute apart:
  p0: 10 plain records                          offsets 0..9   ts 0..9 min
  p1: committed txn (4 records) + its marker    offsets 0..3   ts 0..3 min, marker at 4
      aborted txn (3 records) + its marker      offsets 5..7   ts 4..6 min, marker at 8
      3 plain records                           offsets 9..11  ts 7..9 min
  p2: 5 plain records                           offsets 0..4   ts 0..4 min
      an OPEN transaction, left hanging         offsets 5..6   ts 5..6 min  (LSO 5 < HW 7)
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from airflow_provider_kafka_spark.offsets import (
    CommitError,
    ConfigurationError,
    DataLossError,
    Earliest,
    IntervalNotCompleteError,
    Latest,
    OffsetRanges,
    OffsetResolutionError,
    OffsetSpecError,
    PartitionRange,
    SpecificOffsets,
    Subscription,
    Timestamp,
    commit_offsets,
    list_partitions,
    resolve_offsets,
)
from airflow_provider_kafka_spark.offsets.cluster import TOPIC_PROPAGATION_S, admin_client
from airflow_provider_kafka_spark.offsets.completeness import (
    check_interval_complete,
    check_partitions,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.resolve import OffsetRequest, resolve_request
from tests.support.topics import create_topic
from tools.kafka_records import (
    MINUTE_MS,
    OPEN_FOR_LONG_MS,
    consume_all,
    high_watermarks,
    produce,
    transactional_producer,
    wait_for_markers,
)

pytestmark = pytest.mark.integration

BASE = (int(time.time() * 1000) - 3 * 3600 * 1000) // MINUTE_MS * MINUTE_MS


def at(minute: float) -> int:
    return BASE + int(minute * MINUTE_MS)


@pytest.fixture(scope="module")
def topic(kafka_config: dict[str, Any], kafka_admin: AdminClient):
    name = f"resolve-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_admin, name, 3)
    produce(kafka_config, name, [(0, f"p0-{i}".encode(), b"v", at(i)) for i in range(10)])

    tx = transactional_producer(kafka_config)
    tx.begin_transaction()
    produce(kafka_config, name, [(1, f"c-{i}".encode(), b"v", at(i)) for i in range(4)], tx)
    tx.commit_transaction(30)
    wait_for_markers(kafka_admin, name, 3)
    tx.begin_transaction()
    produce(kafka_config, name, [(1, f"a-{i}".encode(), b"v", at(4 + i)) for i in range(3)], tx)
    assert tx.flush(30) == 0  # abort_transaction() would purge records not yet sent
    tx.abort_transaction(30)
    wait_for_markers(kafka_admin, name, 3)
    produce(kafka_config, name, [(1, f"p1-{i}".encode(), b"v", at(7 + i)) for i in range(3)])

    produce(kafka_config, name, [(2, f"p2-{i}".encode(), b"v", at(i)) for i in range(5)])
    hanging = transactional_producer(kafka_config, OPEN_FOR_LONG_MS)
    hanging.begin_transaction()
    produce(kafka_config, name, [(2, f"open-{i}".encode(), b"v", at(5 + i)) for i in range(2)],
            hanging)
    assert hanging.flush(30) == 0
    yield name
    hanging.abort_transaction(30)
    kafka_admin.delete_topics([name])[name].result(30)


def resolve(config: dict[str, Any], topic: str, start: object, stop: object,
            **kwargs: Any) -> dict[int, tuple[int, int]]:
    ranges = resolve_offsets(config, Subscription.topics([topic]), start, stop, **kwargs)
    assert all(r.topic == topic for r in ranges)
    return {r.partition: (r.start, r.stop) for r in ranges}


def test_layout_is_as_arranged(kafka_config, kafka_admin, topic):
    hw = high_watermarks(kafka_admin, topic, 3, IsolationLevel.READ_UNCOMMITTED)
    lso = high_watermarks(kafka_admin, topic, 3, IsolationLevel.READ_COMMITTED)
    assert hw == {0: 10, 1: 12, 2: 7}
    assert lso == {0: 10, 1: 12, 2: 5}  # the open transaction holds p2's LSO below its HW
    offsets = {(p, o) for p, o, *_ in consume_all(kafka_config, topic, 3)}
    # p1's offsets 4 and 8 are transaction markers: no record is there.
    assert {o for p, o in offsets if p == 1} == set(range(12)) - {4, 8}


def test_earliest_and_latest_follow_the_isolation_level(kafka_config, topic):
    assert resolve(kafka_config, topic, "earliest", "latest") == {0: (0, 10), 1: (0, 12), 2: (0, 5)}
    assert resolve(kafka_config, topic, "earliest", "latest",
                   isolation_level="read_uncommitted") == {0: (0, 10), 1: (0, 12), 2: (0, 7)}


def test_result_metadata_and_json(kafka_config, topic):
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest",
                             "timestamp:" + str(at(3)), isolation_level="read_committed")
    assert ranges.starting == "earliest"
    assert ranges.stopping == str(Timestamp(at(3)))
    assert ranges.isolation_level == "read_committed"
    assert ranges.group_id is None and ranges.lost == {}
    assert [(r.topic, r.partition) for r in ranges] == [(topic, 0), (topic, 1), (topic, 2)]
    assert OffsetRanges.from_json(ranges.to_json()) == ranges


def test_timestamp_interval_is_exactly_the_records_in_it(kafka_config, topic):
    subscription = Subscription.partitions([(topic, 0), (topic, 2)])
    # p2's open transaction (from offset 5, ts 5-6 min) began before the end: not complete.
    with pytest.raises(IntervalNotCompleteError, match=r"/2: last stable offset 5"):
        resolve_offsets(kafka_config, subscription, Timestamp(at(3)), Timestamp(at(7)))
    ranges = resolve_offsets(kafka_config, subscription, Timestamp(at(3)), Timestamp(at(7)),
                             on_open_transaction="truncate")
    got = {r.partition: (r.start, r.stop) for r in ranges}
    assert got == {0: (3, 7), 2: (3, 5)}  # p2 cut at its LSO, and the cut is recorded
    assert ranges.truncated == {(topic, 2): 5}
    records = consume_all(kafka_config, topic, 3, isolation_level="read_committed")
    for partition, (start, stop) in got.items():
        in_interval = {o for p, o, _, _, ts in records if p == partition and at(3) <= ts < at(7)}
        assert in_interval == set(range(start, stop))


def test_timestamps_outside_the_data(kafka_config, topic):
    before, after = Timestamp(at(-60)), Timestamp(at(60))
    subscription = Subscription.partitions([(topic, 0)])
    ranges = resolve_offsets(kafka_config, subscription, before, after)
    assert [(r.start, r.stop) for r in ranges] == [(0, 10)]
    empty = resolve_offsets(kafka_config, subscription, after, Timestamp(at(61)))
    assert [(r.start, r.stop) for r in empty] == [(10, 10)]
    assert empty.is_empty()
    # p2's open transaction may still commit records before either time.
    with pytest.raises(IntervalNotCompleteError):
        resolve_offsets(kafka_config, Subscription.partitions([(topic, 2)]), after,
                        Timestamp(at(61)))


def test_timestamp_lookup_matches_the_broker_and_sees_transaction_markers(
    kafka_config, kafka_admin, topic
):
    # Kafka's timestamp index includes control batches, whose timestamp is the commit time
    # (now): on p1 any T after the committed records lands on the commit marker at offset 4.
    for minute in (0, 2, 3.5, 5, 8, 9.5):
        tp = TopicPartition(topic, 1)
        broker = kafka_admin.list_offsets(
            {tp: OffsetSpec.for_timestamp(at(minute))},
            isolation_level=IsolationLevel.READ_COMMITTED,
        )[tp].result(30).offset
        got = resolve(kafka_config, topic, Timestamp(at(minute)), "latest")[1][0]
        assert got == (broker if broker >= 0 else 12)
    assert resolve(kafka_config, topic, Timestamp(at(3.5)), "latest")[1] == (4, 12)


def test_committed_needs_a_group_id(kafka_config, topic):
    with pytest.raises(OffsetSpecError, match="needs group_id"):
        resolve(kafka_config, topic, "committed", "latest")
    with pytest.raises(OffsetSpecError, match="needs group_id"):
        resolve(kafka_config, topic, SpecificOffsets({(topic, 0): 1}, default="committed"),
                "latest")


def test_committed_offsets_and_reset_strategies(kafka_config, topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    with pytest.raises(OffsetResolutionError, match="no committed offset for 3 partition") as err:
        resolve(kafka_config, topic, "committed", "latest", group_id=group)
    assert f"{topic}/0" in str(err.value) and "committed:earliest" in str(err.value)
    assert resolve(kafka_config, topic, "committed:earliest", "latest", group_id=group) == {
        0: (0, 10), 1: (0, 12), 2: (0, 5)}
    assert resolve(kafka_config, topic, "committed:latest", "latest", group_id=group) == {
        0: (10, 10), 1: (12, 12), 2: (5, 5)}

    first = resolve_offsets(kafka_config, Subscription.partitions([(topic, 0), (topic, 1)]),
                            "earliest", Timestamp(at(2)), group_id=group)
    assert commit_offsets(kafka_config, group, first).committed == {(topic, 0): 2, (topic, 1): 2}
    # Partition 2 was never committed: the reset strategy covers it, the others resume.
    assert resolve(kafka_config, topic, "committed:earliest", "latest", group_id=group) == {
        0: (2, 10), 1: (2, 12), 2: (0, 5)}
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "committed:earliest",
                             "latest", group_id=group)
    assert ranges.group_id == group
    commit_offsets(kafka_config, group, ranges.to_json())
    assert resolve(kafka_config, topic, "committed", "latest", group_id=group) == {
        0: (10, 10), 1: (12, 12), 2: (5, 5)}
    # Committed as the stopping spec too.
    assert resolve(kafka_config, topic, "earliest", "committed", group_id=group) == {
        0: (0, 10), 1: (0, 12), 2: (0, 5)}


def test_table_start_uses_the_recorded_stops_and_the_reset_for_the_others(kafka_config, topic):
    recorded = {(topic, 0): 4, (topic, 1): 9}
    assert resolve(kafka_config, topic, "table:earliest", "latest", table_offsets=recorded) == {
        0: (4, 10), 1: (9, 12), 2: (0, 5)}
    assert resolve(kafka_config, topic, "table:latest", "latest", table_offsets=recorded) == {
        0: (4, 10), 1: (9, 12), 2: (5, 5)}
    with pytest.raises(OffsetResolutionError, match=f"table records no stop .* 1 partition.*"
                                                    f"{topic}/2.*'table:earliest'"):
        resolve(kafka_config, topic, "table", "latest", table_offsets=recorded)
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "table:earliest",
                             "latest", table_offsets=recorded)
    assert ranges.starting == "table:earliest" and ranges.group_id is None
    # Explicit offsets may default to the table's stops.
    assert resolve(kafka_config, topic, SpecificOffsets({(topic, 2): 1}, default="table:earliest"),
                   "latest", table_offsets=recorded) == {0: (4, 10), 1: (9, 12), 2: (1, 5)}


def test_table_spec_misuse_is_refused_before_any_cluster_call() -> None:
    nowhere = {"bootstrap.servers": "127.0.0.1:1"}  # never contacted: the checks come first
    sub = Subscription.topics(["t"])
    with pytest.raises(OffsetSpecError, match="needs table_offsets"):
        resolve_offsets(nowhere, sub, "table", "latest")
    with pytest.raises(OffsetSpecError, match="starting spec only"):
        resolve_offsets(nowhere, sub, "earliest", "table", table_offsets={})
    with pytest.raises(ConfigurationError, match="table_offsets are given but the starting spec "
                                                 "is earliest"):
        resolve_offsets(nowhere, sub, "earliest", "latest", table_offsets={("t", 0): 1})
    with pytest.raises(ConfigurationError, match="table_offsets=.* is not valid"):
        resolve_offsets(nowhere, sub, "table", "latest", table_offsets={("t", "0"): 1})


def test_boundary_misuse_is_refused_before_any_cluster_call() -> None:
    # Never contacted: the checks come first.
    nowhere = KafkaConfig.of({"bootstrap.servers": "127.0.0.1:1"})
    admin = admin_client(nowhere)
    sub = Subscription.topics(["t"])
    request = OffsetRequest(sub, Earliest(), Latest())
    with pytest.raises(ConfigurationError, match="boundary_starts are given but that side's "
                                                 "spec is earliest"):
        resolve_request(nowhere, admin, request, boundaries=({("t", 0): 1}, None))
    with pytest.raises(ConfigurationError, match="boundary_stops are given but that side's "
                                                 "spec is latest"):
        resolve_request(nowhere, admin, request, boundaries=(None, {("t", 0): 1}))
    with pytest.raises(ConfigurationError, match="boundary_stops=.* is not valid"):
        resolve_request(nowhere, admin, OffsetRequest(sub, Earliest(), Timestamp(1700000000000)),
                        boundaries=(None, {("t", 0): -1}))


def test_commit_refused_while_the_group_has_active_members(kafka_config, topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment()
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 3),))
    try:
        with pytest.raises(CommitError, match="active member"):
            commit_offsets(kafka_config, group, ranges)
    finally:
        consumer.close()
    with pytest.raises(OffsetResolutionError):
        resolve(kafka_config, topic, "committed", "latest", group_id=group)


def test_explicit_offsets(kafka_config, topic):
    explicit = {topic: {"0": 3, "1": 5, "2": 1}}
    assert resolve(kafka_config, topic, explicit, "latest") == {0: (3, 10), 1: (5, 12), 2: (1, 5)}
    assert resolve(kafka_config, topic, f'{{"{topic}": {{"1": 6}}, "*": "latest"}}', "latest") == {
        0: (10, 10), 1: (6, 12), 2: (5, 5)}
    assert resolve(kafka_config, topic, "earliest", {topic: {"0": 10, "1": 0, "2": 5}}) == {
        0: (0, 10), 1: (0, 0), 2: (0, 5)}


@pytest.mark.parametrize(
    ("start", "stop", "kwargs", "message"),
    [
        ("earliest", {"T": {"0": 11, "1": 0, "2": 0}}, {},
         r"beyond the end of the log.*/0: 11.*Use offsets up to the end of the log"),
        # p2 offset 6 exists, but is not readable under read_committed (LSO 5).
        ({"T": {"0": 0, "1": 0, "2": 6}}, "latest", {},
         r"beyond.*/2: 6 > latest 5.*isolation_level='read_uncommitted'"),
        ({"T": {"0": 1}}, "latest", {}, r"do not list 2 subscribed partition"),
        ({"T": {"0": 1, "1": 1, "2": 1, "3": 0}}, "latest", {},
         r"not subscribed or do not exist: \[\('.*', 3\)\]\. List only partitions of the "
         r"subscription"),
        ({"T": {"0": 5, "1": 5, "2": 5}}, {"T": {"0": 4, "1": 5, "2": 5}}, {},
         r"after the stopping offsets for 1 partition.*/0 start 5 > stop 4"),
        ("latest", "earliest", {}, r"after the stopping offsets for 3 partition"),
        (Timestamp(at(5)), Timestamp(at(4)), {}, "starting time .* is after the stopping time"),
        ("earliest", "latest", {"isolation_level": "dirty"}, "isolation_level='dirty'"),
        ("earliest", "latest", {"on_data_loss": "ignore"}, "on_data_loss='ignore'"),
        ("soonest", "latest", {}, "unknown offset spec 'soonest'"),
    ],
)
def test_bad_input_is_a_clear_error(kafka_config, topic, start, stop, kwargs, message):
    def fill(spec: object) -> object:
        return {topic: spec["T"]} if isinstance(spec, dict) else spec

    with pytest.raises((ConfigurationError, OffsetResolutionError), match=message):
        resolve(kafka_config, topic, fill(start), fill(stop), **kwargs)


def test_unknown_topics_and_patterns(kafka_config, kafka_admin, topic):
    # An unknown topic among known ones: test_a_misspelled_topic_fails_after_the_propagation_wait.
    with pytest.raises(OffsetResolutionError, match="matches no topic"):
        resolve_offsets(kafka_config, Subscription.pattern(f"nothing-{uuid.uuid4().hex}.*"),
                        "earliest", "latest")
    with pytest.raises(OffsetResolutionError, match="unknown partition"):
        resolve_offsets(kafka_config, Subscription.partitions([(topic, 3)]), "earliest",
                        "latest")
    # Internal topics are never matched by a pattern.
    with pytest.raises(OffsetResolutionError, match="matches no topic"):
        resolve_offsets(kafka_config, Subscription.pattern("__consumer_offsets"), "earliest",
                        "latest")


def test_a_topic_created_a_moment_ago_is_waited_for(kafka_config):
    # create_topics returns once the controller recorded the topic; a broker's metadata shows
    # it a moment later (0.1-3 s on a 3-broker cluster). A client connected already that asks
    # at once is told, on a single broker too, that a topic of 20 partitions does not exist in
    # about half the cases (a new client's connecting hides the race). Entry points taking
    # named topics ask again meanwhile: 20 fresh topics, each resolved or listed at once by
    # the client that created it.
    config = KafkaConfig.of(kafka_config)
    admin = admin_client(config)  # what resolve_offsets and list_partitions build and use
    names = [f"fresh-{uuid.uuid4().hex[:10]}" for _ in range(20)]
    every = list(range(20))
    created: list[str] = []
    try:
        for i, name in enumerate(names):
            admin.create_topics([NewTopic(name, num_partitions=20)])[name].result(30)
            created.append(name)
            subscription = Subscription.topics([name])
            if i % 2:
                assert list_partitions(admin, subscription) == [(name, p) for p in every]
                continue
            ranges = resolve_request(config, admin,
                                     OffsetRequest(subscription, Earliest(), Latest()))
            assert [(r.topic, r.partition, r.start, r.stop) for r in ranges] == [
                (name, p, 0, 0) for p in every]
        # The sensors' checks (a client of their own each) and resolve_offsets find them too.
        subscription = Subscription.topics(names[:2])
        check = check_partitions(kafka_config, subscription, 40)
        assert check.done and check.payload == {"partitions": [
            [t, p] for t in sorted(names[:2]) for p in every]}, check
        check = check_interval_complete(kafka_config, subscription, at(0), None)
        assert check.waiting_for.startswith("40 of 40 partition(s) not complete up to "), check
        ranges = resolve_offsets(kafka_config, Subscription.topics(names), "earliest", "latest")
        assert len(ranges) == 400 and ranges.is_empty()
    finally:
        for future in admin.delete_topics(created).values():
            future.result(30)


def test_a_misspelled_topic_fails_after_the_propagation_wait(kafka_config, topic):
    misspelled = f"{topic}-typo"
    message = (rf"^unknown topic\(s\) \['{re.escape(misspelled)}'\]: they do not exist on the "
               rf"cluster \(looked up again for {TOPIC_PROPAGATION_S:g}s: a topic created a "
               r"moment ago shows within that\)\. Create them or fix the names \(topic "
               r"auto-creation is not used for reads\)\.$")
    started = time.monotonic()
    with pytest.raises(OffsetResolutionError, match=message):
        resolve_offsets(kafka_config, Subscription.topics([topic, misspelled]), "earliest",
                        "latest")
    assert time.monotonic() - started < TOPIC_PROPAGATION_S + 2
    # list_partitions, under the sensor's check: not yet, with the same message.
    started = time.monotonic()
    check = check_partitions(kafka_config, Subscription.topics([misspelled]), 1)
    assert not check.done and re.match(message, check.waiting_for), check
    assert time.monotonic() - started < TOPIC_PROPAGATION_S + 2
    # Within a shorter timeout, the wait ends in time for the last lookup's answer.
    started = time.monotonic()
    with pytest.raises(OffsetResolutionError, match=r"\(looked up again for 0\.[1-7]s: "):
        resolve_offsets(kafka_config, Subscription.topics([misspelled]), "earliest", "latest",
                        timeout=1)
    assert time.monotonic() - started < 1 + 0.5
    # A pattern matching nothing is an answer: no wait.
    started = time.monotonic()
    with pytest.raises(OffsetResolutionError, match="matches no topic"):
        resolve_offsets(kafka_config, Subscription.pattern(f"{misspelled}.*"), "earliest",
                        "latest")
    assert time.monotonic() - started < 2


def test_pattern_subscription(kafka_config, new_topic):
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    a = new_topic(partitions=2, prefix=prefix)
    b = new_topic(partitions=1, prefix=prefix)
    new_topic(partitions=1, prefix="other")
    ranges = resolve_offsets(kafka_config, Subscription.pattern(prefix + "-.*"), "earliest",
                             "latest")
    assert [(r.topic, r.partition) for r in ranges] == sorted([(a, 0), (a, 1), (b, 0)])


def test_deleted_records_are_data_loss(kafka_config, kafka_admin, new_topic):
    name = new_topic(partitions=2)
    produce(kafka_config, name, [(p, None, b"v", at(i)) for p in (0, 1) for i in range(10)])
    deleted = kafka_admin.delete_records([TopicPartition(name, 0, 4)])
    for future in deleted.values():
        future.result(30)
    subscription = Subscription.topics([name])

    # earliest moves with the log start offset: nothing is lost.
    ranges = resolve_offsets(kafka_config, subscription, "earliest", "latest")
    assert [(r.start, r.stop) for r in ranges] == [(4, 10), (0, 10)]
    assert ranges.lost == {}

    explicit = {name: {"0": 1, "1": 0}}
    with pytest.raises(DataLossError, match=rf"{name}/0: 3 offset\(s\)") as err:
        resolve_offsets(kafka_config, subscription, explicit, "latest")
    assert err.value.lost == {(name, 0): 3}

    skipped = resolve_offsets(kafka_config, subscription, explicit, "latest", on_data_loss="skip")
    assert [(r.start, r.stop) for r in skipped] == [(4, 10), (0, 10)]
    assert skipped.lost == {(name, 0): 3}
    assert OffsetRanges.from_json(skipped.to_json()).lost == {(name, 0): 3}

    # A range wholly below the log start loses all of it; an empty one loses nothing.
    with pytest.raises(DataLossError) as err:
        resolve_offsets(kafka_config, subscription, explicit, {name: {"0": 2, "1": 0}})
    assert err.value.lost == {(name, 0): 1}
    nothing = resolve_offsets(kafka_config, subscription, {name: {"0": 2, "1": 0}},
                              {name: {"0": 2, "1": 0}})
    assert nothing.lost == {} and nothing.is_empty()

    # A committed offset whose data was deleted is data loss too.
    group = f"g-{uuid.uuid4().hex[:8]}"
    commit_offsets(kafka_config, group, OffsetRanges((PartitionRange(name, 0, 0, 2),
                                                      PartitionRange(name, 1, 0, 2))))
    with pytest.raises(DataLossError) as err:
        resolve_offsets(kafka_config, subscription, "committed", "latest", group_id=group)
    assert err.value.lost == {(name, 0): 2}


def test_partitions_not_led_yet_are_asked_again_until_each_answers(kafka_config, new_topic):
    # The metadata shows every partition of a new topic led (new_topic waits for that) seconds
    # before its broker serves them all: until a partition's log is ready, the broker answers
    # NOT_LEADER_OR_FOLLOWER for it (1200 partitions: ~16s on a quiet 2-core machine).
    name = new_topic(partitions=1200)
    started = time.monotonic()
    with pytest.raises(OffsetResolutionError) as caught:
        resolve_offsets(kafka_config, Subscription.topics([name]), "earliest", "latest",
                        timeout=1)
    elapsed = time.monotonic() - started
    # Which error a second gives depends on the broker's pace (measured: the partitions not led
    # yet, named, or the leader query itself timed out under load); each says what to do.
    # tests/unit/test_offset_lookup_errors.py holds each message exactly.
    message = str(caught.value)
    assert message.startswith("listing the earliest offsets (read_committed): "), message
    assert ("their leaders are not settled yet" in message
            or "did not answer in time" in message), message
    assert "raise timeout=." in message, message
    assert elapsed < 1 + 3, elapsed
    # Within a timeout long enough, the resolution asks again until every partition answers.
    ranges = resolve_offsets(kafka_config, Subscription.topics([name]), "earliest", "latest",
                             timeout=120)
    assert len(ranges) == 1200 and ranges.is_empty()


def test_offset_requests_near_the_deadline_never_crash_the_process(kafka_config, new_topic):
    # librdkafka's ListOffsets given a request_timeout of a few milliseconds segfaults in its
    # leader lookup (a topic whose partitions are not served yet): the resolution's last try
    # before its deadline gave it what was left. A process of its own, so that a crash is this
    # test's failure, not the end of the run.
    name = new_topic(partitions=600)
    code = textwrap.dedent(f"""
        import itertools, time
        from confluent_kafka.admin import AdminClient
        from airflow_provider_kafka_spark.errors import OffsetResolutionError
        from airflow_provider_kafka_spark.offsets.cluster import list_offsets, reach_cluster
        admin = AdminClient({kafka_config!r})
        reach_cluster(admin, "the test's cluster", 10)
        calls, end = 0, time.monotonic() + 5
        for timeout in itertools.cycle((0.002, 0.005, 0.01, 0.02)):
            if time.monotonic() > end:
                break
            try:
                list_offsets(admin, [({name!r}, p) for p in range(600)], "earliest",
                             isolation_level="read_committed", timeout=timeout)
            except OffsetResolutionError:
                pass
            calls += 1
        print(calls)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert int(done.stdout.split()[-1]) > 0


def test_resolution_is_batched_for_many_partitions(kafka_config, new_topic, monkeypatch):
    name = new_topic(partitions=1200)
    # Right after creation most partitions are not served yet (the test above): resolution
    # retries just those, for as long as a loaded machine's broker needs.
    resolve_offsets(kafka_config, Subscription.topics([name]), "earliest", "latest", timeout=120)
    calls: list[int] = []
    original = AdminClient.list_offsets

    def counting(self, requests, **kwargs):
        calls.append(len(requests))
        return original(self, requests, **kwargs)

    monkeypatch.setattr(AdminClient, "list_offsets", counting)
    started = time.monotonic()
    ranges = resolve_offsets(kafka_config, Subscription.topics([name]), Timestamp(at(0)),
                             "latest")
    elapsed = time.monotonic() - started
    assert len(ranges) == 1200 and ranges.is_empty()
    # One request each for earliest, latest and the timestamp: never one per partition.
    assert sorted(calls) == [1200, 1200, 1200]
    print(f"resolved 1200 partitions in {elapsed:.2f}s")
