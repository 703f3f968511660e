"""What a reader that lands a split as Parquet reports of its file (``ParquetFolder.write``,
:class:`~airflow_provider_kafka_spark.spark.read.landing.LandedFile`), locally and on the S3
server: the file's name, its size and its footer exactly as they are in the folder, so that a
table's commit takes each file's statistics from the report and reads no file back."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_kafka_spark.offsets.ranges import PartitionRange
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder
from airflow_provider_kafka_spark.spark.read.splits import Split
from airflow_provider_kafka_spark.spark.schema import kafka_schema, utc_arrow_schema

pytestmark = [pytest.mark.integration]

WRITE_ID = "app/run/0/abc"


def batches(start: int, count: int, per_batch: int) -> list[pa.RecordBatch]:
    """Records ``start`` .. ``start + count - 1`` of partition 3, as the native reader hands
    them on; every tenth key null."""
    schema = utc_arrow_schema(kafka_schema(False))
    out = []
    for first in range(start, start + count, per_batch):
        offsets = range(first, min(first + per_batch, start + count))
        out.append(pa.RecordBatch.from_pydict({
            "key": [None if o % 10 == 0 else f"k{o}".encode() for o in offsets],
            "value": [f"value {o}".encode() * 3 for o in offsets],
            "topic": ["orders"] * len(offsets),
            "partition": [3] * len(offsets),
            "offset": list(offsets),
            "timestamp": [datetime.fromtimestamp(1_764_000_000 + o, UTC) for o in offsets],
            "timestampType": [0] * len(offsets),
        }, schema=schema))
    return out


def comparable(metadata: pq.FileMetaData) -> dict[str, Any]:
    """A footer as a dict, but the size of its own serialization (pyarrow's writer leaves it
    0 in what it returns; a footer read from a file has it)."""
    shown = metadata.to_dict()
    shown.pop("serialized_size")
    return shown


def land(folder: ParquetFolder) -> dict[str, Any]:
    whole = PartitionRange("orders", 3, 100, 2_600)
    report = pa.Table.from_batches(list(folder.write(
        Split((whole,)), 7, [(whole, batches(100, 2_500, 400))])))
    assert report.num_rows == 1
    row = report.to_pylist()[0]
    (landed,) = row.pop("files")  # one file of the split, on its (first) range's row
    return {**row, "file": landed["name"], "file_size": landed["size"],
            "footer": landed["footer"]}


def test_a_local_files_report_is_its_size_and_footer(tmp_path: Path) -> None:
    folder = ParquetFolder(str(tmp_path), "zstd", constants=(("_kafka_spark_write", WRITE_ID),))
    row = land(folder)

    (name,) = os.listdir(tmp_path)
    assert row["file"] == name and row["records"] == 2_500
    assert row["file_size"] == (tmp_path / name).stat().st_size
    on_disk = pq.read_metadata(tmp_path / name)
    assert comparable(pq.read_metadata(pa.BufferReader(row["footer"]))) == comparable(on_disk)
    assert on_disk.num_rows == 2_500
    offsets = on_disk.row_group(0).column(on_disk.schema.names.index("offset")).statistics
    assert (offsets.min, offsets.max) == (100, 2_599)


def test_an_objects_report_is_its_size_and_footer(s3_endpoint: Any, s3_bucket: str) -> None:
    settings = S3Settings(endpoint_url=s3_endpoint.url, region=s3_endpoint.region,
                          access_key=s3_endpoint.access_key, secret_key=s3_endpoint.secret_key,
                          path_style=True)
    folder = ParquetFolder(f"s3://{s3_bucket}/t/landing", "zstd", settings,
                           (("_kafka_spark_write", WRITE_ID),))
    row = land(folder)

    key = f"t/landing/{row['file']}"
    body = s3_endpoint.boto3_client().get_object(Bucket=s3_bucket, Key=key)["Body"].read()
    assert row["file_size"] == len(body)
    stored = pq.read_metadata(pa.BufferReader(body))
    assert comparable(pq.read_metadata(pa.BufferReader(row["footer"]))) == comparable(stored)
    assert stored.num_rows == 2_500
