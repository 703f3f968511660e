"""Spark Connect is first-class: reads, decoding, summaries, the file sink and write_kafka in
every guarantee on a Spark Connect session of the local standalone cluster (no RDD API, no
driver JVM on this side), and the ingest operator through a ``spark_connect`` connection in a
``dag.test()`` run. Exact record sets against the real broker; what cannot run over Connect
fails before anything is read."""

from __future__ import annotations

# Airflow reads its configuration once, when first imported.
import tests.support.airflow_env  # noqa: F401  # isort: skip

import base64
import json
import os
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Producer

from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    OffsetRanges,
    PartitionRange,
    Subscription,
    resolve_offsets,
)
from airflow_provider_kafka_spark.sinks import MANIFEST_NAME, FileSink
from airflow_provider_kafka_spark.spark import (
    KafkaReadError,
    LostOffsets,
    decode_kafka,
    kafka_errors,
    read_kafka,
    summarize,
    write_kafka,
)
from tests.support.cluster import CONNECT_MODE_ENV, restored_env
from tools.kafka_records import transactional_producer, wait_for_markers
from tools.spark_cluster import Cluster
from tools.write_kafka_rows import read_committed

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

NOW_MS = int(time.time() * 1000) - 60_000
Produced = tuple[int, int, bytes, bytes]
"""(partition, offset, key, value) of a record the broker stored."""


def produce_mixed(kafka_config: dict[str, Any], topic: str) -> list[Produced]:
    """On 3 partitions: 9 plain records, a committed transaction of 6 and an aborted one of
    6; returns the records a read_committed reader must see (plain + committed)."""
    visible: list[Produced] = []

    def keep(err: Any, msg: Any) -> None:
        assert err is None, err
        visible.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    plain = Producer({**kafka_config, "enable.idempotence": True})
    for i in range(9):
        plain.produce(topic, key=f"p{i}".encode(), value=json.dumps({"id": i}).encode(),
                      partition=i % 3, timestamp=NOW_MS + i, on_delivery=keep)
    assert plain.flush(30) == 0
    committed = transactional_producer(kafka_config)
    committed.begin_transaction()
    for i in range(9, 15):
        committed.produce(topic, key=f"c{i}".encode(), value=json.dumps({"id": i}).encode(),
                          partition=i % 3, timestamp=NOW_MS + i, on_delivery=keep)
    committed.commit_transaction(30)
    aborted = transactional_producer(kafka_config)
    aborted.begin_transaction()
    for i in range(15, 21):
        aborted.produce(topic, key=f"a{i}".encode(), value=json.dumps({"id": i}).encode(),
                        partition=i % 3, timestamp=NOW_MS + i)
    aborted.flush(30)
    aborted.abort_transaction(30)
    return sorted(visible)


def rows_of(df: Any) -> list[Produced]:
    return sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
                  for r in df.select("partition", "offset", "key", "value").collect())


@pytest.fixture
def mixed_topic(new_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any
                ) -> tuple[str, list[Produced], OffsetRanges]:
    topic = new_topic(partitions=3)
    visible = produce_mixed(kafka_config, topic)
    wait_for_markers(kafka_admin, topic, 3)
    ranges = resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest")
    return topic, visible, ranges


def test_a_connect_session_is_made_without_settings_the_server_refuses(
        spark_cluster: Cluster) -> None:
    # The driver's UI and console settings belong to the server's JVM: a client that sets them
    # gets Spark's CANNOT_MODIFY_CONFIG warning for each, in every task log of a Connect user.
    from airflow_provider_kafka_spark.spark import spark_session

    with restored_env(*CONNECT_MODE_ENV), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = spark_session(remote=spark_cluster.connect_url)
        try:
            assert session.conf.get("spark.sql.session.timeZone") == "UTC"
        finally:
            session.stop()
    refused = [str(w.message) for w in caught if "CANNOT_MODIFY_CONFIG" in str(w.message)]
    assert refused == []


@pytest.mark.parametrize("engine", ["python", "spark-kafka"])
def test_read_decode_and_summarize_over_connect(
        connect_spark: Any, kafka_config: dict[str, Any],
        mixed_topic: tuple[str, list[Produced], OffsetRanges], engine: str) -> None:
    topic, visible, ranges = mixed_topic
    assert type(connect_spark).__module__.startswith("pyspark.sql.connect")

    df = read_kafka(connect_spark, ranges, kafka_config, max_records_per_split=2,
                    engine=engine)  # type: ignore[arg-type]

    assert rows_of(df) == visible  # committed only: no aborted record, no marker
    assert len(visible) == 15
    decoded = decode_kafka(df, value_format="json", value_schema="id INT")
    assert sorted(r["id"] for r in decoded.select("value.id").collect()) == list(range(15))
    by_partition = {p: [o for q, o, _, _ in visible if q == p] for p in range(3)}
    assert [(s.topic, s.partition, s.records, s.first_offset, s.last_offset)
            for s in summarize(df)] == [
        (topic, p, len(by_partition[p]), min(by_partition[p]), max(by_partition[p]))
        for p in range(3)]


def test_executor_errors_come_back_as_package_errors_over_connect(
        connect_spark: Any, kafka_config: dict[str, Any], new_topic: Any) -> None:
    topic = new_topic(partitions=1)
    # Offsets 0..9 were never written: the split makes no progress and fails on the executor.
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 10),))
    df = read_kafka(connect_spark, ranges, kafka_config, poll_timeout=2)
    with pytest.raises(KafkaReadError, match=rf"{topic}/0"), kafka_errors():
        df.count()


def test_counting_skipped_deleted_offsets_fails_before_reading_over_connect(
        connect_spark: Any, kafka_config: dict[str, Any]) -> None:
    # The topic does not exist: any cluster call would fail otherwise.
    ranges = OffsetRanges((PartitionRange(f"missing-{uuid.uuid4().hex[:8]}", 0, 0, 5),))
    with pytest.raises(ConfigurationError, match="Spark Connect does not have"):
        read_kafka(connect_spark, ranges, kafka_config, on_data_loss="skip", lost=LostOffsets())


def _files(folder: Path) -> dict[str, Any]:
    """The JSON rows (sorted) and the manifest of a file sink folder."""
    lines = [json.loads(line) for part in sorted(folder.glob("part-*"))
             for line in part.read_text().splitlines()]
    return {"rows": sorted(r["v"] for r in lines),
            "manifest": json.loads((folder / MANIFEST_NAME).read_text())}


def _sink_write(spark: Any, path: str, values: list[str], manifest: dict[str, Any]) -> None:
    sink = FileSink(path, format="json")
    df = spark.createDataFrame([(v,) for v in values], "v string")
    sink.prepare(spark, df.limit(0))
    try:
        sink.write(df)
        sink.commit(manifest)
    except BaseException:
        sink.abort()
        raise


def test_file_sink_over_connect_stages_swaps_and_writes_the_manifest(
        connect_spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "2024-05-01T00"
    _sink_write(connect_spark, str(out), ["a", "b", "c"], {"run": 1})
    assert _files(out) == {"rows": ["a", "b", "c"], "manifest": {"run": 1}}
    # The same run again (a retry): the same folder, replaced, nothing left aside.
    _sink_write(connect_spark, f"file:{out}", ["a", "b", "c"], {"run": 1})
    assert _files(out) == {"rows": ["a", "b", "c"], "manifest": {"run": 1}}
    _sink_write(connect_spark, str(out) + "/", ["d"], {"run": 2})
    assert _files(out) == {"rows": ["d"], "manifest": {"run": 2}}
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["2024-05-01T00"]


def test_a_failed_write_over_connect_leaves_the_previous_output(
        connect_spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink_write(connect_spark, str(out), ["old"], {"run": 1})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    # A range, not a local relation: Spark cannot fold the error away before the write.
    bad = connect_spark.range(0, 3, 1, 1).selectExpr(
        "IF(id = 2, raise_error('boom in the write'), CAST(id AS STRING)) AS v")
    sink = FileSink(str(out), format="json")
    sink.prepare(connect_spark, bad.limit(0))
    with pytest.raises(Exception, match="boom in the write"):
        sink.write(bad)
    sink.abort()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize(("path", "message"), [
    ("gs://lake/events/2024-05-01T00", "cannot write 'gs://lake/events/2024-05-01T00' over "
                                       "Spark Connect"),
    ("hdfs://nn:8020/events/x", "For hdfs: paths use a classic session"),
    ("file://otherhost/data/x", "only local paths"),
    ("relative/out", "is relative"),
])
def test_file_sink_paths_connect_cannot_handle_fail_in_prepare(
        connect_spark: Any, path: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        FileSink(path).prepare(connect_spark, connect_spark.createDataFrame([], "v string"))


@pytest.mark.parametrize("guarantee", ["none", "at_least_once", "exactly_once"])
def test_write_kafka_over_connect(
        connect_spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        mixed_topic: tuple[str, list[Produced], OffsetRanges], guarantee: str) -> None:
    _, visible, ranges = mixed_topic
    out = new_topic(partitions=2)
    ledger = new_topic(partitions=1, prefix="ledger", **{"cleanup.policy": "compact"})
    # 8 Spark partitions, some of them empty (15 records in slices of 2 offsets).
    df = read_kafka(connect_spark, ranges, kafka_config, max_records_per_split=2) \
        .select("key", "value")
    args: dict[str, Any] = {"topic": out, "delivery_guarantee": guarantee}
    if guarantee == "exactly_once":
        args.update(transactional_id_prefix=f"connect-{uuid.uuid4().hex[:6]}",
                    write_id="connect/run-1", ledger_topic=ledger)

    with kafka_errors():
        result = write_kafka(df, kafka_config, **args)

    assert result.records_written == 15
    assert result.topics == (out,)
    assert Counter((r.key, r.value) for r in read_committed(kafka_config, out)) == \
        Counter((k, v) for _, _, k, v in visible)
    # Every Spark partition answered, the empty ones (only markers or aborted records) too.
    tasks = sorted(result.records_per_task)
    assert tasks == list(range(len(tasks))) and len(tasks) > 3
    assert 0 in result.records_per_task.values()
    if guarantee == "exactly_once":
        again = write_kafka(df, kafka_config, **args)  # a re-run: everything was committed
        committed = tuple(i for i in tasks if result.records_per_task[i] > 0)
        assert again.skipped_tasks == committed  # empty partitions have no ledger entry
        assert again.records_per_task == {i: 0 for i in tasks if i not in committed}
        assert Counter(r.key for r in read_committed(kafka_config, out)) == \
            Counter(k for _, _, k, _ in visible)  # exactly one copy per key


# --- the ingest operator through a spark_connect connection, in a dag.test() run ---


@pytest.fixture
def connect_connection(spark_cluster: Cluster, kafka_config: dict[str, Any],
                       airflow_db: Path) -> Iterator[None]:
    """``kafka_default`` and ``spark_connect_test`` (a ``spark_connect`` connection to the
    cluster's Connect server) as AIRFLOW_CONN_* variables; the Connect session the task
    creates is stopped afterwards and this process put back in classic mode."""
    url = urlsplit(spark_cluster.connect_url.replace("sc://", "http://", 1))
    with restored_env(*CONNECT_MODE_ENV, "AIRFLOW_CONN_KAFKA_DEFAULT",
                      "AIRFLOW_CONN_SPARK_CONNECT_TEST"):
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka",
                                                               "extra": kafka_config})
        os.environ["AIRFLOW_CONN_SPARK_CONNECT_TEST"] = json.dumps(
            {"conn_type": "spark_connect", "host": url.hostname, "port": url.port,
             "login": "airflow", "extra": {"use_ssl": False}})
        try:
            yield
        finally:
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            session = ConnectSession.getActiveSession() or ConnectSession._get_default_session()
            if session is not None:
                session.stop()


def _adhoc_dag_on_connect() -> Any:
    """The example DAG ``kafka_adhoc`` (dag.test() runs DAGs of the DAGs folder), its ingest
    task on the ``spark_connect_test`` connection, no retries."""
    from airflow.dag_processing.dagbag import DagBag

    from tests.support.airflow_env import DAGS_FOLDER

    bag = DagBag(dag_folder=str(DAGS_FOLDER / "kafka_adhoc.py"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("kafka_adhoc")
    for task in dag.tasks:
        task.retries = 0
    dag.get_task("ingest").spark_conn_id = "spark_connect_test"
    return dag


def _outcome(dag_run: Any) -> tuple[dict[str, str], dict[str, Any]]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}
        rows = session.query(XComModel).filter(
            XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id,
            XComModel.key == "return_value").all()
        return states, {row.task_id: row.value for row in rows}


def test_ingest_operator_over_a_spark_connect_connection(
        connect_connection: None, kafka_config: dict[str, Any], kafka_admin: Any,
        new_topic: Any, tmp_path: Path) -> None:
    topic = new_topic(partitions=3)
    visible = produce_mixed(kafka_config, topic)
    wait_for_markers(kafka_admin, topic, 3)
    out = tmp_path / "ingest"
    dag = _adhoc_dag_on_connect()

    run = dag.test(logical_date=None, run_conf={
        "topics": topic, "start": "earliest", "stop": "latest", "output_path": str(out),
        "output_format": "json"})

    states, xcom = _outcome(run)
    assert (str(run.state), states) == ("success", {"resolve_offsets": "success",
                                                    "ingest": "success"})
    written = sorted((r["partition"], r["offset"], base64.b64decode(r["key"]),
                      base64.b64decode(r["value"]))
                     for part in sorted(out.glob("part-*"))
                     for r in map(json.loads, part.read_text().splitlines()))
    assert written == visible
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["records"] == xcom["ingest"]["records"] == 15
    assert manifest["run_id"] == run.run_id
    assert [(p["partition"], p["records"]) for p in xcom["ingest"]["partitions"]] == [
        (p, sum(1 for q, *_ in visible if q == p)) for p in range(3)]
    assert [p.name for p in tmp_path.iterdir()] == ["ingest"]


def test_ingest_to_a_gcs_bucket_over_connect_fails_before_reading(
        connect_connection: None, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator

    # Ranges of a topic that does not exist: reading them would fail differently.
    ranges = OffsetRanges((PartitionRange(f"missing-{uuid.uuid4().hex[:8]}", 0, 0, 5),))
    op = KafkaSparkIngestOperator(task_id="ingest", ranges=ranges.to_dict(),
                                  sink=FileSink("gs://lake/events/2024-05-01T00"),
                                  spark_conn_id="spark_connect_test")
    with pytest.raises(ConfigurationError, match="over Spark Connect"):
        op.execute({"run_id": "manual__1"})


def test_ingest_lands_on_s3a_over_connect(
        connect_spark: Any, kafka_config: dict[str, Any], s3_endpoint: Any,
        mixed_topic: tuple[str, list[Produced], OffsetRanges]) -> None:
    """The Connect server has the s3a jars (the ``spark_cluster`` fixture). This client
    publishes the run with boto3 and the readers on the cluster's executors upload with the
    settings it hands them: ``FileSink(s3=S3Settings(...))``'s, which the sink also sets on the
    session (``fs.s3a.bucket.<bucket>.*``) for Spark's writer on the server. The session's own
    S3A keys cannot be read back over Connect (the server redacts every value whose key looks
    like a secret: ``conf.get`` answers None): with keys only there and none in this process,
    the ingest fails before anything is read, saying what to pass."""
    from airflow_provider_kafka_spark.s3 import S3Settings
    from airflow_provider_kafka_spark.sinks import published_files
    from airflow_provider_kafka_spark.spark.ingest import ingest  # (*)

    # (*) From its module: once the module is imported (the ingest operator does),
    # airflow_provider_kafka_spark.spark.ingest is the module, not the function.
    _, visible, ranges = mixed_topic
    settings = S3Settings(endpoint_url=s3_endpoint.url, region=s3_endpoint.region,
                          access_key=s3_endpoint.access_key, secret_key=s3_endpoint.secret_key,
                          path_style=True)
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    s3_endpoint.create_bucket(bucket)
    client = s3_endpoint.boto3_client()

    def listed() -> list[str]:
        answer = client.list_objects_v2(Bucket=bucket)
        return sorted(o["Key"] for o in answer.get("Contents", ()) if not o["Key"].endswith("/"))

    path = f"s3a://{bucket}/orders/h1"
    result = ingest(connect_spark, ranges, kafka_config, FileSink(path, s3=settings),
                    max_records_per_split=4)
    assert result.records == len(visible)
    files = published_files(path, settings)
    assert files and all(f.startswith(f"{path}/part-") for f in files)
    assert rows_of(connect_spark.read.parquet(*files)) == visible
    assert listed() == sorted([f"orders/h1/{MANIFEST_NAME}"]
                              + [f"orders/h1/{f.rsplit('/', 1)[1]}" for f in files])

    # The keys only in the session's conf (as the sink just set them for the bucket):
    assert connect_spark.conf.get(f"fs.s3a.bucket.{bucket}.endpoint") == s3_endpoint.url
    assert connect_spark.conf.get(f"fs.s3a.bucket.{bucket}.secret.key", None) is None
    with restored_env("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
                      "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                      "AWS_EC2_METADATA_DISABLED"):  # no credentials in this process
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
            os.environ.pop(name, None)
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.environ["AWS_CONFIG_FILE"] = os.devnull
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
        with pytest.raises(ConfigurationError, match=r"no credentials .*Over Spark Connect"):
            ingest(connect_spark, ranges, kafka_config, FileSink(f"s3a://{bucket}/orders/h2"))
    assert not [k for k in listed() if k.startswith("orders/h2")]
