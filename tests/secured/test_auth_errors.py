"""Wrong credentials, an unknown mechanism, a wrong CA and a missing client certificate fail at
once with KafkaAuthenticationError naming the protocol, the mechanism and what to check (never
a secret), at resolution, in a Spark split, in the writer, in the sensors' checks and in their
deferred triggers (an error event); nothing is written or committed."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import (
    KafkaAuthenticationError,
    OffsetRanges,
    PartitionRange,
    Subscription,
    commit_offsets,
    resolve_offsets,
)
from airflow_provider_kafka_spark.offsets.completeness import check_interval_complete, check_partitions
from airflow_provider_kafka_spark.triggers.kafka import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)
from tests.support.secured import first_event, records_of
from tools.kafka_records import produce
from tools.local_broker import PLAIN_USER, SecuredBroker

pytestmark = [pytest.mark.secured, pytest.mark.integration]

TIMEOUT = 20.0  # the calls' own timeout; every failure below must come well before it
FAST = 8.0
SECRET = "MARKER-wrong-password-9f3"

# case: (listener, changes to its right config, what the message must say)
CASES: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "wrong password": ("sasl_plaintext", {"sasl.password": SECRET},
                       ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
                        "invalid credentials", "sasl.username and sasl.password"]),
    "unknown user": ("sasl_ssl", {"sasl.username": "mallory", "sasl.password": SECRET},
                     ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                      "sasl.username and sasl.password"]),
    "wrong PLAIN password": ("sasl_plaintext", {"sasl.mechanism": "PLAIN",
                                                "sasl.username": PLAIN_USER[0],
                                                "sasl.password": SECRET},
                             ["sasl.mechanism=PLAIN", "Invalid username or password"]),
    "mechanism not enabled": ("sasl_plaintext", {"sasl.mechanism": "SCRAM-SHA-256"},
                              ["sasl.mechanism=SCRAM-SHA-256", "Unsupported SASL mechanism",
                               "enables SCRAM-SHA-256"]),
    "wrong CA": ("sasl_ssl", {"ssl.ca.location": "other-ca.pem"},
                 ["security.protocol=SASL_SSL", "certificate verify failed", "ssl.ca.location"]),
    "no client certificate": ("ssl", {"ssl.certificate.location": None,
                                      "ssl.key.location": None},
                              ["security.protocol=SSL", "bad certificate",
                               "ssl.certificate.location and ssl.key.location"]),
}


def wrong(secured: SecuredBroker, case: str) -> dict[str, Any]:
    mode, changes, _ = CASES[case]
    changes = {k: secured.tls_file(v) if k == "ssl.ca.location" else v
               for k, v in changes.items()}
    return secured.client_config(mode, **changes)


def assert_refused(exc: pytest.ExceptionInfo[KafkaAuthenticationError], case: str,
                   began: float) -> None:
    elapsed = time.monotonic() - began
    assert elapsed < FAST, f"{case}: took {elapsed:.1f}s"
    message = str(exc.value)
    for part in CASES[case.split(":")[0]][2]:
        assert part in message, (part, message)
    assert SECRET not in message and "alice-secret" not in message


@pytest.mark.parametrize("case", list(CASES))
def test_resolution_commit_sensor_checks_and_triggers_refused_at_once(
        secured: SecuredBroker, secured_topic: Any, case: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    topic = secured_topic(1)
    config = wrong(secured, case)
    ranges = OffsetRanges([PartitionRange(topic, 0, 0, 0)], "read_committed")
    calls = {
        "resolve": lambda: resolve_offsets(config, Subscription.topics([topic]), "earliest",
                                           "latest", timeout=TIMEOUT),
        "commit": lambda: commit_offsets(config, f"g-{topic}", ranges, timeout=TIMEOUT),
        "partitions sensor": lambda: check_partitions(config, Subscription.topics([topic]), 1,
                                                      timeout=TIMEOUT),
        "interval sensor": lambda: check_interval_complete(
            config, Subscription.topics([topic]), 0, None, timeout=TIMEOUT),
    }
    for name, call in calls.items():
        began = time.monotonic()
        with pytest.raises(KafkaAuthenticationError) as exc:
            call()
        assert_refused(exc, f"{case}: {name}", began)
    for trigger in (KafkaPartitionsTrigger(kafka_conn_id="kafka_wrong", topics=topic),
                    KafkaIntervalCompleteTrigger(kafka_conn_id="kafka_wrong", topics=topic,
                                                 end_ms=1)):
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_WRONG", json.dumps(
            {"conn_type": "kafka", "extra": config}))
        began = time.monotonic()
        event = first_event(trigger, timeout=TIMEOUT + 10).payload
        assert event["status"] == "error", event
        assert time.monotonic() - began < FAST
        for part in CASES[case][2]:
            assert part in event["message"], (part, event["message"])
        assert SECRET not in event["message"]
    right = secured.client_config(CASES[case][0])
    assert resolve_offsets(right, Subscription.topics([topic]), "committed:earliest", "latest",
                           group_id=f"g-{topic}", timeout=TIMEOUT).total() == 0


@pytest.mark.spark
@pytest.mark.parametrize("case", ["wrong password", "wrong CA"])
def test_read_and_exactly_once_write_refused_before_anything_is_written(
        secured: SecuredBroker, secured_topic: Any, spark: Any, case: str) -> None:
    from airflow_provider_kafka_spark.spark import kafka_errors, read_kafka, write_kafka

    mode = CASES[case][0]
    right, config = secured.client_config(mode), wrong(secured, case)
    topic, output = secured_topic(1), secured_topic(1)
    produce(right, topic, [(0, b"k", b"v", int(time.time() * 1000))])
    ranges = resolve_offsets(right, Subscription.topics([topic]), "earliest", "latest")

    began = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as exc, kafka_errors():
        read_kafka(spark, ranges, config).collect()
    assert_refused(exc, case, began)

    rows = read_kafka(spark, ranges, right).select("key", "value")
    began = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as exc:
        write_kafka(rows, config, topic=output, transactional_id_prefix=f"tx-{topic}",
                    write_id=f"w-{topic}")
    assert_refused(exc, case, began)
    assert records_of(right, output, 1) == []


@pytest.mark.parametrize("case", ["wrong password", "no client certificate"])
def test_a_spark_split_raises_it_at_once(secured: SecuredBroker, secured_topic: Any,
                                         case: str) -> None:
    """The executors' reader (``read_split``, what each Spark task runs), on its own: a split
    whose consumer is refused fails at once, not after its poll timeout of no progress."""
    from airflow_provider_kafka_spark.spark.read.datasource import read_split

    mode = CASES[case][0]
    topic = secured_topic(1)
    produce(secured.client_config(mode), topic, [(0, b"k", b"v", int(time.time() * 1000))])
    began = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as exc:
        list(read_split(PartitionRange(topic, 0, 0, 1), wrong(secured, case), poll_timeout=60))
    assert_refused(exc, case, began)
