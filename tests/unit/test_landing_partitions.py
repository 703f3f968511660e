"""Partitioned landings by the readers (``spark/read/landing.py``, ``spark/read/transforms.py``):
Iceberg's transforms computed per row, files split by them with the column kept, each file
reporting its partition values, and the open-files bound with 1,000 partition values in one
split (``MAX_OPEN_FILES``, as shipped: nothing patched)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets import PartitionRange
from airflow_provider_kafka_spark.shaping import Derived, Shape
from airflow_provider_kafka_spark.spark.read.landing import (
    MAX_OPEN_FILES,
    ParquetFolder,
    _SplitFiles,
)
from airflow_provider_kafka_spark.spark.read.splits import Split
from airflow_provider_kafka_spark.spark.read.transforms import partition_values

UTC_US = pa.timestamp("us", tz="UTC")
HOUR_US = 3_600_000_000
VALUES = 1_000


def _texts(values: pa.Array, transform: str) -> list[str | None]:
    return partition_values(values, transform).to_pylist()


def test_time_transforms_are_icebergs_floored_before_the_epoch() -> None:
    micros = [0, 1, HOUR_US - 1, HOUR_US, -1, -HOUR_US, -HOUR_US - 1,
              1_796_371_200_000_000,  # 2026-12-04T08:00:00Z
              -86_400_000_000 * 366, None]
    ts = pa.array(micros, UTC_US)
    assert _texts(ts, "hour") == [None if m is None else str(m // HOUR_US) for m in micros]
    days = [None if m is None else dt.date(1970, 1, 1) + dt.timedelta(days=m // 86_400_000_000)
            for m in micros]
    assert _texts(ts, "day") == [None if d is None else d.isoformat() for d in days]
    assert _texts(ts, "month") == [None if d is None else str((d.year - 1970) * 12 + d.month - 1)
                                   for d in days]
    assert _texts(ts, "year") == [None if d is None else str(d.year - 1970) for d in days]
    # a timestamp without a zone, in milliseconds: the same instants
    naive = pa.array([None if m is None else m // 1000 for m in micros], pa.timestamp("ms"))
    assert _texts(naive, "hour") == _texts(ts, "hour")
    dates = pa.array(days, pa.date32())
    assert _texts(dates, "day") == _texts(ts, "day")
    assert _texts(dates, "month") == _texts(ts, "month")
    with pytest.raises(ConfigurationError, match="'hour' of a date32"):
        partition_values(dates, "hour")


def test_identity_and_truncate() -> None:
    assert _texts(pa.array(["a", None, "x/y"]), "identity") == ["a", None, "x/y"]
    assert _texts(pa.array([True, False, None]), "identity") == ["true", "false", None]
    assert _texts(pa.array([-7, 0, 7, None], pa.int64()), "identity") == ["-7", "0", "7", None]
    assert _texts(pa.array([-11, -10, -1, 0, 9, 10, None], pa.int32()), "truncate[10]") == [
        "-20", "-10", "-10", "0", "0", "10", None]
    for bad, values in (("bucket[16]", [True]), ("truncate[3]", ["abc"]), ("hour", [1])):
        with pytest.raises(ConfigurationError, match="not one the readers compute"):
            partition_values(pa.array(values), bad)


def test_bucket_is_murmur3_of_the_values_bytes_as_the_iceberg_spec_says() -> None:
    """The spec's own examples ("Appendix B: 32-bit Hash Requirements"): hash(34) =
    2017239379 for an int and a long, hash("iceberg") = 1210000089; bucket[N] is that hash's
    non-negative part mod N."""
    n = 2**31 - 1  # the buckets are the non-negative hashes themselves
    assert _texts(pa.array([34], pa.int32()), f"bucket[{n}]") == [str(2017239379 % n)]
    assert _texts(pa.array([34], pa.int64()), f"bucket[{n}]") == [str(2017239379 % n)]
    assert _texts(pa.array(["iceberg", None]), f"bucket[{n}]") == [str(1210000089 % n), None]
    # a date is its days, a timestamp its microseconds (2017-11-16, 2017-11-16T22:31:08Z)
    assert _texts(pa.array([dt.date(2017, 11, 16)], pa.date32()), f"bucket[{n}]") == [
        str(-653330422 & 0x7FFFFFFF)]
    assert _texts(pa.array([dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=dt.UTC)], UTC_US),
                  f"bucket[{n}]") == [str(-2047944441 & 0x7FFFFFFF)]
    assert _texts(pa.array([34], pa.int64()), "bucket[16]") == ["3"]


def _events(n: int, hours: int) -> pa.RecordBatch:
    """``n`` decoded records of partition 2, ``ts`` spread over ``hours`` hours."""
    start = 1_796_371_200_000_000
    return pa.record_batch({
        "key": pa.array([b"k"] * n),
        "value": pa.array([{"id": i, "ts": start // 1000 + (i % hours) * 3_600_000}
                           for i in range(n)], pa.struct([("id", pa.int64()), ("ts", pa.int64())])),
        "partition": pa.array([2] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([start + (i % hours) * HOUR_US for i in range(n)], UTC_US)})


def test_split_by_an_iceberg_transform_keeps_the_column_and_reports_each_files_values(
        tmp_path: Path) -> None:
    shape = Shape(["partition", "offset", "timestamp AS ts", "value.id"])
    folder = ParquetFolder(str(tmp_path), "zstd", shape=shape,
                           split_by=(("ts_hour", "ts", "hour"),))
    whole = PartitionRange("t", 2, 0, 30)

    [report] = folder.write(Split((whole,)), 0, [(whole, iter([_events(30, 3)]))])

    files = report.to_pylist()[0]["files"]
    first = 1_796_371_200_000_000 // HOUR_US
    assert sorted(f["partition"] for f in files) == [[str(first + h)] for h in range(3)]
    for f in files:
        assert f["name"].startswith(f"ts_hour={f['partition'][0]}/")
        table = pq.read_table(tmp_path / f["name"])
        assert table.schema.names == ["partition", "offset", "ts", "id"]  # ts kept
        assert {t.timestamp() // 3600 for t in table.column("ts").to_pylist()} == {
            int(f["partition"][0])}


def test_a_split_parquet_folder_checks_itself(tmp_path: Path) -> None:
    shape = Shape(["offset"], {"hour": Derived("timestamp", "hour")})
    for bad in ((("h", "ts", "void"),), (("h", "ts", "bucket[0]"),), (("h", "ts"),), ("h",)):
        with pytest.raises(ConfigurationError, match="split_by"):
            ParquetFolder(str(tmp_path), split_by=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="without partition_by"):
        ParquetFolder(str(tmp_path), shape=shape, partition_by=("hour",),
                      split_by=(("h", "offset", "identity"),))


@pytest.mark.parametrize("how", ["partition_by", "split_by"])
def test_a_thousand_partition_values_in_one_split_keep_at_most_max_open_files_open(
        tmp_path: Path, how: str) -> None:
    """One split of 1,000 hours (2 records each): a file per hour, every record once in its
    hour's file, and never more than ``MAX_OPEN_FILES`` (32) files open at once, however many
    values the split holds; nothing stays open after."""
    batch = _events(2 * VALUES, VALUES)
    if how == "partition_by":
        shape = Shape(["offset", "value.id"], {"hour": Derived("timestamp", "hour")})
        folder = ParquetFolder(str(tmp_path), "snappy", shape=shape, partition_by=("hour",))
    else:
        shape = Shape(["offset", "timestamp AS ts", "value.id"])
        folder = ParquetFolder(str(tmp_path), "snappy", shape=shape,
                               split_by=(("ts_hour", "ts", "hour"),))
    from airflow_provider_kafka_spark.spark.shape import shape_batch

    descriptors = len(os.listdir("/proc/self/fd"))
    files = _SplitFiles(folder, Split((PartitionRange("t", 2, 0, 2 * VALUES),)), 0)
    files.add(shape_batch(batch, shape))
    landed = files.close()

    assert files.most_open == MAX_OPEN_FILES == 32
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert len(landed) == VALUES
    assert len({f.partition for f in landed}) == VALUES
    ids = []
    for f in landed:
        table = pq.read_table(tmp_path / f.name)
        assert table.num_rows == 2
        ids += table.column("id").to_pylist()
        [value] = f.partition
        assert value is not None and f.name.split("/")[0].endswith(f"={value}")
    assert sorted(ids) == list(range(2 * VALUES))


def test_a_table_sink_answers_dead_letters_with_a_refusal() -> None:
    """``SinkInput.dead_letters`` (``on_corrupt="dead_letter"``): a table has no dead-letter
    output, so its intake refuses before anything is read; the question needs no session."""
    from airflow_provider_kafka_spark.sinks.tables import DeltaSink, IcebergSink
    from airflow_provider_kafka_spark.spark.intake import SinkInput

    given = SinkInput("x", "decoded", "python", readers_decode=True, dead_letters=True)
    for sink in (DeltaSink("/data/t", application="a", run="r"),
                 IcebergSink("lake.db.t", application="a", run="r")):
        with pytest.raises(ConfigurationError, match="takes no dead letters; ingest with "
                                                     "on_corrupt='fail' or 'skip'"):
            sink.intake(given)
