"""``swap.keep_only``: the step that adopts the Parquet files the readers wrote themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_kafka_spark.errors import SinkError
from airflow_provider_kafka_spark.sinks.files import swap
from airflow_provider_kafka_spark.sinks.files.filesystems import LocalFiles


def _staging(tmp_path: Path, *names: str) -> swap.Layout:
    layout = swap.Layout.of(str(tmp_path / "out"), str(tmp_path), "out", "t", lambda a, b: f"{a}/{b}")
    Path(layout.staging).mkdir()
    for name in names:
        (Path(layout.staging) / name).write_text(name)
    return layout


def test_keeps_the_reported_files_and_drops_the_rest(tmp_path: Path) -> None:
    layout = _staging(tmp_path, "part-00000-a-c000.snappy.parquet", "part-00000-b-c000.snappy.parquet",
                      "part-00001-c-c000.snappy.parquet", ".part-00000-a-c000.snappy.parquet.crc")
    swap.keep_only(LocalFiles(), [], layout, "/out",
                   ["part-00000-b-c000.snappy.parquet", "part-00001-c-c000.snappy.parquet"])
    assert sorted(p.name for p in Path(layout.staging).iterdir()) == [
        "_SUCCESS", "part-00000-b-c000.snappy.parquet", "part-00001-c-c000.snappy.parquet"]


def test_no_reported_file_keeps_the_empty_write(tmp_path: Path) -> None:
    layout = _staging(tmp_path, "part-00000-e-c000.snappy.parquet", "_SUCCESS")
    swap.keep_only(LocalFiles(), [], layout, "/out", [])
    assert sorted(p.name for p in Path(layout.staging).iterdir()) == [
        "_SUCCESS", "part-00000-e-c000.snappy.parquet"]


def test_a_reported_file_the_driver_cannot_see_is_an_error(tmp_path: Path) -> None:
    layout = _staging(tmp_path, "part-00000-a-c000.snappy.parquet")
    with pytest.raises(SinkError, match=r"lacks \['part-00001-x-c000.snappy.parquet'\].*a file "
                                        r"system every machine shares"):
        swap.keep_only(LocalFiles(), [], layout, "/out",
                       ["part-00000-a-c000.snappy.parquet", "part-00001-x-c000.snappy.parquet"])
    assert [p.name for p in Path(layout.staging).iterdir()] == ["part-00000-a-c000.snappy.parquet"]
