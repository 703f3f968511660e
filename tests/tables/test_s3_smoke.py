"""The tier's Spark (pyspark 4.1, Hadoop 3.4.2) on the suite's S3 server: the s3a jars of
``tools/s3/hadoop-3.4.2`` write and read ``s3a://``, committed by the S3A magic committer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools.s3_server import S3Endpoint

pytestmark = [pytest.mark.tables, pytest.mark.spark]

ROWS = [(i, f"v{i}") for i in range(25)]


def test_spark_writes_and_reads_s3a(table_spark: Any, s3_endpoint: S3Endpoint,
                                    s3_bucket: str) -> None:
    import pyarrow.parquet as pq

    path = f"s3a://{s3_bucket}/x"
    table_spark.createDataFrame(ROWS, "id long, v string").write.parquet(path)

    assert sorted(tuple(r) for r in table_spark.read.parquet(path).collect()) == ROWS
    table = pq.read_table(f"{s3_bucket}/x", filesystem=s3_endpoint.pyarrow_fs())
    assert sorted(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True)) == ROWS
    success = s3_endpoint.boto3_client().get_object(Bucket=s3_bucket, Key="x/_SUCCESS")
    assert json.loads(success["Body"].read())["committer"] == "magic"
