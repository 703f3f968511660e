"""The edges of exactness in the offset core, against a real broker: open transactions at an
interval's end, intervals older than retention, commits that would move a group backwards."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from airflow_provider_kafka_spark.errors import PinnedRequestChangedError
from airflow_provider_kafka_spark.offsets import (
    DataLossError,
    IntervalNotCompleteError,
    OffsetRanges,
    PartitionRange,
    Subscription,
    Timestamp,
    commit_offsets,
    resolve_offsets,
    timestamp_stops,
)
from airflow_provider_kafka_spark.offsets.cluster import ATTEMPT_S, retry_transient
from airflow_provider_kafka_spark.offsets.pins import (
    RunKey,
    pin_ranges,
    pinned_ranges,
)
from tools.kafka_records import MINUTE_MS, produce, transactional_producer, wait_for_markers

pytestmark = pytest.mark.integration

BASE = (int(time.time() * 1000) - 3 * 3600 * 1000) // MINUTE_MS * MINUTE_MS


def at(minute: float) -> int:
    return BASE + int(minute * MINUTE_MS)


def spans(ranges: OffsetRanges) -> dict[int, tuple[int, int]]:
    return {r.partition: (r.start, r.stop) for r in ranges}


def test_an_open_transaction_before_the_stop_is_not_complete(kafka_config, kafka_admin,
                                                             new_topic):
    """A record inside an open transaction may belong to the interval: never cut silently."""
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [(p, None, b"before", at(1)) for p in (0, 1)])
    tx = transactional_producer(kafka_config)
    tx.begin_transaction()
    # p0: the open transaction holds an in-interval record, then one past the end.
    produce(kafka_config, topic, [(0, None, b"in", at(2)), (0, None, b"after", at(6))], tx)
    assert tx.flush(30) == 0
    produce(kafka_config, topic, [(1, None, b"after", at(6))])
    subscription = Subscription.topics([topic])

    with pytest.raises(IntervalNotCompleteError) as err:
        resolve_offsets(kafka_config, subscription, Timestamp(at(0)), Timestamp(at(5)))
    message = str(err.value)
    assert f"{topic}/0" in message and "last stable offset 1" in message
    assert "first offset 1" in message and f"{topic}/1" not in message
    assert err.value.open_transactions == {(topic, 0): 1}

    # The sensor's view agrees: p0 is held back, p1 is final.
    stops = timestamp_stops(kafka_config, [(topic, 0), (topic, 1)], at(5))
    assert stops[(topic, 1)].offset == 1 and stops[(topic, 1)].final
    assert stops[(topic, 0)].open_transaction == 1 and not stops[(topic, 0)].final

    # Opting in to the truncation records it in the ranges (and survives JSON).
    cut = resolve_offsets(kafka_config, subscription, Timestamp(at(0)), Timestamp(at(5)),
                          on_open_transaction="truncate")
    assert spans(cut) == {0: (0, 1), 1: (0, 1)}
    assert cut.truncated == {(topic, 0): 1}
    assert OffsetRanges.from_json(cut.to_json()).truncated == {(topic, 0): 1}

    # An interval that ends before the transaction's first record is complete already.
    assert spans(resolve_offsets(kafka_config, subscription, Timestamp(at(0)),
                                 Timestamp(at(1)))) == {0: (0, 0), 1: (0, 0)}

    tx.commit_transaction(30)
    wait_for_markers(kafka_admin, topic, 2)
    # Committed: the in-interval record is read by this interval, the later one is not.
    assert spans(resolve_offsets(kafka_config, subscription, Timestamp(at(0)),
                                 Timestamp(at(5)))) == {0: (0, 2), 1: (0, 1)}


def test_an_open_transaction_whose_first_record_is_past_the_stop_is_complete(
        kafka_config, new_topic):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"in", at(1))])
    tx = transactional_producer(kafka_config)
    tx.begin_transaction()
    produce(kafka_config, topic, [(0, None, b"after", at(6))], tx)
    assert tx.flush(30) == 0
    try:
        ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), Timestamp(at(0)),
                                 Timestamp(at(5)))
        assert spans(ranges) == {0: (0, 1)} and ranges.truncated == {}
        assert timestamp_stops(kafka_config, [(topic, 0)], at(5))[(topic, 0)].final
    finally:
        tx.abort_transaction(30)


def test_an_interval_before_the_oldest_retained_record_is_data_loss(
        kafka_config, kafka_admin, new_topic):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [(p, None, b"v", at(i)) for p in (0, 1) for i in range(10)])
    for future in kafka_admin.delete_records([TopicPartition(topic, 0, 4)]).values():
        future.result(30)
    subscription = Subscription.topics([topic])

    # Minute 2's records of p0 were deleted: the interval's data may be gone.
    with pytest.raises(DataLossError, match=f"{topic}/0") as err:
        resolve_offsets(kafka_config, subscription, Timestamp(at(2)), Timestamp(at(3)))
    assert err.value.lost == {(topic, 0): 4}
    # An interval after the oldest retained record's timestamp lost nothing.
    assert spans(resolve_offsets(kafka_config, subscription, Timestamp(at(5)),
                                 Timestamp(at(7)))) == {0: (5, 7), 1: (5, 7)}
    skipped = resolve_offsets(kafka_config, subscription, Timestamp(at(2)), Timestamp(at(3)),
                              on_data_loss="skip")
    assert spans(skipped) == {0: (4, 4), 1: (2, 3)}
    assert skipped.lost == {(topic, 0): 4}

    # Everything deleted: nothing is left to tell when the deleted records were written.
    for future in kafka_admin.delete_records([TopicPartition(topic, 1, 10)]).values():
        future.result(30)
    with pytest.raises(DataLossError) as err:
        resolve_offsets(kafka_config, Subscription.partitions([(topic, 1)]),
                        Timestamp(at(20)), Timestamp(at(21)))
    assert err.value.lost == {(topic, 1): 10}


def test_commits_never_move_a_group_backwards(kafka_config, new_topic, caplog):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [(p, None, b"v", at(i)) for p in (0, 1) for i in range(6)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = OffsetRanges((PartitionRange(topic, 0, 0, 2), PartitionRange(topic, 1, 0, 2)))
    second = OffsetRanges((PartitionRange(topic, 0, 2, 5), PartitionRange(topic, 1, 2, 2)))

    assert commit_offsets(kafka_config, group, first).committed == {(topic, 0): 2, (topic, 1): 2}
    result = commit_offsets(kafka_config, group, second)
    assert result.committed == {(topic, 0): 5}
    assert result.unchanged == {(topic, 1): 2}

    # Re-running the first run's commit is a no-op that reports, not a rewind.
    again = commit_offsets(kafka_config, group, first)
    assert again.committed == {} and again.unchanged == {(topic, 0): 5, (topic, 1): 2}
    assert spans(resolve_offsets(kafka_config, Subscription.topics([topic]), "committed",
                                 "latest", group_id=group)) == {0: (5, 6), 1: (2, 6)}

    with caplog.at_level("WARNING"):
        rewound = commit_offsets(kafka_config, group, first, allow_rewind=True)
    assert rewound.committed == {(topic, 0): 2} and rewound.unchanged == {(topic, 1): 2}
    assert f"{topic}/0 from 5 back to 2" in caplog.text
    assert spans(resolve_offsets(kafka_config, Subscription.topics([topic]), "committed",
                                 "latest", group_id=group)) == {0: (2, 6), 1: (2, 6)}


def test_transient_coordinator_errors_are_retried_within_the_deadline():
    answers = [KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
               KafkaError.COORDINATOR_NOT_AVAILABLE, None]
    calls: list[int] = []

    def call(timeout: float) -> str:
        calls.append(1)
        code = answers[len(calls) - 1]
        if code is not None:
            raise KafkaException(KafkaError(code))
        return "done"

    assert retry_transient(call, "test", deadline=time.monotonic() + 10) == "done"
    assert len(calls) == 4

    def always(timeout: float) -> str:
        raise KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))

    with pytest.raises(KafkaException):
        retry_transient(always, "test", deadline=time.monotonic() + 0.5)

    def broken(timeout: float) -> str:
        raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    started = time.monotonic()
    with pytest.raises(KafkaException):
        retry_transient(broken, "test", deadline=time.monotonic() + 10)
    assert time.monotonic() - started < 1


def test_a_request_to_a_dead_broker_is_sent_again_in_bounded_attempts():
    """A broker that died still coordinates its groups (and answers nothing) until the cluster
    notices: each attempt gets at most ATTEMPT_S seconds, and silence is retried."""
    attempts: list[float] = []

    def call(timeout: float) -> str:
        attempts.append(timeout)
        if len(attempts) == 1:
            raise TimeoutError  # a future that did not complete
        if len(attempts) == 2:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return "done"

    assert retry_transient(call, "test", deadline=time.monotonic() + 60) == "done"
    assert len(attempts) == 3 and max(attempts) <= ATTEMPT_S


def test_pins_are_kept_per_run_and_the_newest_wins(kafka_config):
    prefix = uuid.uuid4().hex[:8]
    first = RunKey(f"{prefix}/a", "b", "run")
    other = RunKey(prefix, "a/b", "run")  # the same text joined with '/': another run
    mapped = RunKey(f"{prefix}/a", "b", "run", map_index=0)
    request = {"subscription": "topics:t", "start": "latest", "stop": "latest"}
    assert pinned_ranges(kafka_config, first, request) is None
    ranges = OffsetRanges((PartitionRange("t", 0, 1, 5),), starting="latest", stopping="latest")
    pin_ranges(kafka_config, first, ranges, request)
    assert pinned_ranges(kafka_config, first, request) == ranges
    assert pinned_ranges(kafka_config, other, request) is None
    assert pinned_ranges(kafka_config, mapped, request) is None
    newer = OffsetRanges((PartitionRange("t", 0, 5, 9),))
    pin_ranges(kafka_config, first, newer, request)
    assert pinned_ranges(kafka_config, first, request) == newer


def test_a_pin_answers_only_its_own_request(kafka_config):
    run = RunKey(uuid.uuid4().hex[:8], "resolve", "backfill__2026-11-21T00:00:00+00:00")
    request = {"subscription": "topics:orders", "start": "earliest", "stop": "latest",
               "group_id": None}
    ranges = OffsetRanges((PartitionRange("orders", 0, 0, 7),))
    pin_ranges(kafka_config, run, ranges, request)

    with pytest.raises(PinnedRequestChangedError) as raised:
        pinned_ranges(kafka_config, run, {**request, "subscription": "topics:refunds"})
    assert "subscription 'topics:orders' -> 'topics:refunds'" in str(raised.value)
    assert "re_resolve" in str(raised.value)
    with pytest.raises(PinnedRequestChangedError, match="group_id None -> 'g'"):
        pinned_ranges(kafka_config, run, {**request, "group_id": "g"})
    assert pinned_ranges(kafka_config, run, dict(request)) == ranges
