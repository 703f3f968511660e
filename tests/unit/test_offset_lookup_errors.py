"""The error an offset lookup raises when its deadline passes, by what the pending partitions
last answered (``OffsetLookup._unsettled``), with librdkafka's own error objects: the
integration test of a topic created a moment ago meets either, by the broker's pace."""

from __future__ import annotations

from confluent_kafka import KafkaError

from airflow_provider_kafka_spark.errors import OffsetResolutionError
from airflow_provider_kafka_spark.offsets.cluster import OffsetLookup

CLUSTER = "bootstrap.servers='127.0.0.1:9092'"
WHAT = "listing the earliest offsets (read_committed)"


def lookup(partitions: int) -> OffsetLookup:
    return OffsetLookup(None, CLUSTER, [("t", p) for p in range(partitions)],  # type: ignore[arg-type]
                        "read_committed", 0.0)


def test_partitions_that_answered_a_leader_error_are_counted_named_and_their_errors_listed():
    pending = [("t", p) for p in range(25)]
    errors = {key: KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION if key[1] % 2
                              else KafkaError.UNKNOWN_LEADER_EPOCH) for key in pending}
    error = lookup(1200)._unsettled(WHAT, pending, errors, errors[("t", 0)])
    assert isinstance(error, OffsetResolutionError) and error.retryable
    named = ", ".join(f"t/{p}" for p in range(20))
    assert str(error) == (
        f"{WHAT}: 25 of 1200 partition(s) still answered Broker: Leader epoch is newer than "
        f"broker epoch / Broker: Not leader for partition when the timeout ran out ({named}, "
        f"...) at the Kafka cluster at {CLUSTER}: their leaders are not settled yet (a topic "
        "created a moment ago, or a leader that moved). Retry, or raise timeout=.")


def test_partitions_without_any_answer_say_how_to_reach_the_cluster():
    pending = [("t", 0), ("t", 1)]
    timed_out = KafkaError(KafkaError._TIMED_OUT, "Failed to query partition leaders: "
                           "Local: Timed out")
    for errors in ({}, {key: timed_out for key in pending}):
        error = lookup(2)._unsettled(WHAT, pending, errors, timed_out)
        assert isinstance(error, OffsetResolutionError) and error.retryable
        assert str(error).startswith(
            f"{WHAT}: the Kafka cluster at {CLUSTER} did not answer in time (Failed to query "
            "partition leaders: Local: Timed out). Check that bootstrap.servers is right"), error
