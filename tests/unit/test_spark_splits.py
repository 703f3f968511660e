"""Split planning, option encoding and helpers of the Spark layer (no broker, no Spark job)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import ProducerFencedError, executor_error
from airflow_provider_kafka_spark.offsets import ConfigurationError, DataLossError, PartitionRange
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.spark import KafkaReadError, plan_splits, spark_kafka_package
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder
from airflow_provider_kafka_spark.spark.read.sources import kafka_options
from airflow_provider_kafka_spark.spark.read.splits import (
    MIN_RECORDS_PER_SPLIT,
    Split,
    cut_ranges,
    default_max_records_per_split,
)
from airflow_provider_kafka_spark.spark.session import _artifact


def test_one_split_per_non_empty_range_by_default() -> None:
    ranges = [PartitionRange("b", 0, 0, 10), PartitionRange("a", 1, 5, 5),
              PartitionRange("a", 0, 3, 4)]
    assert plan_splits(ranges) == [Split((PartitionRange("a", 0, 3, 4),)),
                                   Split((PartitionRange("b", 0, 0, 10),))]


@pytest.mark.parametrize("size,limit,expected", [
    (10, 10, [(0, 10)]),
    (11, 10, [(0, 5), (5, 11)]),
    (100, 30, [(0, 25), (25, 50), (50, 75), (75, 100)]),
    (7, 1, [(i, i + 1) for i in range(7)]),
])
def test_pieces_are_contiguous_and_cover_the_range(size: int, limit: int,
                                                   expected: list[tuple[int, int]]) -> None:
    pieces = cut_ranges([PartitionRange("t", 2, 1000, 1000 + size)], limit)
    assert [(s.start - 1000, s.stop - 1000) for s in pieces] == expected
    assert all(s.size <= limit for s in pieces)
    # one partition: each piece is a split of its own
    assert plan_splits([PartitionRange("t", 2, 1000, 1000 + size)], limit) == [
        Split((piece,)) for piece in pieces]


def test_every_offset_exactly_once_for_many_shapes() -> None:
    for size in range(0, 60):
        for limit in range(1, 13):
            splits = plan_splits([PartitionRange("t", 0, 7, 7 + size)], limit)
            covered = [o for s in splits for r in s.ranges for o in range(r.start, r.stop)]
            assert covered == list(range(7, 7 + size))
            assert all(0 < s.size <= limit for s in splits)


def test_small_ranges_of_many_partitions_share_a_split_up_to_the_size() -> None:
    ranges = [PartitionRange(topic, p, 100, 100 + 1_000) for topic in ("b", "a")
              for p in reversed(range(500))]
    splits = plan_splits(ranges, 500_000)
    assert [len(s.ranges) for s in splits] == [500, 500]
    assert [s.size for s in splits] == [500_000, 500_000]
    assert splits[0].ranges[0] == PartitionRange("a", 0, 100, 1_100)
    assert splits[1].ranges[-1] == PartitionRange("b", 499, 100, 1_100)
    # the same ranges in another order give the same splits, and the same names
    again = plan_splits(list(reversed(ranges)), 500_000)
    assert again == splits
    assert [s.name() for s in again] == [s.name() for s in splits]
    assert splits[0].name().startswith("a-0-100-1100-n500-")
    assert splits[0].name() != splits[1].name()
    assert Split((PartitionRange("t", 3, 5, 9),)).name() == "t-3-5-9"


def test_a_split_never_holds_two_pieces_of_one_partition_and_keeps_the_size() -> None:
    ranges = [PartitionRange("t", 0, 0, 25), PartitionRange("t", 1, 0, 3),
              PartitionRange("t", 2, 0, 4), PartitionRange("u", 0, 0, 9)]
    splits = plan_splits(ranges, 10)
    assert [[(r.topic, r.partition, r.start, r.stop) for r in s.ranges] for s in splits] == [
        [("t", 0, 0, 8)], [("t", 0, 8, 16)], [("t", 0, 16, 25), ], [("t", 1, 0, 3),
                                                                     ("t", 2, 0, 4)],
        [("u", 0, 0, 9)]]
    for s in splits:
        assert len({(r.topic, r.partition) for r in s.ranges}) == len(s.ranges)
        assert s.size <= 10


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_invalid_split_size(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_records_per_split"):
        plan_splits([PartitionRange("t", 0, 0, 1)], bad)  # type: ignore[arg-type]


def test_default_split_size_uses_every_core() -> None:
    assert default_max_records_per_split(10_000_000, 8) == 1_250_000
    assert default_max_records_per_split(1_000, 8) == MIN_RECORDS_PER_SPLIT
    one_huge = plan_splits([PartitionRange("t", 0, 0, 4_000_000)],
                           default_max_records_per_split(4_000_000, 4))
    assert len(one_huge) == 4


def test_kafka_options_are_the_native_settings_prefixed() -> None:
    config = KafkaConfig({"bootstrap.servers": "h:1", "enable.idempotence": True,
                          "fetch.max.bytes": 1024})
    assert kafka_options(config.native()) == {
        "kafka.bootstrap.servers": "h:1", "kafka.enable.idempotence": "true",
        "kafka.fetch.max.bytes": "1024"}
    with pytest.raises(ConfigurationError, match=r"kafka_config\['error_cb'\] is a function"):
        KafkaConfig({"bootstrap.servers": "h:1", "error_cb": lambda e: None}).native()


def test_executor_errors_are_recognised_in_spark_tracebacks() -> None:
    text = ("PythonException: An exception was thrown from the Python worker:\n"
            "Traceback (most recent call last):\n  ...\n"
            "airflow_provider_kafka_spark.errors.DataLossError: data loss in t.x-1/3 "
            "[0, 9): gone. [lost: t.x-1/3=4]\n\tat org.apache.spark...")
    error = executor_error(text)
    assert isinstance(error, DataLossError)
    assert error.lost == {("t.x-1", 3): 4}
    assert str(error) == "data loss in t.x-1/3 [0, 9): gone. [lost: t.x-1/3=4]"
    stalled = executor_error("spark.errors.KafkaReadError: reading t/0 made no progress\n")
    assert isinstance(stalled, KafkaReadError)
    assert executor_error("ValueError: something else") is None
    fenced = executor_error("x.write_errors.ProducerFencedError: another producer took over\n")
    assert isinstance(fenced, ProducerFencedError)


def test_jar_artifact_names_and_package() -> None:
    assert _artifact("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert _artifact("kafka-clients-3.9.2.jar") == "kafka-clients"
    assert _artifact("snappy-java-1.1.10.5.jar") == "snappy-java"
    assert spark_kafka_package("4.3.0") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0"


@pytest.mark.parametrize(("path", "compression", "fragment"), [
    ("relative/folder", "snappy", "pass an absolute local folder"),
    (None, "snappy", "pass an absolute local folder"),
    ("/tmp/land", "lzo", "use one of ('snappy', "),
])
def test_a_parquet_folder_checks_itself(path: object, compression: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(fragment)):
        ParquetFolder(path, compression)  # type: ignore[arg-type]


def test_a_parquet_folder_stamps_its_constant_columns_and_removes_its_files(tmp_path: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = ParquetFolder(str(tmp_path), "zstd", constants=(("_kafka_spark_write", "a/b/0/c"),))
    def batch(offsets: list[int]) -> pa.RecordBatch:
        return pa.record_batch({
            "key": pa.array([b"k"] * len(offsets)), "value": pa.array([b"v"] * len(offsets)),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array(offsets, pa.timestamp("us", tz="UTC"))})

    batches = [batch([10, 11]), batch([12])]
    whole = PartitionRange("t", 0, 10, 13)
    report = next(folder.write(Split((whole,)), 0, iter([(whole, iter(batches))])))
    row = report.to_pylist()[0]
    assert (row["records"], row["first_offset"], row["last_offset"]) == (3, 10, 12)
    row["file"] = row["files"][0]["name"]
    # named as Spark names its part files: the split's index, a UUID, the file's count
    assert re.fullmatch(r"part-00000-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-c000\.zstd\.parquet",
                        row["file"]), row["file"]
    written = pq.read_table(folder.location(row["file"]))
    assert written.column("offset").to_pylist() == [10, 11, 12]
    assert written.column("_kafka_spark_write").to_pylist() == ["a/b/0/c"] * 3
    statistics = pq.read_metadata(folder.location(row["file"])).row_group(0).column(4).statistics
    assert (statistics.min, statistics.max) == ("a/b/0/c", "a/b/0/c")
    folder.remove([row["file"], "absent.parquet"])
    assert list(tmp_path.iterdir()) == []


def test_a_parquet_folder_refuses_constants_that_are_not_string_pairs(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="constants="):
        ParquetFolder(str(tmp_path), constants=(("c", 1),))  # type: ignore[arg-type]
