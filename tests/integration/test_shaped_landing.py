"""ingest(shape=...) into a FileSink partitioned by a derived column: the readers land the
shaped records in a folder per value themselves (local and S3), the same rows Spark's writer
lands for the same shape; a shape that does not fit the records is refused before the read."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.shaping import Derived, Shape
from airflow_provider_kafka_spark.sinks import FileSink
from airflow_provider_kafka_spark.spark import ingest
from tools.kafka_records import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]

HOUR_MS = 3_600_000
SHAPE = Shape(["partition", "offset", "value AS payload", "timestamp"],
              {"hour": Derived("timestamp", "hour")})


@pytest.fixture(scope="module")
def hours(kafka_config: dict[str, Any], kafka_admin: Any) -> Any:
    """A topic of 3 partitions holding 120 records spread over the last 4 whole hours."""
    from tests.support.topics import create_topic

    topic = create_topic(kafka_admin, f"shaped-{int(time.time() * 1000)}", 3)
    start = (int(time.time() * 1000) // HOUR_MS - 4) * HOUR_MS
    produce(kafka_config, topic, [(i % 3, None, f"v{i}".encode(), start + (i % 4) * HOUR_MS + i)
                                  for i in range(120)])
    yield topic, start
    kafka_admin.delete_topics([topic])[topic].result(30)


def landed(spark: Any, path: str) -> Counter[tuple[Any, ...]]:
    return Counter((r["partition"], r["offset"], bytes(r["payload"]), r["hour"])
                   for r in spark.read.parquet(path).collect())


def hour_of(ms: int) -> str:
    return time.strftime("%Y-%m-%d-%H", time.gmtime(ms // 1000))


def test_the_readers_land_a_folder_per_hour_as_sparks_writer_does(
        spark: Any, kafka_config: dict[str, Any], hours: Any, tmp_path: Path,
        s3_endpoint: Any, s3_bucket: str) -> None:
    topic, start = hours
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"

    result = ingest(spark, ranges, kafka_config, FileSink(str(ours), partition_by=["hour"]),
                    shape=SHAPE)
    # an option besides compression: Spark's writer writes, with the same shape
    ingest(spark, ranges, kafka_config, FileSink(
        str(theirs), partition_by=["hour"], options={"compression": "snappy",
                                                     "parquet.enable.dictionary": "true"}),
           shape=SHAPE)
    on_s3 = f"s3a://{s3_bucket}/shaped/{topic}"
    ingest(spark, ranges, kafka_config, FileSink(on_s3, partition_by=["hour"]), shape=SHAPE)

    assert result.records == 120
    folders = sorted(p.name for p in ours.iterdir() if p.is_dir())
    assert folders == [f"hour={hour_of(start + h * HOUR_MS)}" for h in range(4)]
    files = sorted(str(p.relative_to(ours)) for p in ours.rglob("*.parquet"))
    assert len(files) == 4 and all(re.fullmatch(r"hour=[0-9-]+/part-00000-[0-9a-f-]{36}-c000"
                                                r"\.snappy\.parquet", f) for f in files), files
    expected = Counter((i % 3, i // 3, f"v{i}".encode(), hour_of(start + (i % 4) * HOUR_MS + i))
                       for i in range(120))
    assert landed(spark, str(ours)) == expected
    assert landed(spark, str(theirs)) == expected
    assert landed(spark, on_s3) == expected
    assert spark.read.parquet(str(ours)).schema == spark.read.parquet(str(theirs)).schema


def test_a_shape_that_does_not_fit_is_refused_before_the_read(
        spark: Any, kafka_config: dict[str, Any], hours: Any, tmp_path: Path) -> None:
    topic, _ = hours
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    with pytest.raises(ConfigurationError, match=re.escape(
            "takes a field of 'value', which is binary, not decoded into fields")):
        ingest(spark, ranges, kafka_config, FileSink(str(tmp_path / "x")),
               shape=Shape(["value.id"]))
    with pytest.raises(ConfigurationError, match="pass shape= or a transform= / sql=, not both"):
        ingest(spark, ranges, kafka_config, FileSink(str(tmp_path / "y")), shape=SHAPE,
               sql="SELECT * FROM kafka")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
