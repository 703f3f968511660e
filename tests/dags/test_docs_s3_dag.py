"""The partitioned DAG of docs/airflow.md (``orders_hourly``: a ``CronPartitionTimetable``, the
resolve and ingest operators, ``FileSink("s3a://lake/orders/{{ partition_date... }}")``), taken
from the page itself, runs for one hour partition with ``dag.test()`` against the real broker, the
shared Spark session and a real S3 server: the hour's records land in the hour's folder of
the bucket ``lake``, published by its manifest, exactly.

Only the topic is changed: ``orders`` becomes a new, random name (the test broker is shared by
every test of the run, or is an external one, where ``orders`` may exist with other records).
The bucket ``lake`` is on an S3 server of this test's own (buckets of the shared one are per
test, with random names), which the session reaches for that bucket alone
(``fs.s3a.bucket.lake.*``, as a deployment configures S3A), so the DAG's sink takes its S3
settings from the session, as written.
"""

from __future__ import annotations

# Airflow reads its configuration once, when first imported.
import tests.support.airflow_env  # noqa: F401  # isort: skip

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from airflow_provider_kafka_spark.offsets.ranges import PartitionRange
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.sinks import published_files
from airflow_provider_kafka_spark.spark.read.splits import Split
from tests.support.dag_data import T0, T1, arrange
from tools.s3_server import S3Endpoint, local_s3

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "airflow.md"
BUCKET = "lake"


def docs_dag() -> str:
    """The first Python block of docs/airflow.md that defines the DAG ``orders_hourly`` on a
    ``CronPartitionTimetable``."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    found = [b for b in blocks
             if 'DAG("orders_hourly"' in b and "CronPartitionTimetable(" in b]
    assert found, "docs/airflow.md has no python block with DAG(\"orders_hourly\", ...) on a " \
                  "CronPartitionTimetable"
    return found[0]


@pytest.fixture
def lake(spark: Any, tmp_path: Path) -> Iterator[S3Endpoint]:
    """An S3 server of this test's own with the bucket ``lake``, which the shared session
    reaches through S3A's per-bucket settings; they are removed afterwards (and the session's
    cached file system of ``s3a://lake`` closed)."""
    with local_s3(tmp_path / "s3") as endpoint:
        endpoint.create_bucket(BUCKET)
        settings = S3Settings(endpoint_url=endpoint.url, region=endpoint.region,
                              access_key=endpoint.access_key, secret_key=endpoint.secret_key,
                              path_style=True, ssl=False)
        hadoop = spark._jsc.hadoopConfiguration()
        options = settings.hadoop_options(BUCKET)
        for key, value in options.items():
            hadoop.set(key, value)
        try:
            yield endpoint
        finally:
            jvm = spark._jvm
            jvm.org.apache.hadoop.fs.FileSystem.get(
                jvm.java.net.URI(f"s3a://{BUCKET}/"), hadoop).close()
            for key in options:
                hadoop.unset(key)


def with_partition(key: str, date: Any) -> Any:
    """``dag.test()`` makes a run without a partition; this makes it the partitioned run the
    scheduler would (the run's ``partition_key`` and ``partition_date``)."""
    from airflow.models import dagrun

    original = dagrun.get_or_create_dagrun

    def create(**kwargs: Any) -> Any:
        run = original(**kwargs)
        run.partition_key, run.partition_date = key, date
        kwargs["session"].commit()
        return run

    return mock.patch.object(dagrun, "get_or_create_dagrun", create)


def test_the_docs_dag_lands_one_hour_partition_on_s3(
        airflow_db: Path, kafka_connection: None, spark: Any, lake: S3Endpoint,
        new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    topic = new_topic(partitions=3, prefix="orders")
    produced = arrange(kafka_config, topic)  # records before, in and after the hour [T0, T1)
    source = docs_dag()
    assert source.count('topics=["orders"]') == 1
    dag_file = tmp_path / "orders_hourly.py"
    dag_file.write_text(source.replace('topics=["orders"]', f'topics=["{topic}"]'))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("orders_hourly")
    for task in dag.tasks:
        task.retries = 0
    # dag.test() makes runs of DAGs the metadata DB knows (serialized): this one is no file of
    # the DAGs folder's bundle, so it is written there as the DAG processor would.
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)

    key = T0.strftime("%Y-%m-%dT%H:%M:%S")  # the timetable's key of the hour's partition
    with with_partition(key, T0):
        run = dag.test(logical_date=None, run_after=T1)

    from airflow.utils.session import create_session

    with create_session() as session:
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
    assert (str(run.state), states) == ("success", {"resolve": "success", "ingest": "success"})
    folder = f"s3a://{BUCKET}/orders/{T0.strftime('%Y-%m-%dT%H')}"
    settings = S3Settings(endpoint_url=lake.url, region=lake.region, access_key=lake.access_key,
                          secret_key=lake.secret_key, path_style=True)
    files = published_files(folder, settings)
    # The readers' object: one split of the ranges with records (partition 2 has none in the
    # hour), one file named by it.
    split = Split((PartitionRange(topic, 0, 3, 8), PartitionRange(topic, 1, 0, 4)))
    assert files == [f"{folder}/part-{split.name()}.snappy.parquet"]
    got = Counter((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
                  for r in spark.read.parquet(*files).collect())
    assert got == Counter(produced["I1"])
    # The bucket holds that hour's folder alone: its objects and its manifest.
    client = lake.boto3_client()
    listed = sorted(o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", ())
                    if not o["Key"].endswith("/"))
    prefix = f"orders/{T0.strftime('%Y-%m-%dT%H')}/"
    assert listed == sorted([f"{prefix}_kafka_spark_manifest.json"]
                            + [prefix + f.rsplit("/", 1)[1] for f in files])
