"""What S3 answers, not only whether the connection holds (issue 55): ``503 SlowDown`` to the
readers' uploads, to Spark's empty write and to the manifest PUT; a reset of the empty write;
the manifest PUT carried out by the store whose answer is lost (reset, or held past the
client's timeout), so that the client's retry of the conditional PUT meets the manifest it
wrote itself. Through an HTTP fault proxy in front of the session's S3 server
(``tests/support/s3_faults.py``); Toxiproxy's TCP faults are ``tests/faults/network``'s.

Each test states its outcome first: the records landed once, or nothing published and the
package's error of the right class, retryable or not."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_kafka_spark import s3
from airflow_provider_kafka_spark.errors import KafkaSparkError, SinkError
from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.sinks import FileSink, published_files
from airflow_provider_kafka_spark.sinks.files import objects
from airflow_provider_kafka_spark.spark import ingest
from tests.support.s3_faults import Fault, Request, S3FaultProxy, s3_fault_proxy
from tools.kafka_records import produce
from tools.s3_server import S3Endpoint

pytestmark = [pytest.mark.integration, pytest.mark.spark]

Record = tuple[int, bytes]
"""(partition, value)."""


@pytest.fixture
def faulty(s3_endpoint: S3Endpoint) -> Iterator[S3FaultProxy]:
    with s3_fault_proxy(s3_endpoint.url) as proxy:
        yield proxy


def through(proxy: S3FaultProxy, endpoint: S3Endpoint) -> S3Settings:
    return S3Settings(endpoint_url=proxy.url, region=endpoint.region,
                      access_key=endpoint.access_key, secret_key=endpoint.secret_key,
                      path_style=True, ssl=False)


@pytest.fixture
def hour(new_topic: Any, kafka_config: dict[str, Any]) -> tuple[Any, list[Record]]:
    """3 partitions of 60 records: (their offset ranges, the records)."""
    topic = new_topic(partitions=3)
    ms = int(time.time() * 1000) - 60_000
    records = [(i % 3, f"v{i}".encode()) for i in range(180)]
    produce(kafka_config, topic, [(p, None, v, ms + i) for i, (p, v) in enumerate(records)])
    return resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest",
                           "latest"), records


def manifest_put(request: Request) -> bool:
    return request.method == "PUT" and request.path.split("?")[0].endswith(objects.MANIFEST_NAME)


def listing(endpoint: S3Endpoint, bucket: str, prefix: str) -> list[str]:
    pages = endpoint.boto3_client().get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{prefix}/")
    return sorted(o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", ())
                  if not o["Key"].endswith("/"))


def landed_once(spark: Any, path: str, settings: S3Settings, records: list[Record],
                endpoint: S3Endpoint, bucket: str) -> None:
    """Every record published once, and the folder holds only the run's objects and its
    manifest."""
    files = published_files(path, settings)
    assert Counter((r["partition"], bytes(r["value"])) for r in spark.read.parquet(*files)
                   .select("partition", "value").collect()) == Counter(records)
    assert listing(endpoint, bucket, path.split("/", 3)[3]) == sorted(
        [objects.MANIFEST_NAME, *(f.rsplit("/", 1)[1] for f in files)])


@pytest.mark.parametrize("lost", ["reset", "held past the client's timeout"])
def test_a_manifest_put_the_store_did_whose_answer_is_lost_publishes_the_run_once(
        spark: Any, kafka_config: dict[str, Any], hour: tuple[Any, list[Record]],
        faulty: S3FaultProxy, s3_endpoint: S3Endpoint, s3_bucket: str, lost: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingest succeeds and every record is published once: the store wrote the manifest
    but its answer never came (the connection reset after holding it 1 s, or held 4 s while
    the driver's client waits 2 s per try), so the client's retry of the conditional PUT is
    refused (``412``: a manifest is there); the manifest there is this attempt's own."""
    ranges, records = hour
    if lost != "reset":
        monkeypatch.setattr(s3, "READ_TIMEOUT_S", 2.0)
        monkeypatch.setattr(s3, "_CLIENTS", {})  # the driver's clients, made again with it
    settings = through(faulty, s3_endpoint)
    path = f"s3a://{s3_bucket}/hour"
    answer = faulty.add(Fault(manifest_put, "lose_answer", times=1,
                              hold_s=1.0 if lost == "reset" else 4.0))
    ingest(spark, ranges, kafka_config, FileSink(path, s3=settings))
    assert len(answer.hits) == 1
    assert sum(manifest_put(r) for r in faulty.forwarded) == 2  # the lost one and the retry
    landed_once(spark, path, settings, records, s3_endpoint, s3_bucket)


def data_upload(request: Request) -> bool:
    """A PUT of the readers' data (a whole object or a part), not a folder marker, the
    manifest, the store check's probe, Spark's empty write or its copy into the folder."""
    path = request.path.split("?")[0]
    return (request.method == "PUT" and not path.endswith(("/", objects.MANIFEST_NAME))
            and objects.SCRATCH_MARK not in path and objects.PROBE_MARK not in path
            and "x-amz-copy-source" not in request.headers)


def store_check(request: Request) -> bool:
    """The probe PUT of the store check before anything is read."""
    return request.method == "PUT" and objects.PROBE_MARK in request.path


def empty_write(request: Request) -> bool:
    """A request of Spark's empty write (S3A, into the attempt's scratch folder)."""
    return request.method == "PUT" and objects.SCRATCH_MARK in request.path


FAULTS = {
    "slow down to the store check": (store_check, "slow_down"),
    "slow down to every upload": (data_upload, "slow_down"),
    "slow down to the empty write": (empty_write, "slow_down"),
    "resets of the empty write": (empty_write, "reset"),
    "slow down to the manifest PUT": (manifest_put, "slow_down"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_store_that_keeps_failing_a_step_fails_retryably_publishes_nothing_and_the_retry_lands_once(
        spark: Any, kafka_config: dict[str, Any], hour: tuple[Any, list[Record]],
        faulty: S3FaultProxy, s3_endpoint: S3Endpoint, s3_bucket: str, fault: str) -> None:
    """``SinkError`` (retryable, never ``ConfigurationError``) naming the store's answer, and
    nothing published, while every try of one step meets the fault (the clients' own retries
    included); once the store answers, the same ingest (Airflow's retry) lands every record
    once."""
    ranges, records = hour
    settings = through(faulty, s3_endpoint)
    path = f"s3a://{s3_bucket}/hour"
    matches, action = FAULTS[fault]
    # S3A retries throttling 20 times and its SDK each try again: a few here (per bucket).
    spark.conf.set(f"fs.s3a.bucket.{s3_bucket}.retry.throttle.limit", "2")
    spark.conf.set(f"fs.s3a.bucket.{s3_bucket}.retry.limit", "2")
    spark.conf.set(f"fs.s3a.bucket.{s3_bucket}.attempts.maximum", "2")
    try:
        acted = faulty.add(Fault(matches, action))
        started = time.monotonic()
        with pytest.raises(KafkaSparkError) as raised:
            ingest(spark, ranges, kafka_config, FileSink(path, s3=settings))
        print(f"{fault}: {type(raised.value).__name__} after "
              f"{time.monotonic() - started:.1f}s, {len(acted.hits)} request(s) met it: "
              f"{raised.value}")
        assert isinstance(raised.value, SinkError) and raised.value.retryable, repr(raised.value)
        if action == "slow_down":
            assert "SlowDown" in str(raised.value) or "503" in str(raised.value), raised.value
        assert acted.hits
        assert published_files(path, settings) == []
        faulty.clear()
        ingest(spark, ranges, kafka_config, FileSink(path, s3=settings))
        landed_once(spark, path, settings, records, s3_endpoint, s3_bucket)
    finally:
        for option in ("retry.throttle.limit", "retry.limit", "attempts.maximum"):
            spark.conf.unset(f"fs.s3a.bucket.{s3_bucket}.{option}")


def test_a_store_that_throttles_a_few_requests_lands_the_run_once(
        spark: Any, kafka_config: dict[str, Any], hour: tuple[Any, list[Record]],
        faulty: S3FaultProxy, s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    """Every record published once, no error: the first two tries of the uploads and of the
    manifest PUT answered ``503 SlowDown`` (the clients retry them)."""
    ranges, records = hour
    settings = through(faulty, s3_endpoint)
    path = f"s3a://{s3_bucket}/hour"
    uploads = faulty.add(Fault(data_upload, "slow_down", times=2))
    manifest = faulty.add(Fault(manifest_put, "slow_down", times=2))
    ingest(spark, ranges, kafka_config, FileSink(path, s3=settings))
    assert len(uploads.hits) == 2 and len(manifest.hits) == 2
    landed_once(spark, path, settings, records, s3_endpoint, s3_bucket)
