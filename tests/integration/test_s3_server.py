"""The suite's S3 server (versitygw, ``tools/s3_server.py``) and the s3a jars on the ``spark``
session: Spark writes and reads ``s3a://``, pyarrow reads the same objects, conditional PUTs
lose with 412, and ``scripts/s3`` starts, reports and stops a server by pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.processes import alive
from tools.s3_server import S3Endpoint, local_s3

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "s3"
ROWS = [(i, f"v{i}") for i in range(25)]


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def _status(error: Any) -> tuple[int, str]:
    return error.response["ResponseMetadata"]["HTTPStatusCode"], error.response["Error"]["Code"]


@pytest.mark.spark
def test_spark_writes_and_reads_s3a_and_pyarrow_reads_the_objects(
        spark: Any, s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    import pyarrow.parquet as pq

    spark.createDataFrame(ROWS, "id long, v string").write.parquet(f"s3a://{s3_bucket}/x")

    assert sorted(tuple(r) for r in spark.read.parquet(f"s3a://{s3_bucket}/x").collect()) == ROWS
    table = pq.read_table(f"{s3_bucket}/x", filesystem=s3_endpoint.pyarrow_fs())
    assert sorted(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True)) == ROWS
    # spark-hadoop-cloud is on the classpath: Spark committed with the S3A magic committer,
    # whose _SUCCESS is a JSON manifest naming it (FileOutputCommitter's is empty).
    client = s3_endpoint.boto3_client()
    success = json.loads(client.get_object(Bucket=s3_bucket, Key="x/_SUCCESS")["Body"].read())
    assert success["committer"] == "magic"
    assert sorted(success["filenames"]) == sorted(
        f"/x/{o['Key'].split('/', 1)[1]}" for o in client.list_objects_v2(
            Bucket=s3_bucket, Prefix="x/part-")["Contents"])


def test_conditional_puts_lose_with_412(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    from botocore.exceptions import ClientError

    client = s3_endpoint.boto3_client()
    first = client.put_object(Bucket=s3_bucket, Key="manifest.json", Body=b"one",
                              IfNoneMatch="*")
    with pytest.raises(ClientError) as lost:
        client.put_object(Bucket=s3_bucket, Key="manifest.json", Body=b"two", IfNoneMatch="*")
    assert _status(lost.value) == (412, "PreconditionFailed")
    assert client.get_object(Bucket=s3_bucket, Key="manifest.json")["Body"].read() == b"one"

    changed = client.put_object(Bucket=s3_bucket, Key="manifest.json", Body=b"three",
                                IfMatch=first["ETag"])
    with pytest.raises(ClientError) as stale:
        client.put_object(Bucket=s3_bucket, Key="manifest.json", Body=b"four",
                          IfMatch=first["ETag"])
    assert _status(stale.value) == (412, "PreconditionFailed")
    got = client.get_object(Bucket=s3_bucket, Key="manifest.json")
    assert (got["Body"].read(), got["ETag"]) == (b"three", changed["ETag"])


def test_script_starts_reports_and_stops_by_pid(tmp_path: Path) -> None:
    run_dir = tmp_path / "s3"
    started = _script("start", str(run_dir))
    assert started.returncode == 0, started.stderr
    endpoint = json.loads(started.stdout)
    pid = int((run_dir / "versitygw.pid").read_text())
    try:
        assert sorted(endpoint) == ["access_key", "region", "secret_key", "url"]
        S3Endpoint(**endpoint).create_bucket("kept-bucket")
        status = _script("status", str(run_dir))
        assert status.returncode == 0 and json.loads(status.stdout) == endpoint
        assert _script("start", str(run_dir)).stdout == started.stdout  # already running
    finally:
        assert _script("stop", str(run_dir)).returncode == 0
    assert not alive(pid)
    assert _script("status", str(run_dir)).returncode == 3
    assert (run_dir / "data" / "kept-bucket").is_dir()  # the objects stay


def test_sidecar_metadata_where_xattrs_are_missing(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file system takes no user xattrs (ramfs, some NFS and FUSE mounts: versitygw
    then refuses to start, "xattrs are not supported on this filesystem"), object metadata,
    here the ETag that If-Match compares, lives in a sidecar folder."""
    import errno

    from tools.s3_server import start, stop

    def unsupported(*args: Any) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    run_dir = tmp_path / "s3"
    try:
        with monkeypatch.context() as patch:  # start()'s probe: no user xattrs here
            patch.setattr(os, "setxattr", unsupported)
            endpoint = start(run_dir)
        endpoint.create_bucket("side")
        client = endpoint.boto3_client()
        put = client.put_object(Bucket="side", Key="k", Body=b"x", IfNoneMatch="*")
        assert client.head_object(Bucket="side", Key="k")["ETag"] == put["ETag"]
        assert os.listxattr(run_dir / "data" / "side" / "k") == []
        assert any(p.is_file() for p in (run_dir / "sidecar").rglob("*"))
    finally:
        stop(run_dir)


def test_local_s3_stops_the_server_when_the_block_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), local_s3(tmp_path / "s3"):
        pid = int((tmp_path / "s3" / "versitygw.pid").read_text())
        raise RuntimeError("boom")
    assert not alive(pid)
