"""A Shape: checked when built, applied to Arrow batches of the records read (columns kept and
renamed, fields of a decoded value, partition values from a timestamp), and the partition
folders written as Spark writes them; the landing's files per partition value, with the open
files bounded (no broker, no Spark job)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets.ranges import PartitionRange
from airflow_provider_kafka_spark.shaping import Derived, Shape
from airflow_provider_kafka_spark.spark.read import landing
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder
from airflow_provider_kafka_spark.spark.read.splits import Split
from airflow_provider_kafka_spark.spark.shape import partition_path, shape_batch

UTC_US = pa.timestamp("us", tz="UTC")
H7 = int(datetime(2026, 12, 4, 7, 30, tzinfo=UTC).timestamp() * 1000)


def records(n: int = 3, *, hours: int = 1) -> pa.RecordBatch:
    """``n`` records of partition 2 whose value is decoded: ``{id, ts (ms), name}``, ``ts``
    spread over ``hours`` hours from 07:30 UTC."""
    value = pa.array([{"id": i, "ts": H7 + (i % hours) * 3_600_000, "name": f"n{i}"}
                      for i in range(n)],
                     pa.struct([("id", pa.int64()), ("ts", pa.int64()), ("name", pa.string())]))
    return pa.record_batch({
        "key": pa.array([b"k"] * n), "value": value,
        "partition": pa.array([2] * n, pa.int32()),
        "offset": pa.array(range(10, 10 + n), pa.int64()),
        "timestamp": pa.array([H7 * 1000] * n, UTC_US)})


def test_a_shape_keeps_renames_flattens_and_derives_in_order() -> None:
    shape = Shape(["partition", "offset AS kafka_offset", "value.*"],
                  {"hour": Derived("value.ts", "hour", unit="ms"),
                   "day": Derived("timestamp", "day")})

    out = shape_batch(records(3, hours=2), shape)

    assert out.schema.names == ["partition", "kafka_offset", "id", "ts", "name", "hour", "day"]
    assert out.to_pydict() == {
        "partition": [2, 2, 2], "kafka_offset": [10, 11, 12], "id": [0, 1, 2],
        "ts": [H7, H7 + 3_600_000, H7], "name": ["n0", "n1", "n2"],
        "hour": ["2026-12-04-07", "2026-12-04-08", "2026-12-04-07"],
        "day": ["2026-12-04"] * 3}


def test_a_null_value_gives_null_fields_and_a_null_partition_value() -> None:
    batch = records(2)
    value = pa.array([batch.column("value")[0].as_py(), None], batch.schema.field("value").type)
    batch = batch.set_column(1, "value", value)

    out = shape_batch(batch, Shape(["value.id"], {"month": Derived("value.ts", "month",
                                                                   unit="ms")}))

    assert out.to_pydict() == {"id": [0, None], "month": ["2026-12", None]}


@pytest.mark.parametrize(("build", "fragment"), [
    (lambda: Shape([]), "Shape: columns=[] is not valid"),
    (lambda: Shape("offset"), "Shape: columns='offset' is not valid"),
    (lambda: Shape(["offsets"]), "Shape: columns='offsets' names no column"),
    (lambda: Shape(["value.*  AS x"]), "names no column"),
    (lambda: Shape(["offset", "value.offset"]), "names columns more than once"),
    (lambda: Shape(["offset"], {"offset": Derived("timestamp", "day")}),
     "names columns more than once"),
    (lambda: Derived("timestamp", "week"), "Derived: transform='week' is not valid"),
    (lambda: Derived("value.ts", "hour", unit="ns"), "Derived: unit='ns' is not valid"),
    (lambda: Derived("value.*", "hour"), "Derived: source='value.*' is not valid"),
])
def test_a_bad_shape_is_refused_when_built(build: object, fragment: str) -> None:
    assert callable(build)
    with pytest.raises(ConfigurationError, match=re.escape(fragment)):
        build()


@pytest.mark.parametrize(("shape", "fragment"), [
    (Shape(["headers"]), "the shape's column 'headers' is not a column of the records read"),
    (Shape(["key.id"]), "takes a field of 'key', which is binary, not decoded into fields"),
    (Shape(["value.missing"]), "'value' has no field 'missing'"),
    (Shape(["offset"], {"h": Derived("value.name", "hour")}),
     "takes the hour of 'value.name', which is string"),
])
def test_a_shape_that_does_not_fit_the_records_says_why(shape: Shape, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(fragment)):
        shape_batch(records(), shape)


def test_partition_folders_are_named_as_spark_names_them() -> None:
    assert partition_path(["hour"], ["2026-12-04-07"]) == "hour=2026-12-04-07"
    assert partition_path(["a", "b"], [None, "x/y:z=1"]) == \
        "a=__HIVE_DEFAULT_PARTITION__/b=x%2Fy%3Az%3D1"
    assert partition_path(["flag", "n"], [True, 3]) == "flag=true/n=3"


def test_a_shape_round_trips_through_json() -> None:
    shape = Shape(["offset", "value.*"], {"hour": Derived("value.ts", "hour", unit="ms")})
    assert Shape.from_json(shape.to_json()) == shape


def test_the_readers_land_a_file_per_partition_value_with_the_open_files_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten hours in one split, at most three files open: a value met again after its file was
    closed gets another file; every record lands once, in its hour's folder."""
    monkeypatch.setattr(landing, "MAX_OPEN_FILES", 3)
    monkeypatch.setattr(landing, "ROW_GROUP_BYTES", 1)  # every batch a row group at once
    shape = Shape(["offset", "value.id"], {"hour": Derived("value.ts", "hour", unit="ms")})
    folder = ParquetFolder(str(tmp_path), "zstd", shape=shape, partition_by=("hour",))
    whole = PartitionRange("t", 2, 10, 50)
    batches = [records(20, hours=10), records(20, hours=10)]

    [report] = folder.write(Split((whole,)), 0, [(whole, iter(batches))])

    [row] = report.to_pylist()
    assert row["records"] == 40
    names = sorted(f["name"] for f in row["files"])
    hours = {n.split("/")[0] for n in names}
    assert hours == {f"hour=2026-12-04-{7 + h:02d}" for h in range(10)}
    assert len(names) > 10  # values met again got new files
    found = []
    for name in names:
        table = pq.read_table(tmp_path / name)
        assert table.schema.names == ["offset", "id"]
        hour = int(name.split("/")[0][-2:]) - 7
        assert all(i % 10 == hour for i in table.column("id").to_pylist())
        found += table.column("id").to_pylist()
    assert sorted(found) == sorted(list(range(20)) * 2)
    assert {f["name"]: f["size"] for f in row["files"]} == {
        n: (tmp_path / n).stat().st_size for n in names}


def test_a_derived_column_is_the_text_strftime_gives_each_value() -> None:
    """Each distinct hour (day, month, year) is formatted once and taken back per row: the
    same text as pyarrow's strftime of every value, before 1970 and nulls included."""
    import numpy as np
    import pyarrow.compute as pc

    from airflow_provider_kafka_spark.spark.shape import derive

    rng = np.random.default_rng(3)
    ms = pa.array(rng.integers(-5 * 10**12, 5 * 10**12, 5000), mask=rng.random(5000) < 0.1)
    formats = {"year": "%Y", "month": "%Y-%m", "day": "%Y-%m-%d", "hour": "%Y-%m-%d-%H"}
    for transform, text in formats.items():
        for unit, values in (("ms", ms), ("s", pc.divide(ms, 1000)), ("us", pc.multiply(ms, 1000))):
            expected = pc.strftime(pc.cast(values, pa.int64()).cast(pa.timestamp(unit, tz="UTC")),
                                   format=text, locale="C")
            assert derive(values, Derived("value.ts", transform, unit), "t").equals(expected)
        naive = ms.cast(pa.timestamp("ms"))  # a timestamp without a zone is UTC
        expected = pc.strftime(ms.cast(pa.timestamp("ms", tz="UTC")), format=text, locale="C")
        assert derive(naive, Derived("value.ts", transform), "t").equals(expected)
