"""A run of the records as read of a topic of 200 partitions into Iceberg and Delta tables
(issue 54): the readers land a file per split (several partitions' ranges each), one commit
adopts them and records every partition's range, a retry writes nothing."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from airflow_provider_kafka_spark.spark.read.splits import plan_splits
from tests.tables.cases import AS_READ_COLUMNS, create, expected, ranges_of, run_ingest
from tools.kafka_records import produce

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 200
PER_PARTITION = 4
SPLIT_SIZE = 200  # 50 ranges of 4 offsets per split: 4 splits


@pytest.fixture(scope="module")
def wide(kafka_config: dict[str, Any]) -> Any:
    """A topic of :data:`PARTITIONS` partitions of :data:`PER_PARTITION` records each."""
    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    name = f"wide-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config)
    create_topic(admin, name, PARTITIONS)
    now = int(time.time() * 1000)
    data = [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), now + i)
            for i in range(PER_PARTITION) for p in range(PARTITIONS)]
    produce(kafka_config, name, data)
    yield name, data
    admin.delete_topics([name])[name].result(30)


@pytest.mark.parametrize("kind", ["iceberg-hadoop", "delta-path"])
def test_a_run_of_a_wide_topic_commits_a_file_per_split_once(
        table_spark: Any, kafka_config: dict[str, Any], wide: Any, warehouses: Any,
        kind: str) -> None:
    name, data = wide
    table = create(table_spark, kind, warehouses.of(kind), AS_READ_COLUMNS)
    ranges = ranges_of(name, {p: (0, PER_PARTITION) for p in range(PARTITIONS)})
    assert len(plan_splits(ranges.ranges, SPLIT_SIZE)) == 4

    first = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"), sql=None,
                       max_records_per_split=SPLIT_SIZE)

    assert first["committed"] and first["landed"]
    assert first["records_written"] == PARTITIONS * PER_PARTITION
    assert table.rows(table_spark) == expected(data, ranges)
    assert table.writes(table_spark) == Counter({first["write_id"]: PARTITIONS * PER_PARTITION})
    files = table.df(table_spark).selectExpr("_metadata.file_path AS f").distinct().count() \
        if kind.startswith("delta") else table_spark.sql(
            f"SELECT count(*) AS n FROM {table.name}.files").first()["n"]
    assert files == 4
    [record] = table.records(table_spark)
    commits = table.commit_count(table_spark)
    assert sorted(record.ranges) == sorted((name, p, 0, PER_PARTITION)
                                           for p in range(PARTITIONS))

    again = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"), sql=None,
                       max_records_per_split=SPLIT_SIZE)
    assert again["skipped"] and not again["committed"] and again["records_written"] == 0
    assert table.commit_count(table_spark) == commits
