"""The network misbehaving between the package and its servers (issue 55), through a real TCP
fault proxy (``tests/support/network.py``): latency, connections reset in the middle of a
fetch, an upload or a PUT, a broker refused, a Schema Registry that resets. Each test states
its outcome first: the same records, records landed once, nothing published, the package's
error of the right class, retryable or not.

Every client of the package reaches the broker, the S3 server and the registry only through
the proxy; the tests arrange and check their data directly (``proxied_kafka.direct``, the S3
server's own endpoint, the registry's own URL)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_provider_kafka_spark.errors import (
    KafkaReadError,
    KafkaSparkError,
    OffsetResolutionError,
    SchemaRegistryError,
    SinkError,
    UnknownTopicError,
)
from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.offsets.cluster import CONNECT_TIMEOUT_S
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.sinks import FileSink, published_files
from airflow_provider_kafka_spark.sinks.files import objects
from airflow_provider_kafka_spark.spark import (
    decode_kafka,
    ingest,
    kafka_errors,
    read_kafka,
    write_kafka,
)
from airflow_provider_kafka_spark.spark.formats import Subject
from tests.support.faults import SLOW_FETCH, Background, fill, rows_of, slow_input
from tests.support.network import ProxiedKafka
from tests.support.topics import create_topic
from tools.fault_proxy import Proxy
from tools.kafka_records import consume_all, produce
from tools.s3_server import S3Endpoint
from tools.write_kafka_rows import expected_keys
from tools.write_kafka_rows import read_committed as committed

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.timeout(600)]

Record = tuple[int, int, bytes]
"""(partition, offset, value)."""


@pytest.fixture
def topic_of(proxied_kafka: ProxiedKafka) -> Iterator[Any]:
    """``topic_of(partitions, **config)``: a new topic on the proxied broker (made directly), deleted
    after the test."""
    admin = AdminClient(proxied_kafka.direct)
    created: list[str] = []

    def create(partitions: int, **config: str) -> str:
        name = f"n-{uuid.uuid4().hex[:10]}"
        created.append(name)
        return create_topic(admin, name, partitions, **config)

    yield create
    if created:
        for future in admin.delete_topics(created).values():
            future.result(timeout=30)


def expected_records(kafka: ProxiedKafka, topic: str, partitions: int) -> list[Record]:
    return [(p, o, v) for p, o, _, v, _ in consume_all(kafka.direct, topic, partitions,
                                                       "read_committed")]


def landed(spark: Any, files: list[str] | str) -> Counter[Record]:
    paths = [files] if isinstance(files, str) else files
    return Counter((r["partition"], r["offset"], bytes(r["value"]))
                   for r in spark.read.parquet(*paths).select("partition", "offset",
                                                               "value").collect())


# -- Kafka ------------------------------------------------------------------------------------

def test_200_ms_of_latency_to_the_broker_lands_the_same_records(
        spark: Any, proxied_kafka: ProxiedKafka, topic_of: Any, tmp_path: Path) -> None:
    """The same records, once each: a resolution and an ingest whose every packet to and from
    the broker is 200 ms late (another zone's round trip, twice over)."""
    topic = topic_of(3)
    fill(proxied_kafka.direct, topic, 3, 400)
    expected = Counter(expected_records(proxied_kafka, topic, 3))
    proxy = proxied_kafka.proxy
    proxy.add("latency", stream="downstream", latency=200)
    proxy.add("latency", stream="upstream", latency=200)
    started = time.monotonic()
    ranges = resolve_offsets(proxied_kafka.config, Subscription.topics([topic]), "earliest",
                             "latest")
    resolved = time.monotonic()
    out = tmp_path / "out"
    ingest(spark, ranges, proxied_kafka.config, FileSink(str(out)))
    print(f"with 200 ms each way: resolved in {resolved - started:.1f}s, ingested in "
          f"{time.monotonic() - resolved:.1f}s")
    assert ranges.total() == 1200
    assert landed(spark, str(out)) == expected


def test_a_reset_in_the_middle_of_a_bounded_read_returns_the_same_records_or_a_retryable_error(
        spark: Any, proxied_kafka: ProxiedKafka, topic_of: Any) -> None:
    """Exactly the resolved records, or a retryable ``KafkaReadError`` whose retry reads
    them: every connection to the broker is reset for a second while the readers fetch."""
    topic = topic_of(2)
    fill(proxied_kafka.direct, topic, 2, 3000)
    expected = expected_records(proxied_kafka, topic, 2)
    ranges = resolve_offsets(proxied_kafka.config, Subscription.topics([topic]), "earliest",
                             "latest")
    assert ranges.total() == len(expected) == 6000

    def read() -> list[Record]:
        return rows_of(read_kafka(spark, ranges, {**proxied_kafka.config, **SLOW_FETCH},
                                  max_records_per_split=10_000))

    reading = Background(read)
    time.sleep(3.0)
    assert reading.running(), "the read ended before the reset"
    with proxied_kafka.proxy.fault("reset_peer", stream="downstream", timeout=0):
        time.sleep(1.0)
    try:
        got = reading.result(timeout=300)
        print("the read survived the reset")
    except KafkaSparkError as exc:
        assert isinstance(exc, KafkaReadError) and exc.retryable, repr(exc)
        print(f"the read failed after the reset ({type(exc).__name__}: {exc}); retrying")
        got = read()
    assert got == expected


def test_a_broker_refused_during_resolution_fails_within_the_connect_wait_and_may_be_retried(
        proxied_kafka: ProxiedKafka, topic_of: Any) -> None:
    """A retryable ``OffsetResolutionError`` (not ``UnknownTopicError``) after the first
    answer's wait (``CONNECT_TIMEOUT_S``, 10 s, under a 30 s ``timeout``), naming the
    cluster; refused for 3 s and then back, the same resolution answers the exact ranges."""
    topic = topic_of(2)
    fill(proxied_kafka.direct, topic, 2, 10)
    subscription = Subscription.topics([topic])
    with proxied_kafka.proxy.refused():
        started = time.monotonic()
        with pytest.raises(OffsetResolutionError) as raised:
            resolve_offsets(proxied_kafka.config, subscription, "earliest", "latest",
                            timeout=30)
        took = time.monotonic() - started
    print(f"refused: the package's error after {took:.1f}s: {raised.value}")
    assert CONNECT_TIMEOUT_S - 1 <= took <= CONNECT_TIMEOUT_S + 8  # a busy 2-core machine
    assert not isinstance(raised.value, UnknownTopicError)
    assert raised.value.retryable
    assert proxied_kafka.config["bootstrap.servers"] in str(raised.value)

    proxied_kafka.proxy.disable()
    threading.Timer(3.0, proxied_kafka.proxy.enable).start()
    started = time.monotonic()
    ranges = resolve_offsets(proxied_kafka.config, subscription, "earliest", "latest",
                             timeout=30)
    print(f"refused for 3 s: resolved after {time.monotonic() - started:.1f}s")
    assert [(r.partition, r.start, r.stop) for r in ranges.ranges] == [(0, 0, 10), (1, 0, 10)]


def test_a_reset_in_the_middle_of_an_exactly_once_write_commits_each_task_whole_or_not_at_all(
        spark: Any, proxied_kafka: ProxiedKafka, topic_of: Any) -> None:
    """Each task's transaction committed whole or not at all (never a part of its rows), and
    after the write (or, when it failed with a retryable error of the package, its re-run with
    the same ``write_id``) every row exactly once: every connection to the broker is reset for
    a second while the tasks' transactions are open."""
    partitions, rows = 2, 1000
    topic = topic_of(partitions)
    ledger = topic_of(1, **{"cleanup.policy": "compact"})
    write_id, prefix = f"w-{uuid.uuid4().hex[:8]}", f"net-{uuid.uuid4().hex[:8]}"

    def write() -> Any:
        return write_kafka(slow_input(spark, partitions, rows), proxied_kafka.config,
                           topic=topic, transactional_id_prefix=prefix, write_id=write_id,
                           ledger_topic=ledger, transaction_timeout_ms=30_000)

    writing = Background(write)
    deadline = time.monotonic() + 120
    while not any(consume_all(proxied_kafka.direct, topic, partitions, "read_uncommitted")):
        if not writing.running():
            writing.result(timeout=0)  # its error, if it failed
        assert time.monotonic() < deadline, "no transaction opened"
        time.sleep(0.2)
    assert writing.running(), "the write ended before the reset"
    with proxied_kafka.proxy.fault("reset_peer", stream="downstream", timeout=0):
        time.sleep(1.0)
    try:
        result = writing.result(timeout=300)
        print(f"the write survived the reset: {result.records_written} records written")
    except KafkaSparkError as exc:
        assert exc.retryable, repr(exc)
        per_task = Counter(r.key.split(b"-")[0] for r in committed(proxied_kafka.direct, topic))
        print(f"the write failed after the reset ({type(exc).__name__}: {exc}); committed "
              f"per task: {dict(per_task)}; re-running it")
        assert set(per_task.values()) <= {rows}, per_task  # whole tasks or nothing
        write()
    assert Counter(r.key for r in committed(proxied_kafka.direct, topic)) == \
        expected_keys(partitions, rows)


# -- S3 ---------------------------------------------------------------------------------------

@pytest.fixture
def s3_topic(proxied_kafka: ProxiedKafka, topic_of: Any) -> tuple[str, list[Record]]:
    """3 partitions of 40 records, 2 KB values that do not compress (an object of about
    240 KB)."""
    name = topic_of(3)
    ms = int(time.time() * 1000) - 60_000
    records = [(p, i, os.urandom(1000).hex().encode()) for i in range(40) for p in range(3)]
    produce(proxied_kafka.direct, name, [(p, None, v, ms + i) for p, i, v in records])
    return name, records


def listing(endpoint: S3Endpoint, bucket: str, prefix: str) -> list[str]:
    pages = endpoint.boto3_client().get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{prefix}/")
    return sorted(o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", ())
                  if not o["Key"].endswith("/"))


def test_uploads_cut_mid_stream_fail_retryably_publish_nothing_and_the_retry_lands_once(
        spark: Any, proxied_kafka: ProxiedKafka, s3_topic: tuple[str, list[Record]],
        s3_endpoint: S3Endpoint, s3_bucket: str, s3_proxy: Proxy, proxied_s3: S3Settings) -> None:
    """A retryable error of the package, nothing published; once the network is whole, the
    same ingest (Airflow's retry) publishes every record once: each connection to S3 is cut
    after 64 KB sent, so every data upload breaks in the middle, on every attempt."""
    name, records = s3_topic
    ranges = resolve_offsets(proxied_kafka.config, Subscription.topics([name]), "earliest",
                             "latest")
    path = f"s3a://{s3_bucket}/hour"
    with s3_proxy.fault("limit_data", stream="upstream", bytes=64 * 1024):
        started = time.monotonic()
        with pytest.raises(KafkaSparkError) as raised:
            ingest(spark, ranges, proxied_kafka.config, FileSink(path, s3=proxied_s3))
        print(f"uploads cut: {type(raised.value).__name__} after "
              f"{time.monotonic() - started:.1f}s: {raised.value}")
    assert raised.value.retryable, repr(raised.value)
    assert published_files(path, proxied_s3) == []

    retry_lands_once(spark, ranges, proxied_kafka.config, path, proxied_s3, records,
                     s3_endpoint, s3_bucket)


def retry_lands_once(spark: Any, ranges: Any, config: dict[str, Any], path: str,
                     settings: S3Settings, records: list[Record], endpoint: S3Endpoint,
                     bucket: str) -> None:
    """The ingest again publishes every record once, and the folder holds only its objects
    and the manifest."""
    ingest(spark, ranges, config, FileSink(path, s3=settings))
    files = published_files(path, settings)
    assert landed(spark, files) == Counter(records)
    assert listing(endpoint, bucket, "hour") == sorted(
        [objects.MANIFEST_NAME, *(f.rsplit("/", 1)[1] for f in files)])


def test_the_manifest_put_reset_publishes_nothing_retryably_and_the_retry_lands_once(
        spark: Any, proxied_kafka: ProxiedKafka, s3_topic: tuple[str, list[Record]],
        s3_endpoint: S3Endpoint, s3_bucket: str, s3_proxy: Proxy, proxied_s3: S3Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``SinkError`` (retryable), and nothing is published; the retry publishes every record
    once: every connection to S3 is reset from the moment the objects were listed before the
    publish, so the manifest's conditional PUT (and each of the client's retries of it) meets a
    reset, and so does reading the manifest back: the message cannot say whether the store
    carried out a try (a reset may come after it did; ``tests/integration/test_s3_answers.py``
    has that case), and says so."""
    name, records = s3_topic
    ranges = resolve_offsets(proxied_kafka.config, Subscription.topics([name]), "earliest",
                             "latest")
    path = f"s3a://{s3_bucket}/hour"
    listed = objects.ObjectRun.listing

    def listing_then_reset(self: Any, **kwargs: Any) -> Any:
        found = listed(self, **kwargs)
        if kwargs.get("doing") == "list before publishing":
            s3_proxy.add("reset_peer", stream="upstream", name="at_the_put", timeout=0)
        return found

    monkeypatch.setattr(objects.ObjectRun, "listing", listing_then_reset)
    try:
        with pytest.raises(SinkError) as raised:
            ingest(spark, ranges, proxied_kafka.config, FileSink(path, s3=proxied_s3))
    finally:
        monkeypatch.undo()
        s3_proxy.clear()
    print(f"manifest PUT reset: {raised.value}")
    assert raised.value.retryable
    assert "publish the manifest" in str(raised.value)
    assert ("Whether it was published is unknown (the manifest could not be read back either); "
            "a retry publishes this slice again.") in str(raised.value)
    assert published_files(path, proxied_s3) == []

    retry_lands_once(spark, ranges, proxied_kafka.config, path, proxied_s3, records,
                     s3_endpoint, s3_bucket)


# -- Schema Registry --------------------------------------------------------------------------

def avro_topic(kafka: ProxiedKafka, topic_of: Any, registry_url: str,
               count: int) -> tuple[str, list[dict[str, Any]]]:
    """A topic of ``count`` Avro records in the registry's wire format, under a schema of its
    own (a new schema id: no reader has it cached)."""
    topic = topic_of(1)
    schema = {"type": "record", "name": f"R{uuid.uuid4().hex[:8]}",
              "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    rows = [{"id": i, "name": f"name-{i}"} for i in range(count)]
    ms = int(time.time() * 1000)
    produce(kafka.direct, topic, [(0, None, serialize(row, context), ms) for row in rows])
    return topic, rows


def decoded(spark: Any, kafka: ProxiedKafka, topic: str, registry: str, on_corrupt: str) -> Any:
    """The topic decoded with the registry at ``registry`` (the reader schema is looked up
    now, on the driver; the writer schemas by id when the records are read)."""
    ranges = resolve_offsets(kafka.config, Subscription.topics([topic]), "earliest", "latest")
    return decode_kafka(read_kafka(spark, ranges, kafka.config), value_format="avro",
                        value_schema=Subject(f"{topic}-value"),
                        schema_registry={"url": registry}, on_corrupt=on_corrupt)


def test_a_slow_registry_decodes_the_same_records(
        spark: Any, proxied_kafka: ProxiedKafka, topic_of: Any, schema_registry: dict[str, Any],
        registry_proxy: Proxy) -> None:
    """Every record decoded, the same values: the registry answers 500 ms late."""
    topic, rows = avro_topic(proxied_kafka, topic_of, schema_registry["url"], 50)
    with registry_proxy.fault("latency", latency=500):
        df = decoded(spark, proxied_kafka, topic, f"http://{registry_proxy.address}", "fail")
        got = sorted((r.value.asDict() for r in df.select("value").collect()),
                     key=lambda r: r["id"])
    assert got == rows


def test_a_registry_reset_during_decoding_is_a_schema_registry_error_never_a_corrupt_record(
        spark: Any, proxied_kafka: ProxiedKafka, topic_of: Any, schema_registry: dict[str, Any],
        registry_proxy: Proxy) -> None:
    """``SchemaRegistryError`` (retryable), with ``on_corrupt="skip"``: the records whose
    writer schema could not be fetched are not taken for undecodable and dropped. Every
    connection to the registry is reset once the reader schema was looked up."""
    topic, _ = avro_topic(proxied_kafka, topic_of, schema_registry["url"], 50)
    registry = f"http://{registry_proxy.address}"
    df = decoded(spark, proxied_kafka, topic, registry, "skip")
    with registry_proxy.fault("reset_peer", stream="upstream", timeout=0), \
            pytest.raises(SchemaRegistryError) as raised, kafka_errors():
        df.collect()
    print(f"registry reset: {raised.value}")
    assert raised.value.retryable
    assert f"Schema Registry at {registry} could not be reached" in str(raised.value)
