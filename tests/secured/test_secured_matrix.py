"""With the right credentials, every Kafka-facing part of the package works on each secured
listener of a real broker: SCRAM-SHA-512 and PLAIN over SASL_PLAINTEXT, mTLS (also with an
encrypted client key), and SCRAM over SASL_SSL: resolution, reads with both engines, the file
sink, an exactly-once write, commits, and both sensors' checks and deferred triggers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import Subscription, commit_offsets, resolve_offsets
from airflow_provider_kafka_spark.offsets.completeness import check_interval_complete, check_partitions
from airflow_provider_kafka_spark.sinks import FileSink
from airflow_provider_kafka_spark.triggers.kafka import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)
from tests.support.secured import first_event, records_of
from tools.kafka_records import produce, transactional_producer, wait_for_markers
from tools.local_broker import CLIENT_KEY_PASSWORD, PLAIN_USER, SecuredBroker

pytestmark = [pytest.mark.secured, pytest.mark.integration, pytest.mark.spark]


def config_of(secured: SecuredBroker, case: str) -> dict[str, Any]:
    if case == "sasl_plaintext-plain":
        return secured.client_config("sasl_plaintext", **{
            "sasl.mechanism": "PLAIN", "sasl.username": PLAIN_USER[0],
            "sasl.password": PLAIN_USER[1]})
    if case == "ssl-encrypted-key":
        return secured.client_config("ssl", **{
            "ssl.key.location": secured.tls_file("client-encrypted.key"),
            "ssl.key.password": CLIENT_KEY_PASSWORD})
    return secured.client_config(case)


@pytest.mark.parametrize("case", ["sasl_plaintext", "sasl_plaintext-plain", "ssl",
                                  "ssl-encrypted-key", "sasl_ssl"])
def test_resolve_read_write_commit_and_sensors(
        secured: SecuredBroker, secured_topic: Any, spark: Any, case: str,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from airflow_provider_kafka_spark.spark import read_kafka, write_kafka

    config = config_of(secured, case)
    topic, output = secured_topic(2), secured_topic(2)
    now = int(time.time() * 1000)
    produce(config, topic, [(p, f"k{i}".encode(), f"v{p}-{i}".encode(), now - 60_000 + i)
                            for p in range(2) for i in range(3)])
    producer = transactional_producer(config)  # one committed, one aborted transaction
    for commit in (True, False):
        producer.begin_transaction()
        produce(config, topic, [(0, b"t", b"committed" if commit else b"aborted", now - 1000)],
                producer)
        producer.flush(30)  # written before the abort (an abort drops unsent records)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    wait_for_markers(AdminFor(config), topic, 2)

    ranges = resolve_offsets(config, Subscription.topics([topic]), "earliest", "latest",
                             group_id=f"g-{topic}", timeout=20)
    assert [(r.partition, r.start, r.stop) for r in ranges] == [(0, 0, 7), (1, 0, 3)]

    expected = records_of(config, topic, 2)
    assert len(expected) == 7  # 6 plain + 1 committed (the aborted one is not read)
    for engine in ("python", "spark-kafka"):
        rows = read_kafka(spark, ranges, config, engine=engine).select(
            "partition", "offset", "key", "value").collect()
        assert sorted((r[0], r[1], bytes(r[2]), bytes(r[3])) for r in rows) == expected, engine

    sink = FileSink(str(tmp_path / "out"), format="json")  # the file ingest's sink
    frame = read_kafka(spark, ranges, config).select("partition", "offset")
    sink.prepare(spark, frame.limit(0))
    sink.write(frame)
    sink.commit({"topic": topic})
    files = spark.read.json(str(tmp_path / "out")).collect()  # columns come back sorted by name
    assert sorted((r["partition"], r["offset"]) for r in files) == [(p, o) for p, o, _, _ in expected]

    result = write_kafka(read_kafka(spark, ranges, config).select("key", "value"), config,
                         topic=output, transactional_id_prefix=f"tx-{topic}",
                         write_id=f"w-{topic}")
    assert sum(result.records_per_task.values()) == 7
    written = records_of(config, output, 2)
    assert sorted(v for _, _, _, v in written) == sorted(v for _, _, _, v in expected)

    committed = commit_offsets(config, f"g-{topic}", ranges, timeout=20)
    assert committed.committed == {(topic, 0): 7, (topic, 1): 3}
    again = resolve_offsets(config, Subscription.topics([topic]), "committed", "latest",
                            group_id=f"g-{topic}", timeout=20)
    assert [(r.start, r.stop) for r in again] == [(7, 7), (3, 3)]

    partitions = check_partitions(config, Subscription.topics([topic]), 2, timeout=20)
    assert partitions.done and partitions.payload == {"partitions": [[topic, 0], [topic, 1]]}
    complete = check_interval_complete(config, Subscription.topics([topic]), now - 59_999,
                                       None, timeout=20)
    assert complete.done, complete.waiting_for
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECURED", json.dumps(
        {"conn_type": "kafka", "extra": config}))
    deferred = [first_event(KafkaPartitionsTrigger(kafka_conn_id="kafka_secured", topics=topic,
                                                   min_partitions=2)).payload,
                first_event(KafkaIntervalCompleteTrigger(kafka_conn_id="kafka_secured",
                                                         topics=topic,
                                                         end_ms=now - 59_999)).payload]
    assert [event["status"] for event in deferred] == ["success", "success"], deferred


def AdminFor(config: dict[str, Any]) -> Any:  # noqa: N802 (reads as the client it builds)
    from confluent_kafka.admin import AdminClient

    return AdminClient(config)
