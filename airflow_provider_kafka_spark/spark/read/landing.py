"""Landing a slice as Parquet in the readers themselves: each ``kafka_bounded`` task writes the
Arrow batches of its split (one or more partition ranges) into one Parquet file as they come
from the native reader, and returns one row per range that reports its counts (the file on the
row of the split's first range). The records never become Spark
rows, so the JVM does no work per record.

:func:`land_kafka` is what :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` runs for
a sink that takes such files (``FileSink`` with Parquet, no ``partition_by``, on a local file
system or S3) when there is nothing to decode or transform. A local folder is the sink's
staging folder: a failed or repeated task may leave a file there that no report names, which
the sink deletes before its commit (:meth:`Landing.files`). On S3 the objects go straight to
their final keys, named by their split (``part-<topic>-<partition>-<start>-<stop>``, with
``-n<ranges>-<digest>`` for a split of several ranges:
:meth:`~airflow_provider_kafka_spark.spark.read.splits.Split.name`; a retry or a re-run of the
pinned slice rewrites the same keys), each complete or not at all
(:class:`~airflow_provider_kafka_spark.s3.ObjectUpload`); the sink's publish makes them the
run's.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets.ranges import PartitionRange
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.s3 import ObjectUpload, S3Settings, is_s3, split_s3
from airflow_provider_kafka_spark.spark.read.splits import Split
from airflow_provider_kafka_spark.spark.read.summary import PartitionSummary, SplitCounts, combine

PARQUET_CODECS = ("snappy", "gzip", "zstd", "lz4", "brotli", "none", "uncompressed")
"""Spark's Parquet ``compression`` names that pyarrow writes too."""

ROW_GROUP_BYTES = 64 * 1024 * 1024
"""A task buffers its batches into row groups of about this many bytes (Arrow's size) before
writing them: the memory a task holds, whatever the size of the slice."""

REPORT_SCHEMA = StructType([
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("start", LongType()), StructField("records", LongType()),
    StructField("first_offset", LongType()), StructField("last_offset", LongType()),
    StructField("min_us", LongType()), StructField("max_us", LongType()),
    StructField("bytes", LongType()), StructField("file", StringType()),
    StructField("file_size", LongType()), StructField("modified_ms", LongType()),
    StructField("footer", BinaryType()),
])
"""One row per range of a landing read: its counts and, on the row of its split's first range,
the file the split wrote (``file`` None: no records, or not the first range), with what
:class:`LandedFile` holds of it."""

_ARROW_REPORT = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("start", pa.int64()),
    ("records", pa.int64()), ("first_offset", pa.int64()), ("last_offset", pa.int64()),
    ("min_us", pa.int64()), ("max_us", pa.int64()), ("bytes", pa.int64()), ("file", pa.string()),
    ("file_size", pa.int64()), ("modified_ms", pa.int64()), ("footer", pa.binary()),
])


@dataclass(frozen=True)
class LandedFile:
    """A file a reader wrote into a landing folder, as its report says: its ``name`` in the
    folder, its ``size`` in bytes, when it was written (``modified_ms``, milliseconds since the
    epoch), and its Parquet ``footer`` as a footer-only Parquet file (``PAR1``, the Thrift
    ``FileMetaData``, its length, ``PAR1``: what the writer put at the file's end), so that a
    table's commit has each file's statistics without reading it back from the store."""

    name: str
    size: int
    modified_ms: int
    footer: bytes

    def metadata(self) -> pq.FileMetaData:
        """The footer as pyarrow reads it."""
        return pq.read_metadata(pa.BufferReader(self.footer))


def _footer_file(metadata: pq.FileMetaData) -> bytes:
    out = pa.BufferOutputStream()
    metadata.write_metadata_file(out)
    return out.getvalue().to_pybytes()


@dataclass(frozen=True)
class ParquetFolder:
    """A folder the readers write Parquet files into, with the codec (Spark's name): an
    absolute local path, or ``s3://bucket/prefix`` with the :class:`S3Settings` to reach it.
    ``constants``: ``(name, value)`` string columns every file gets after the records' columns,
    the same value in every row (a table sink's write id: one dictionary entry per file).

    Raises:
        ConfigurationError: ``path`` is neither, ``compression`` is not one of
            :data:`PARQUET_CODECS`, or ``constants`` are not pairs of strings.
    """

    path: str
    compression: str = "snappy"
    s3: S3Settings | None = None
    constants: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        local = isinstance(self.path, str) and self.path.startswith("/")
        if not local and not (isinstance(self.path, str) and is_s3(self.path)
                              and isinstance(self.s3, S3Settings)):
            raise ConfigurationError(f"ParquetFolder path={shown(self.path)} is not valid; pass "
                                     "an absolute local folder, or an s3:// folder with s3=.")
        if self.compression not in PARQUET_CODECS:
            raise ConfigurationError(f"ParquetFolder compression={shown(self.compression)} is "
                                     f"not valid; use one of {PARQUET_CODECS}.")
        if not (isinstance(self.constants, tuple) and all(
                isinstance(c, tuple) and len(c) == 2 and all(isinstance(v, str) for v in c)
                for c in self.constants)):
            raise ConfigurationError(f"ParquetFolder constants={shown(self.constants)} is not "
                                     "valid; pass a tuple of (name, value) string pairs.")

    def location(self, name: str) -> str:
        """Where the file ``name`` of the folder is: a local path, or an ``s3://`` URI."""
        return f"{self.path.rstrip('/')}/{name}"

    def remove(self, names: Iterable[str]) -> None:
        """Delete the files ``names`` of the folder (those missing are fine)."""
        names = list(names)
        if self.s3 is None:
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.path, name))
            return
        bucket, prefix = split_s3(self.path)
        client = self.s3.client()
        for name in names:
            client.delete_object(Bucket=bucket, Key=f"{prefix}/{name}".lstrip("/"))

    def _stamped(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        for name, value in self.constants:  # indices all 0: one dictionary entry, one run
            batch = batch.append_column(name, pa.DictionaryArray.from_arrays(
                pa.repeat(pa.scalar(0, pa.int32()), batch.num_rows), pa.array([value], pa.string())))
        return batch

    def write(self, split: Split, index: int,
              ranges: Iterable[tuple[PartitionRange, Iterable[pa.RecordBatch]]]
              ) -> Iterator[pa.RecordBatch]:
        """Write the batches of each range of ``split`` (the ``index``-th of the read) into one
        new file of the folder; yield the report (a row per range)."""
        codec = "none" if self.compression == "uncompressed" else self.compression
        suffix = "parquet" if codec == "none" else f"{codec}.parquet"
        upload: ObjectUpload | None = None
        if self.s3 is not None:  # the split's own key: a retry rewrites it
            name = f"part-{split.name()}.{suffix}"
            bucket, prefix = split_s3(self.path)
            upload = ObjectUpload(self.s3.client(), bucket, f"{prefix}/{name}".lstrip("/"))
            path: Any = upload
        else:  # named as Spark names its part files (the split's index, a UUID, the codec)
            name = f"part-{index:05d}-{uuid.uuid4()}-c000.{suffix}"
            path = os.path.join(self.path, name)
        counted: list[tuple[PartitionRange, SplitCounts]] = []
        writer = None
        landed: LandedFile | None = None
        group: list[pa.RecordBatch] = []  # the next row group, written once about ROW_GROUP_BYTES

        def flush() -> None:
            table = pa.Table.from_batches(group)
            assert writer is not None
            writer.write_table(table, row_group_size=table.num_rows)
            group.clear()

        try:
            for r, batches in ranges:
                counts = SplitCounts()
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    counts = counts.add(batch)
                    batch = self._stamped(batch)
                    if writer is None:
                        writer = pq.ParquetWriter(path, batch.schema, compression=codec)
                    group.append(batch)
                    if sum(b.nbytes for b in group) >= ROW_GROUP_BYTES:
                        flush()
                counted.append((r, counts))
            if group:
                flush()
            if writer is not None:
                writer.close()
                if upload is not None:
                    upload.finish()
                    size = upload.size
                else:
                    size = os.path.getsize(path)
                landed = LandedFile(name, size, int(time.time() * 1000),
                                    _footer_file(writer.writer.metadata))
        except BaseException:
            if upload is not None:  # nothing appears at the key (the writer is dropped)
                upload.cancel()
            elif writer is not None:
                writer.close()
            raise
        rows: list[dict[str, Any]] = [{"topic": r.topic, "partition": r.partition, "start": r.start,
                 "records": counts.records, "first_offset": counts.first_offset,
                 "last_offset": counts.last_offset, "min_us": counts.min_us,
                 "max_us": counts.max_us, "bytes": counts.bytes} for r, counts in counted]
        if landed is not None:  # no records: no file, these stay null
            rows[0].update({"file": landed.name, "file_size": landed.size,
                            "modified_ms": landed.modified_ms, "footer": landed.footer})
        yield pa.RecordBatch.from_pylist(rows, schema=_ARROW_REPORT)


@dataclass(frozen=True)
class Landing:
    """What a landing read reported: per range, its counts, and per split its file."""

    reports: tuple[Mapping[str, Any], ...]

    def files(self) -> list[LandedFile]:
        """The files the successful tasks wrote (in the folder), by name."""
        return sorted((LandedFile(r["file"], r["file_size"], r["modified_ms"], bytes(r["footer"]))
                       for r in self.reports if r["file"]), key=lambda f: f.name)

    def summaries(self) -> list[PartitionSummary]:
        """The per-partition statistics, as :func:`~airflow_provider_kafka_spark.spark.
        summarize` gives them."""
        return combine(((r["topic"], r["partition"]), SplitCounts(
            r["records"], r["first_offset"], r["last_offset"], r["min_us"], r["max_us"],
            r["bytes"])) for r in self.reports)


def land_kafka(reads: DataFrame) -> Landing:
    """Run the landing read ``reads`` (``read_kafka(..., land=ParquetFolder(...))``)."""
    return Landing(tuple(row.asDict() for row in reads.collect()))
