"""FileSink on a real local Spark session (no broker): staging, swap, recovery of an interrupted
swap, and the checks of ``prepare`` that fail before anything is read or written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import ConfigurationError
from airflow_provider_kafka_spark.sinks import MANIFEST_NAME, FileSink, SinkError
from airflow_provider_kafka_spark.sinks.files import PREVIOUS_MARK, STAGING_MARK, swap

pytestmark = pytest.mark.spark


def frame(spark: Any, values: list[str]) -> Any:
    return spark.createDataFrame([(v,) for v in values], "v string")


def rows(spark: Any, path: Path) -> list[str]:
    return sorted(r["v"] for r in spark.read.json(str(path)).collect())


def write(spark: Any, path: Path, values: list[str], manifest: dict[str, Any]) -> FileSink:
    sink = FileSink(str(path), format="json")
    df = frame(spark, values)
    sink.prepare(spark, df.limit(0))
    sink.write(df)
    sink.commit(manifest)
    return sink


def jobs(spark: Any) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def test_commit_swaps_the_staged_folder_in(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(spark, out, ["a", "b"], {"run": 1})
    write(spark, out, ["c"], {"run": 2})
    assert rows(spark, out) == ["c"]
    assert json.loads((out / MANIFEST_NAME).read_text()) == {"run": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_prepare_restores_an_output_an_interrupted_swap_set_aside(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    write(spark, out, ["old"], {"run": 1})
    # A driver killed between the swap's two renames: the previous output waits aside, the
    # complete new one in its staging folder, and nothing is at "out".
    out.rename(tmp_path / f".out{PREVIOUS_MARK}20240501T100000-0000abcd")
    staged = tmp_path / f".out{STAGING_MARK}20240501T100000-0000abcd"
    staged.mkdir()
    (staged / "part-00000.json").write_text('{"v": "killed"}\n')

    sink = FileSink(str(out), format="json")
    sink.prepare(spark, frame(spark, []))
    assert rows(spark, out) == ["old"]  # restored before anything else
    assert "renamed it back" in caplog.text
    assert staged.exists()  # a leftover until the next successful commit

    sink.write(frame(spark, ["new"]))
    sink.commit({"run": 2})
    assert rows(spark, out) == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_failed_swap_puts_the_previous_output_back(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    write(spark, out, ["old"], {"run": 1})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rename = swap._rename

    def failing_second_rename(fs: Any, source: str, destination: str, purpose: str,
                              path: str) -> None:
        if purpose.startswith("move the new output"):
            raise SinkError("simulated: the file system refused the rename")
        rename(fs, source, destination, purpose, path)

    monkeypatch.setattr(swap, "_rename", failing_second_rename)
    sink = FileSink(str(out), format="json")
    df = frame(spark, ["new"])
    sink.prepare(spark, df.limit(0))
    sink.write(df)
    with pytest.raises(SinkError, match="simulated"):
        sink.commit({"run": 2})
    sink.abort()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_write_and_commit_need_prepare(spark: Any, tmp_path: Path) -> None:
    sink = FileSink(str(tmp_path / "out"))
    with pytest.raises(SinkError, match="without a successful prepare"):
        sink.write(frame(spark, ["a"]))
    with pytest.raises(SinkError, match="without a successful prepare"):
        sink.commit({})


@pytest.mark.parametrize(
    ("kwargs", "columns", "message"),
    [
        ({"format": "nope"}, "v string", "output format 'nope' is not a data source"),
        ({"format": "avro"}, "v string", "spark-avro"),
        ({"format": "csv"}, "v string, b array<string>",
         "could not write an empty DataFrame with the output's columns"),
        ({"partition_by": ["missing"]}, "v string", "Partition column `missing` not found"),
        ({"options": {"compression": "bogus"}}, "v string", "bogus"),
    ],
)
def test_prepare_rejects_what_spark_would_reject_after_the_read(
        spark: Any, tmp_path: Path, kwargs: dict[str, Any], columns: str, message: str) -> None:
    out = tmp_path / "new" / "out"
    ran = jobs(spark)
    sink = FileSink(str(out), **kwargs)
    with pytest.raises(ConfigurationError, match=message):
        sink.prepare(spark, spark.createDataFrame([], columns))
    assert list(tmp_path.iterdir()) == []  # no staging folder, not even the parent "new"
    if kwargs.get("format") in ("nope", "avro"):
        assert jobs(spark) == ran  # looked up on the driver: no Spark job


def test_prepare_rejects_a_file_a_root_and_a_path_below_a_file(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    empty = frame(spark, [])
    with pytest.raises(ConfigurationError, match="is a file; pass a folder"):
        FileSink(str(tmp_path / "a-file")).prepare(spark, empty)
    with pytest.raises(ConfigurationError, match="is the root of its file system"):
        FileSink("/").prepare(spark, empty)
    with pytest.raises(ConfigurationError, match="Parent path is not a directory"):
        FileSink(str(tmp_path / "a-file" / "out")).prepare(spark, empty)
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": " "}, "path=' ' is not valid; pass the folder"),
        ({"path": "/x", "format": ""}, "format='' is not valid; pass a Spark data source name"),
        ({"path": "/x", "format": "par quet"}, "format='par quet'"),
        ({"path": "/x", "options": {"a": [1]}}, "options=.* pass a dict of Spark writer options"),
        ({"path": "/x", "partition_by": "k"}, r"partition_by='k' .* \(a list even for one column\)"),
    ],
)
def test_file_sink_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        FileSink(**kwargs)
