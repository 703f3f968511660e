"""The file sink on a real S3 server (versitygw, ``s3_endpoint``): the README's example as
written, a run published by one conditional PUT of its manifest (no renames), re-runs that
rewrite the same keys, a failed re-run that leaves the previous run as it was, two writers of
one folder (one publishes, the other fails, nothing mixed), unfinished uploads, and the store's
errors before anything is read."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError
from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.s3 import ObjectUpload, S3Settings
from airflow_provider_kafka_spark.sinks import (
    MANIFEST_NAME,
    FileSink,
    PublishConflictError,
    published_files,
)
from airflow_provider_kafka_spark.spark import ingest
from airflow_provider_kafka_spark.spark.read.splits import Split
from tools.kafka_records import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def settings_of(endpoint: Any, *, secret: str | None = None) -> S3Settings:
    return S3Settings(endpoint_url=endpoint.url, region=endpoint.region,
                      access_key=endpoint.access_key,
                      secret_key=secret or endpoint.secret_key, path_style=True)


def keys(endpoint: Any, bucket: str, prefix: str = "") -> list[str]:
    """The objects under ``prefix``, but S3A's directory markers (``folder/``, no data)."""
    client = endpoint.boto3_client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", ())
                  if not o["Key"].endswith("/"))


def manifest(endpoint: Any, bucket: str, prefix: str) -> dict[str, Any]:
    body = endpoint.boto3_client().get_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST_NAME}")
    return json.loads(body["Body"].read())


@pytest.fixture
def hour(new_topic: Any, kafka_config: dict[str, Any]) -> tuple[str, list[tuple[int, bytes]]]:
    """A topic of 3 partitions holding 300 records (recent timestamps): (topic, records as
    (partition, value))."""
    topic = new_topic(partitions=3)
    ms = int(time.time() * 1000) - 60_000
    records = [(i % 3, f"v{i}".encode()) for i in range(300)]
    produce(kafka_config, topic, [(p, f"k{i}".encode(), v, ms + i)
                                  for i, (p, v) in enumerate(records)])
    return topic, records


def ranges_of(kafka_config: dict[str, Any], topic: str) -> Any:
    return resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")


def values(spark: Any, files: list[str]) -> Counter[tuple[int, bytes]]:
    return Counter((r["partition"], bytes(r["value"]))
                   for r in spark.read.parquet(*files).select("partition", "value").collect())


def test_the_readme_example_on_s3_publishes_by_manifest_and_reruns_the_same_keys(
        spark: Any, kafka_config: dict[str, Any], s3_endpoint: Any, s3_bucket: str,
        hour: tuple[str, list[tuple[int, bytes]]], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    topic, records = hour
    path = f"s3a://{s3_bucket}/orders/{topic}/2026-11-28T09"
    ranges = ranges_of(kafka_config, topic)

    result = ingest(spark, ranges, kafka_config, FileSink(path))  # the README's call

    assert result.records == 300
    prefix = f"orders/{topic}/2026-11-28T09"
    published = manifest(s3_endpoint, s3_bucket, prefix)
    # The readers' objects, one per split, named by the split: here one split of the three
    # ranges (its first range's topic, partition, start, stop, how many ranges, a digest).
    assert published["files"] == [f"part-{Split(ranges.ranges).name()}.snappy.parquet"]
    assert published["files"][0].startswith(f"part-{topic}-0-0-100-n3-")
    assert published["ranges"] == ranges.to_dict()
    assert keys(s3_endpoint, s3_bucket, prefix) == sorted(
        [f"{prefix}/{MANIFEST_NAME}"] + [f"{prefix}/{f}" for f in published["files"]])
    files = published_files(path, settings_of(s3_endpoint))
    assert values(spark, files) == Counter(records)
    assert values(spark, [path]) == Counter(records)  # the folder holds that run alone

    # A re-run of the pinned slice rewrites the same keys and publishes over the first run.
    again = ingest(spark, ranges, kafka_config, FileSink(path, s3=settings_of(s3_endpoint)))
    assert again.records == 300
    # The secret is in no result, manifest or log line.
    body = json.dumps(manifest(s3_endpoint, s3_bucket, prefix))
    for text in (json.dumps(again.to_dict()), body, caplog.text):
        assert s3_endpoint.secret_key not in text
    assert manifest(s3_endpoint, s3_bucket, prefix)["files"] == published["files"]
    assert keys(s3_endpoint, s3_bucket, prefix) == sorted(
        [f"{prefix}/{MANIFEST_NAME}"] + [f"{prefix}/{f}" for f in published["files"]])
    # pyarrow reads the same run through the manifest's file list.
    import pyarrow.parquet as pq

    table = pq.read_table([f.split("://", 1)[1] for f in files],
                          filesystem=settings_of(s3_endpoint).filesystem())
    assert table.num_rows == 300


def test_a_transform_on_s3_is_written_by_spark_and_replaces_the_previous_run(
        spark: Any, kafka_config: dict[str, Any], s3_endpoint: Any, s3_bucket: str,
        hour: tuple[str, list[tuple[int, bytes]]]) -> None:
    topic, records = hour
    path = f"s3a://{s3_bucket}/orders/hour"
    ranges = ranges_of(kafka_config, topic)
    sql = "SELECT `partition`, value FROM kafka"
    ingest(spark, ranges, kafka_config, FileSink(path), sql=sql)
    first = manifest(s3_endpoint, s3_bucket, "orders/hour")["files"]
    assert first and all(f.startswith("part-") for f in first)

    ingest(spark, ranges, kafka_config, FileSink(path),
           sql=sql + " WHERE `partition` = 0")
    second = manifest(s3_endpoint, s3_bucket, "orders/hour")["files"]
    assert not set(first) & set(second)  # Spark names its files anew
    assert values(spark, published_files(path, settings_of(s3_endpoint))) == Counter(
        r for r in records if r[0] == 0)
    # The first run's objects are gone: the folder is the second run (plus Spark's _SUCCESS).
    assert [k for k in keys(s3_endpoint, s3_bucket, "orders/hour/")
            if not k.endswith(("/_SUCCESS", MANIFEST_NAME))] == [
        f"orders/hour/{f}" for f in second]


def test_a_failed_rerun_leaves_the_published_run_as_it_was(
        spark: Any, kafka_config: dict[str, Any], s3_endpoint: Any, s3_bucket: str,
        hour: tuple[str, list[tuple[int, bytes]]]) -> None:
    topic, records = hour
    path = f"s3a://{s3_bucket}/out"
    ranges = ranges_of(kafka_config, topic)
    ingest(spark, ranges, kafka_config, FileSink(path))
    before = keys(s3_endpoint, s3_bucket, "out/")
    body = manifest(s3_endpoint, s3_bucket, "out")

    def failing(df: Any) -> Any:
        from pyspark.sql import functions as F

        return df.select(F.when(F.col("offset") < 50, F.col("value"))
                         .otherwise(F.raise_error(F.lit("offset 50 fails"))).alias("value"))

    with pytest.raises(Exception, match="offset 50 fails"):
        ingest(spark, ranges, kafka_config, FileSink(path), transform=failing)
    assert manifest(s3_endpoint, s3_bucket, "out") == body
    assert keys(s3_endpoint, s3_bucket, "out/") == before  # its objects were deleted
    assert values(spark, published_files(path, settings_of(s3_endpoint))) == Counter(records)


def test_two_writers_of_one_folder_one_publishes_the_other_fails_nothing_mixed(
        spark: Any, s3_endpoint: Any, s3_bucket: str) -> None:
    path = f"s3a://{s3_bucket}/race"
    first, second = FileSink(path, format="json"), FileSink(path, format="json")
    a = spark.createDataFrame([(f"a{i}",) for i in range(30)], "v string")
    b = spark.createDataFrame([(f"b{i}",) for i in range(90)], "v string")
    first.prepare(spark, a.limit(0))
    second.prepare(spark, b.limit(0))
    first.write(a)
    second.write(b)
    first.commit({"run": "a"})  # its cleanup deletes the second's (older, unlisted) objects
    with pytest.raises(PublishConflictError, match="another run published"):
        second.commit({"run": "b"})
    second.abort()
    listed = manifest(s3_endpoint, s3_bucket, "race")
    assert listed["run"] == "a"
    got = sorted(r["v"] for r in spark.read.json(published_files(
        path, settings_of(s3_endpoint))).collect())
    assert got == sorted(f"a{i}" for i in range(30))

    # A writer that began before another published finds the manifest changed: refused.
    late, early = FileSink(path, format="json"), FileSink(path, format="json")
    early.prepare(spark, a.limit(0))
    late.prepare(spark, b.limit(0))
    early.write(a)
    early.commit({"run": "early"})
    late.adopt([])  # nothing of its own to publish but the empty write
    with pytest.raises(PublishConflictError, match="another run published"):
        late.commit({"run": "late"})
    late.abort()
    assert manifest(s3_endpoint, s3_bucket, "race")["run"] == "early"


class _Together(FileSink):
    """A FileSink whose prepare and commit each wait for the other writer's (a barrier of
    two): the empty writes run at the same time in the one Spark session, and neither
    publishes before both have written."""

    def __init__(self, path: str, prepared: threading.Barrier, written: threading.Barrier) -> None:
        super().__init__(path)
        self.prepared, self.written = prepared, written

    def prepare(self, spark: Any, shaped: Any) -> None:
        self.prepared.wait(timeout=120)
        try:
            super().prepare(spark, shaped)
        except BaseException:
            self.written.abort()  # the other writer must not wait for this one
            raise

    def commit(self, manifest: Any) -> None:
        self.written.wait(timeout=300)
        super().commit(manifest)


def test_two_ingests_of_one_new_folder_at_once_one_publishes_the_other_retries_over_it(
        spark: Any, kafka_config: dict[str, Any], s3_endpoint: Any, s3_bucket: str,
        hour: tuple[str, list[tuple[int, bytes]]]) -> None:
    """Issue 55: two runs of one new S3 path at the same moment, on one Spark session. Before,
    one Spark job's commit removed the folder's shared _temporary under the other's empty write
    (a ConfigurationError, not retried) and the other saw two jobs' files (PublishConflictError):
    both failed. Now exactly one publishes, the other gets PublishConflictError (retryable),
    and its retry publishes over the first."""
    from concurrent.futures import ThreadPoolExecutor

    topic, records = hour
    path = f"s3a://{s3_bucket}/new/path"
    ranges = ranges_of(kafka_config, topic)
    prepared, written = threading.Barrier(2), threading.Barrier(2)
    sinks = [_Together(path, prepared, written) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(ingest, spark, ranges, kafka_config, sink) for sink in sinks]
        outcomes = [f.exception(timeout=600) or f.result() for f in futures]
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 1, outcomes
    assert type(failures[0]) is PublishConflictError, repr(failures[0])
    assert failures[0].retryable
    assert [o.records for o in outcomes if not isinstance(o, BaseException)] == [300]
    first = manifest(s3_endpoint, s3_bucket, "new/path")
    assert values(spark, published_files(path, settings_of(s3_endpoint))) == Counter(records)

    again = ingest(spark, ranges, kafka_config, FileSink(path))  # Airflow's retry of the loser
    assert again.records == 300
    second = manifest(s3_endpoint, s3_bucket, "new/path")
    assert second != first and second["files"] == first["files"]
    assert keys(s3_endpoint, s3_bucket, "new/path/") == sorted(
        [f"new/path/{MANIFEST_NAME}"] + [f"new/path/{f}" for f in second["files"]])
    assert values(spark, [path]) == Counter(records)


def test_an_unfinished_upload_is_invisible_and_the_next_publish_aborts_it(
        spark: Any, kafka_config: dict[str, Any], s3_endpoint: Any, s3_bucket: str,
        hour: tuple[str, list[tuple[int, bytes]]]) -> None:
    topic, _ = hour
    client = s3_endpoint.boto3_client()
    killed = ObjectUpload(client, s3_bucket, "up/part-killed.parquet", part_bytes=5 * 2**20)
    killed.write(b"x" * (5 * 2**20 + 10))  # one part uploaded, then the task "dies"
    assert keys(s3_endpoint, s3_bucket, "up/") == []
    assert len(client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", ())) == 1
    time.sleep(1.1)  # the store's clock has whole seconds: the upload began before the run
    ingest(spark, ranges_of(kafka_config, topic), kafka_config,
           FileSink(f"s3a://{s3_bucket}/up"))
    assert client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    assert "up/part-killed.parquet" not in keys(s3_endpoint, s3_bucket, "up/")


def test_the_stores_errors_come_before_anything_is_read(
        spark: Any, s3_endpoint: Any, s3_bucket: str) -> None:
    shaped = spark.createDataFrame([], "v string")
    wrong_key = FileSink(f"s3a://{s3_bucket}/x",
                         s3=settings_of(s3_endpoint, secret="not-the-secret"))
    with pytest.raises(ConfigurationError, match="secret key does not match") as caught:
        wrong_key.prepare(spark, shaped)
    assert "not-the-secret" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="bucket does not exist"):
        FileSink("s3a://no-such-bucket-here/x", s3=settings_of(s3_endpoint)).prepare(
            spark, shaped)
    began = time.monotonic()
    with pytest.raises(SinkError, match="did not answer"):
        FileSink(f"s3a://{s3_bucket}/x", s3=S3Settings(
            endpoint_url="http://127.0.0.1:1", access_key="k", secret_key="s",
            path_style=True)).prepare(spark, shaped)
    assert time.monotonic() - began < 30
    assert keys(s3_endpoint, s3_bucket) == []


def test_a_denied_write_fails_before_anything_is_read(
        spark: Any, s3_endpoint: Any, s3_bucket: str) -> None:
    from tools.s3_server import create_user

    reader = create_user(s3_endpoint, f"reader{s3_bucket[-6:]}", "reader-secret-1234")
    # The bucket lets this user list and read, not write.
    s3_endpoint.boto3_client().put_bucket_policy(Bucket=s3_bucket, Policy=json.dumps({
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": [reader.access_key]},
            "Action": ["s3:ListBucket", "s3:GetObject"],
            "Resource": [f"arn:aws:s3:::{s3_bucket}", f"arn:aws:s3:::{s3_bucket}/*"]}]}))
    sink = FileSink(f"s3a://{s3_bucket}/x", s3=settings_of(reader))
    with pytest.raises(ConfigurationError, match=r"S3 refused to write .*access is denied"):
        sink.prepare(spark, spark.createDataFrame([], "v string"))
    assert keys(s3_endpoint, s3_bucket) == []


def test_the_sinks_s3_settings_reach_a_store_the_sessions_settings_do_not(
        spark: Any, kafka_config: dict[str, Any], hour: tuple[str, list[tuple[int, bytes]]],
        tmp_path: Any) -> None:
    """``FileSink(s3=...)`` names another S3 endpoint than the session's ``fs.s3a.*`` (which
    point at ``s3_endpoint``): Spark's writer (the empty write of ``prepare``) reaches the
    bucket there too, not a bucket of that name on the session's endpoint."""
    import uuid

    from tools.s3_server import local_s3

    topic, records = hour
    with local_s3(tmp_path / "other") as other:
        bucket = f"o-{uuid.uuid4().hex[:12]}"
        other.create_bucket(bucket)
        path = f"s3a://{bucket}/out"
        ingest(spark, ranges_of(kafka_config, topic), kafka_config,
               FileSink(path, s3=settings_of(other)))
        files = published_files(path, settings_of(other))
        assert values(spark, files) == Counter(records)
        assert keys(other, bucket, "out/") == sorted(
            [f"out/{MANIFEST_NAME}"] + [f"out/{f.rsplit('/', 1)[1]}" for f in files])


def test_a_marker_the_attempt_rewrote_is_its_own_and_goes_at_its_publish(
        s3_endpoint: Any, s3_bucket: str) -> None:
    """Spark's writer rewrites ``_SUCCESS`` where an earlier (killed) attempt left one: the
    object is this attempt's, deleted by its publish even when the store's clock (whole
    seconds) puts it in the manifest's second, where the rule for older objects keeps it."""
    import uuid

    from airflow_provider_kafka_spark.sinks.files.objects import ObjectRun

    client = s3_endpoint.boto3_client()
    client.put_object(Bucket=s3_bucket, Key="out/_SUCCESS", Body=b"a killed attempt's")
    time.sleep(1.1)  # the store's clock has whole seconds
    run = ObjectRun(f"s3a://{s3_bucket}/out", settings_of(s3_endpoint))
    run.inspect()
    run.mark()  # before the write
    while time.time() % 1 > 0.3:  # the rewrite and the publish in one second of the store's
        time.sleep(0.01)
    part = f"part-00000-{uuid.uuid4()}-c000.json"
    client.put_object(Bucket=s3_bucket, Key="out/_SUCCESS", Body=b"this attempt's")
    client.put_object(Bucket=s3_bucket, Key=f"out/{part}", Body=b'{"v": 1}\n')
    assert run.spark_wrote() == [part]
    run.publish([part], {"run": 1})
    assert keys(s3_endpoint, s3_bucket, "out/") == [f"out/{MANIFEST_NAME}", f"out/{part}"]
