"""Iceberg and Delta tables whose files live on S3 (the suite's S3 server, through S3A), written
exactly once by the package's IcebergSink and DeltaSink: a real Kafka slice lands in one commit,
pyiceberg and delta-rs read exactly its records back from S3, a retry finds its commit and
writes nothing, a reprocessing replaces the run's rows (and only them) in one commit.

Iceberg here is the catalog ``s3``: Iceberg's JdbcCatalog on the tier's PostgreSQL, its warehouse
``s3a://<bucket>/iceberg``; a commit writes a new metadata file under a new name and swaps the
table's pointer in PostgreSQL (compare-and-swap), so no object is ever renamed or overwritten.
Delta tables are ``s3a://`` paths, whose log Delta on Spark writes through its single-driver
S3 log store (``test_delta_on_spark_commits_to_s3_through_its_single_driver_log_store``).

A store that refuses (a missing bucket, wrong keys) ends the task before the read, one that does
not answer is retried (``test_a_store_that_refuses_or_does_not_answer_fails_the_sink_before_the_read``).
The kill points and the concurrent commits on S3 are the tier's own tests, parametrized by kind
(``test_table_killpoints.py``, ``test_table_sinks.py``).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError, TableError
from airflow_provider_kafka_spark.naming import dataset_of_path
from tests.tables.cases import UPPER_SQL, create, expected, ranges_of, reader, run_ingest
from tools.kafka_records import produce
from tools.processes import free_port
from tools.table_killpoint import TableFiles

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

NOW = int(time.time() * 1000)


@pytest.fixture(scope="module")
def topic(kafka_config: dict[str, Any]) -> Any:
    """A 3-partition topic holding 20 records per partition (offsets 0..19)."""
    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    name = f"tables-s3-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config)
    create_topic(admin, name, 3)
    data = [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), NOW + i)
            for i in range(20) for p in range(3)]
    produce(kafka_config, name, data)
    yield name, data
    admin.delete_topics([name])[name].result(30)


@pytest.mark.parametrize("kind", ["iceberg-s3", "delta-s3"])
def test_a_run_into_a_table_on_s3_lands_once_a_retry_finds_its_commit_and_a_reprocessing_replaces_it(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, warehouses: Any,
        s3_lake: Any, s3_catalog: Any, kind: str) -> None:
    name, data = topic
    table = create(table_spark, kind, warehouses.of(kind))
    files = TableFiles.of(table.format, table.name, warehouses.lake, s3_lake)
    read_from_s3 = reader(kind, s3_catalog, s3_lake.endpoint)
    assert read_from_s3 is not None
    ranges = ranges_of(name, {0: (0, 10), 1: (5, 15), 2: (0, 20)})
    want = expected(data, ranges)

    first = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    assert first["committed"] and first["records_written"] == 40 and first["replaced"] == []
    # The table is on S3: its location, its lineage name, its data files and commits.
    bucket = warehouses.s3.removeprefix("s3a://")
    assert first["location"].startswith(f"{warehouses.s3}/"), first["location"]
    assert dataset_of_path(first["location"])[0] == f"s3://{bucket}"
    data_files, commits = files.data_files(), files.commit_files()
    assert data_files and commits
    assert table.rows(table_spark) == want
    assert read_from_s3(table) == want  # pyiceberg / delta-rs, from S3

    # Another run's rows, which the reprocessing below must not touch.
    other = ranges_of(name, {0: (10, 20)})
    second = run_ingest(table_spark, kafka_config, other, table.sink("run-2"))
    commits = files.commit_files()
    data_files = files.data_files()

    # A retry of the same run finds its commit in the table: nothing written to S3.
    again = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    assert again["skipped"] and not again["committed"] and again["records_written"] == 0
    assert again["write_id"] == first["write_id"]
    assert files.commit_files() == commits and files.data_files() == data_files
    assert table.rows(table_spark) == want + expected(data, other)

    # The run reprocessed (generation 1, another transform): its rows replaced in one commit.
    redo = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1", generation=1),
                      sql=UPPER_SQL)
    assert redo["committed"] and redo["replaced"] == [first["write_id"]]
    assert len(files.commit_files() - commits) == 1
    now = expected(data, ranges, upper=True) + expected(data, other)
    assert table.rows(table_spark) == now
    assert read_from_s3(table) == now
    assert table.writes(table_spark) == Counter({redo["write_id"]: 40, second["write_id"]: 10})
    assert [r.write_id for r in table.records(table_spark)][0] == redo["write_id"]


def test_delta_on_spark_commits_to_s3_through_its_single_driver_log_store(
        table_spark: Any, warehouses: Any, s3_lake: Any) -> None:
    """Why Delta tables on S3 take one writing driver at a time (docs/tables.md, "On S3").

    Delta 4.4 on Spark writes the log of an ``s3a://`` table through ``S3SingleDriverLogStore``
    (no ``spark.delta.logStore.*`` is set here, none of its log stores does better on S3): it
    keeps the commits of one JVM apart with a lock of its own, checks that the version's file
    is absent and writes it with S3A's ``create(path, overwrite=false)``. That create is a plain
    PUT: two writers that both found the version absent (two drivers) both succeed, and the
    later replaces the earlier's commit. S3A can create conditionally (HADOOP-19256: the
    ``fs.option.create.conditional.overwrite`` option, an ``If-None-Match`` PUT, which the S3
    server honours), but no log store of Delta 4.4 asks for it."""
    jvm = table_spark.sparkContext._jvm
    hadoop = table_spark.sparkContext._jsc.hadoopConfiguration()
    path = f"{warehouses.s3}/delta_{uuid.uuid4().hex[:10]}"
    table_spark.range(3).write.format("delta").save(path)
    assert not {k: v for k, v in table_spark.sparkContext.getConf().getAll()
                if k.startswith(("spark.delta.logStore", "spark.hadoop.delta.logStore"))}
    log_stores = getattr(getattr(jvm.org.apache.spark.sql.delta.storage, "LogStore$"), "MODULE$")
    delegate = log_stores.apply(table_spark._jsparkSession).getDelegate(
        jvm.org.apache.hadoop.fs.Path(f"{path}/_delta_log"))
    assert delegate.logStoreImpl().getClass().getName() == "io.delta.storage.S3SingleDriverLogStore"

    def put(key: str, conditional: bool) -> list[str]:
        """Two writers of ``key`` that both found it absent: the errors their closes raised."""
        target = jvm.org.apache.hadoop.fs.Path(f"{path}/_race/{key}")
        fs = target.getFileSystem(hadoop)
        if conditional:
            streams = [fs.createFile(target).overwrite(True).must(
                "fs.option.create.conditional.overwrite", True).build() for _ in range(2)]
        else:
            streams = [fs.create(target, False) for _ in range(2)]
        errors = []
        for n, stream in enumerate(streams):
            stream.write(bytearray(f'{{"writer":{n}}}\n'.encode()))
            try:
                stream.close()
            except Exception as exc:  # noqa: BLE001 - the py4j error names the Java one
                errors.append(str(exc))
        return errors

    def content(key: str) -> bytes:
        bucket, _, prefix = path.removeprefix("s3a://").partition("/")
        return s3_lake.endpoint.boto3_client().get_object(
            Bucket=bucket, Key=f"{prefix}/_race/{key}")["Body"].read()

    # What the log store does: both writes succeed, the second one's content stays.
    assert put("00000000000000000001.json", conditional=False) == []
    assert content("00000000000000000001.json") == b'{"writer":1}\n'
    # What it would need: the second conditional create fails at its close (412).
    [lost] = put("00000000000000000002.json", conditional=True)
    assert "RemoteFileChangedException" in lost or "412" in lost, lost
    assert content("00000000000000000002.json") == b'{"writer":0}\n'


UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 1000}
"""A Kafka config nothing answers at: an error before the read is the sink's, not Kafka's."""


@pytest.mark.parametrize(("case", "error", "message"), [
    ("no bucket", ConfigurationError, "the store refused to read the table .*: the bucket does "
                                      "not exist"),
    ("wrong secret", ConfigurationError, "the store refused to read the table .*: access is "
                                         "denied"),
    ("no answer", TableError, "could not read the table .*: the store did not answer.*a retry "
                              "may succeed"),
], ids=["no-bucket", "wrong-secret", "no-answer"])
def test_a_store_that_refuses_or_does_not_answer_fails_the_sink_before_the_read(
        table_spark: Any, s3_lake: Any, case: str, error: type, message: str) -> None:
    """The store's answer decides whether a retry can help: a missing bucket or wrong keys end
    the task (ConfigurationError), an endpoint that does not answer is retried (TableError);
    neither is "no Delta table there". Each case is a new bucket, set per bucket as S3A reads
    it (its file system is made on first use)."""
    from airflow_provider_kafka_spark.sinks import DeltaSink
    from airflow_provider_kafka_spark.spark import ingest

    bucket = f"t-{case.replace(' ', '-')}-{uuid.uuid4().hex[:8]}"
    hadoop = table_spark.sparkContext._jsc.hadoopConfiguration()
    settings = {}
    if case == "wrong secret":
        s3_lake.endpoint.create_bucket(bucket)
        settings = {"secret.key": "not-the-secret"}
    elif case == "no answer":  # a port nothing listens on; S3A tries once
        settings = {"endpoint": f"http://127.0.0.1:{free_port()}", "attempts.maximum": "1",
                    "retry.limit": "1", "connection.establish.timeout": "1s"}
    for key, value in settings.items():
        hadoop.set(f"fs.s3a.bucket.{bucket}.{key}", value)
    try:
        sink = DeltaSink(f"s3a://{bucket}/orders", application="app", run="r")
        with pytest.raises(error, match=message) as failed:
            ingest(table_spark, ranges_of("orders", {0: (0, 5)}), UNREACHABLE, sink,
                   sql="SELECT CAST(value AS STRING) AS value FROM kafka")
        assert failed.value.retryable is (error is TableError)
        assert "not-the-secret" not in str(failed.value)
    finally:
        for key in settings:
            hadoop.unset(f"fs.s3a.bucket.{bucket}.{key}")
