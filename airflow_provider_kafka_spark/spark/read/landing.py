"""Landing a slice as Parquet in the readers themselves: each ``kafka_bounded`` task writes the
Arrow batches of its split (one or more partition ranges) into one Parquet file as they come
from the native reader, and returns one row per range that reports its counts (the file on the
row of the split's first range). The records never become Spark
rows, so the JVM does no work per record.

:func:`land_kafka` is what :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` runs for
a sink that takes such files (``FileSink`` with Parquet, on a local file system or S3) when
there is nothing to transform: the readers decode the records themselves
(:mod:`~airflow_provider_kafka_spark.spark.read.marking`, the folder's ``decoding``), apply
``on_corrupt`` (``dead_letter``: the corrupt records as read into ``_dead_letter/`` files),
shape them and write a folder per partition value. A local folder is the sink's
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
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
from airflow_provider_kafka_spark.options import DEAD_LETTER_FOLDER, ON_CORRUPT
from airflow_provider_kafka_spark.s3 import ObjectUpload, S3Settings, is_s3, split_s3
from airflow_provider_kafka_spark.shaping import Shape
from airflow_provider_kafka_spark.spark.read.marking import (
    MARK_COLUMNS,
    LeftToSpark,
    ReaderDecoding,
    dead_letters,
)
from airflow_provider_kafka_spark.spark.read.splits import Split
from airflow_provider_kafka_spark.spark.read.summary import PartitionSummary, SplitCounts, combine
from airflow_provider_kafka_spark.spark.read.transforms import is_transform, partition_values
from airflow_provider_kafka_spark.spark.shape import partition_path, shape_batch

PARQUET_CODECS = ("snappy", "gzip", "zstd", "lz4", "brotli", "none", "uncompressed")
"""Spark's Parquet ``compression`` names that pyarrow writes too."""

ROW_GROUP_BYTES = 64 * 1024 * 1024
"""A task buffers its batches into row groups of about this many bytes (Arrow's size) before
writing them: the memory a task holds, whatever the size of the slice."""

MAX_OPEN_FILES = 32
"""A task that lands records partitioned by value keeps at most this many files open; the file
of the value written to least recently is closed for a new one (a value met again later gets
another file). With :data:`ROW_GROUP_BYTES` this bounds a task's memory, whatever the number
of partition values in its split."""

_FILE_TYPE = StructType([
    StructField("name", StringType()), StructField("size", LongType()),
    StructField("modified_ms", LongType()), StructField("footer", BinaryType()),
    StructField("partition", ArrayType(StringType()))])

REPORT_SCHEMA = StructType([
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("start", LongType()), StructField("records", LongType()),
    StructField("first_offset", LongType()), StructField("last_offset", LongType()),
    StructField("min_us", LongType()), StructField("max_us", LongType()),
    StructField("bytes", LongType()), StructField("files", ArrayType(_FILE_TYPE)),
    StructField("corrupt", LongType()), StructField("corrupt_offset", LongType()),
    StructField("corrupt_reason", StringType()), StructField("left_to_spark", LongType()),
])
"""One row per range of a landing read: its counts and, on the row of its split's first range,
the files the split wrote (null on the other rows; empty: no records), each with what
:class:`LandedFile` holds of it. With decoding: the records that could not be decoded, the
first one's offset and reason (null without), and the records only Spark's path decodes
exactly (``left_to_spark``: the split wrote no more after the first)."""

_ARROW_FILE = pa.struct([("name", pa.string()), ("size", pa.int64()),
                         ("modified_ms", pa.int64()), ("footer", pa.binary()),
                         ("partition", pa.list_(pa.string()))])
_ARROW_REPORT = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("start", pa.int64()),
    ("records", pa.int64()), ("first_offset", pa.int64()), ("last_offset", pa.int64()),
    ("min_us", pa.int64()), ("max_us", pa.int64()), ("bytes", pa.int64()),
    ("files", pa.list_(_ARROW_FILE)), ("corrupt", pa.int64()), ("corrupt_offset", pa.int64()),
    ("corrupt_reason", pa.string()), ("left_to_spark", pa.int64()),
])


@dataclass(frozen=True)
class LandedFile:
    """A file a reader wrote into a landing folder, as its report says: its ``name`` in the
    folder, its ``size`` in bytes, when it was written (``modified_ms``, milliseconds since the
    epoch), and its Parquet ``footer`` as a footer-only Parquet file (``PAR1``, the Thrift
    ``FileMetaData``, its length, ``PAR1``: what the writer put at the file's end), so that a
    table's commit has each file's statistics without reading it back from the store.
    ``partition``: the file's partition values, one per column of the folder's
    ``partition_by`` (the text of its folder's ``name=value``, unescaped; None for a null) or
    of its ``split_by`` (Iceberg's partition value text,
    :func:`~airflow_provider_kafka_spark.spark.read.transforms.partition_values`); empty for
    an unpartitioned file or a dead letters' file."""

    name: str
    size: int
    modified_ms: int
    footer: bytes
    partition: tuple[str | None, ...] = ()

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
    ``shape``: the columns the files hold, applied to each batch
    (:func:`~airflow_provider_kafka_spark.spark.shape.shape_batch`); ``partition_by``: columns
    of the shape whose values name the files' folders (``hour=2026-12-04-07/``), as Spark's
    ``partitionBy`` writes them: the files hold the other columns. ``split_by``: instead,
    ``(name, column, transform)`` triples of an Iceberg partition spec: rows go into files by
    the Iceberg ``transform`` (:mod:`~airflow_provider_kafka_spark.spark.read.transforms`) of
    the written ``column``, which the files keep; a file's folder is ``name=value/`` and its
    :attr:`LandedFile.partition` the values.

    Raises:
        ConfigurationError: ``path`` is neither, ``compression`` is not one of
            :data:`PARQUET_CODECS`, ``constants`` are not pairs of strings, or
            ``partition_by`` without a shape that makes those columns, ``split_by`` that is
            not such triples (or with ``partition_by``).
    """

    path: str
    compression: str = "snappy"
    s3: S3Settings | None = None
    constants: tuple[tuple[str, str], ...] = ()
    shape: Shape | None = None
    partition_by: tuple[str, ...] = ()
    decoding: ReaderDecoding | None = None
    on_corrupt: str = "fail"
    split_by: tuple[tuple[str, str, str], ...] = ()

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
        if self.partition_by and (self.shape is None or not isinstance(self.partition_by, tuple)
                                  or not set(self.partition_by) <= set(self.shape.names())):
            raise ConfigurationError(f"ParquetFolder partition_by={shown(self.partition_by)} is "
                                     "not valid; pass a tuple of columns the shape makes.")
        if not (isinstance(self.split_by, tuple) and all(
                isinstance(s, tuple) and len(s) == 3 and all(isinstance(v, str) and v for v in s)
                and is_transform(s[2]) for s in self.split_by)) or (
                self.split_by and self.partition_by):
            raise ConfigurationError(f"ParquetFolder split_by={shown(self.split_by)} is not "
                                     "valid; pass (name, column, transform) triples of an "
                                     "Iceberg partition spec, without partition_by.")
        if self.on_corrupt not in ON_CORRUPT:
            raise ConfigurationError(f"ParquetFolder on_corrupt={shown(self.on_corrupt)} is not "
                                     f"valid; use one of {ON_CORRUPT}.")

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
        """Write the batches of each range of ``split`` (the ``index``-th of the read), shaped,
        into new files of the folder: one, or one per partition value (at most
        :data:`MAX_OPEN_FILES` open at once); yield the report (a row per range)."""
        files = _SplitFiles(self, split, index)
        counted: list[tuple[PartitionRange, SplitCounts, _Corrupt]] = []
        try:
            for r, batches in ranges:
                counts, corrupt = SplitCounts(), _Corrupt()
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    counts = counts.add(batch)
                    if self.decoding is not None:
                        batch = self._decoded(batch, corrupt, files)
                        if batch is None:
                            continue
                    files.add(self._stamped(batch if self.shape is None
                                            else shape_batch(batch, self.shape)))
                counted.append((r, counts, corrupt))
            landed = files.close()
        except BaseException:
            files.cancel()
            raise
        rows: list[dict[str, Any]] = [{"topic": r.topic, "partition": r.partition,
                                       "start": r.start, "records": counts.records,
                                       "first_offset": counts.first_offset,
                                       "last_offset": counts.last_offset,
                                       "min_us": counts.min_us, "max_us": counts.max_us,
                                       "bytes": counts.bytes, "corrupt": corrupt.count,
                                       "corrupt_offset": corrupt.offset,
                                       "corrupt_reason": corrupt.reason,
                                       "left_to_spark": corrupt.left_to_spark}
                                      for r, counts, corrupt in counted]
        if rows:
            rows[0]["files"] = [{"name": f.name, "size": f.size, "modified_ms": f.modified_ms,
                                 "footer": f.footer, "partition": list(f.partition)}
                                for f in landed]
        yield pa.RecordBatch.from_pylist(rows, schema=_ARROW_REPORT)

    def _decoded(self, batch: pa.RecordBatch, corrupt: _Corrupt,
                 files: _SplitFiles) -> pa.RecordBatch | None:
        """The good records of ``batch`` decoded (None: none to write); the corrupt ones
        counted in ``corrupt`` and, with ``dead_letter``, added to ``files``' dead letters."""
        assert self.decoding is not None
        if corrupt.left_to_spark:
            return None  # ingest decodes the slice through Spark instead
        try:
            marked = self.decoding.mark(batch)
        except LeftToSpark as exc:
            corrupt.left_to_spark += exc.rows
            return None
        reason = marked.column("decode_error")
        bad = reason.is_valid()
        if reason.null_count < len(reason):
            corrupt.add(marked.filter(bad))
            if self.on_corrupt == "dead_letter":
                files.add_dead_letters(dead_letters(marked.filter(bad)))
            marked = marked.filter(pc.invert(bad))
        if corrupt.count and self.on_corrupt == "fail":
            return None  # the ingest fails: what is left would be deleted
        good = marked.select([n for n in marked.schema.names if n not in MARK_COLUMNS])
        return good if good.num_rows else None


@dataclass
class _Corrupt:
    """The corrupt records of a range: how many, the first one's offset and reason; and the
    records only Spark decodes exactly (:class:`~airflow_provider_kafka_spark.spark.read.
    marking.LeftToSpark`)."""

    count: int = 0
    offset: int | None = None
    reason: str | None = None
    left_to_spark: int = 0

    def add(self, marked: pa.RecordBatch) -> None:
        if self.offset is None:
            self.offset = marked.column("offset")[0].as_py()
            self.reason = marked.column("decode_error")[0].as_py()
        self.count += marked.num_rows


class _SplitFiles:
    """The files one split writes: one per partition folder (``""`` unpartitioned), a new one
    for a folder whose file was closed; at most :data:`MAX_OPEN_FILES` open and about
    :data:`ROW_GROUP_BYTES` of rows buffered (the largest buffer becomes a row group). The
    folders are the values of the folder's ``partition_by`` columns (dropped from the rows) or
    of its ``split_by`` transforms (the columns kept)."""

    def __init__(self, folder: ParquetFolder, split: Split, index: int) -> None:
        self.folder, self.split, self.index = folder, split, index
        codec = "none" if folder.compression == "uncompressed" else folder.compression
        self.codec = codec
        self.suffix = "parquet" if codec == "none" else f"{codec}.parquet"
        self.open: dict[str, tuple[Any, Any, str]] = {}  # folder -> (writer, upload, name)
        self.buffered: dict[str, list[pa.RecordBatch]] = {}
        self.sizes: dict[str, int] = {}
        self.count: dict[str, int] = {}  # files begun per folder
        self.values: dict[str, tuple[str | None, ...]] = {}  # partition values per folder
        self.most_open = 0  # the most files open at once (at most MAX_OPEN_FILES)
        self.landed: list[LandedFile] = []
        self.token = str(uuid.uuid4())  # as Spark names its part files

    def add(self, batch: pa.RecordBatch) -> None:
        by, split = self.folder.partition_by, self.folder.split_by
        if not by and not split:
            self._buffer("", batch)
            return
        if by:
            names, data = list(by), batch.select([n for n in batch.schema.names if n not in by])
            keys = [batch.column(n) for n in by]
        else:
            names, data = [name for name, _, _ in split], batch
            keys = [partition_values(_source(batch, column), transform)
                    for _, column, transform in split]
        codes, values = _groups(keys, names)
        folders = [partition_path(names, list(v)) for v in values]
        for folder, v in zip(folders, values, strict=True):
            self.values.setdefault(folder, tuple(None if x is None else _text(x) for x in v))
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        taken = data.take(pa.array(order))
        bounds = [0, *(np.flatnonzero(np.diff(sorted_codes)) + 1).tolist(), len(order)]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            if hi > lo:
                self._buffer(folders[sorted_codes[lo]], taken.slice(lo, hi - lo))

    def add_dead_letters(self, batch: pa.RecordBatch) -> None:
        """Dead letters (:func:`~airflow_provider_kafka_spark.spark.read.marking.
        dead_letters`), into the files of the ``_dead_letter`` folder."""
        self._buffer(DEAD_LETTER_FOLDER, batch)

    def _buffer(self, where: str, batch: pa.RecordBatch) -> None:
        self.buffered.setdefault(where, []).append(batch)
        self.sizes[where] = self.sizes.get(where, 0) + batch.nbytes
        while sum(self.sizes.values()) >= ROW_GROUP_BYTES:
            self._flush(max(self.sizes, key=self.sizes.__getitem__))

    def _flush(self, where: str) -> None:
        group = self.buffered.pop(where, [])
        self.sizes.pop(where, None)
        if not group:
            return
        table = pa.Table.from_batches(group)
        if where not in self.open:
            if len(self.open) >= MAX_OPEN_FILES:
                self._close(next(iter(self.open)))  # the least recently written
            self.open[where] = self._new_file(where, table.schema)
            self.most_open = max(self.most_open, len(self.open))
        else:  # the most recently written goes last
            self.open[where] = self.open.pop(where)
        self.open[where][0].write_table(table, row_group_size=table.num_rows)

    def _new_file(self, where: str, schema: pa.Schema) -> tuple[Any, Any, str]:
        k = self.count.get(where, 0)
        self.count[where] = k + 1
        prefix = f"{where}/" if where else ""
        folder = self.folder
        if folder.s3 is not None:  # the split's own keys: a retry rewrites them
            name = f"{prefix}part-{self.split.name()}{f'-{k}' if k else ''}.{self.suffix}"
            bucket, root = split_s3(folder.path)
            upload = ObjectUpload(folder.s3.client(), bucket, f"{root}/{name}".lstrip("/"))
            return pq.ParquetWriter(upload, schema, compression=self.codec), upload, name
        # named as Spark names its part files (the split's index, a UUID, the file's count)
        name = f"{prefix}part-{self.index:05d}-{self.token}-c{k:03d}.{self.suffix}"
        path = os.path.join(folder.path, name)
        if where:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return pq.ParquetWriter(path, schema, compression=self.codec), None, name

    def _close(self, where: str) -> None:
        writer, upload, name = self.open.pop(where)
        writer.close()
        if upload is not None:
            upload.finish()
            size = upload.size
        else:
            size = os.path.getsize(os.path.join(self.folder.path, name))
        self.landed.append(LandedFile(name, size, int(time.time() * 1000),
                                      _footer_file(writer.writer.metadata),
                                      self.values.get(where, ())))

    def close(self) -> list[LandedFile]:
        """Write what is buffered, close every file; the files written."""
        for where in list(self.buffered):
            self._flush(where)
        for where in list(self.open):
            self._close(where)
        return self.landed

    def cancel(self) -> None:
        """After a failure: nothing appears at an S3 key (the uploads are aborted); a local
        file is closed (the sink deletes files no report names)."""
        for writer, upload, _ in self.open.values():
            if upload is not None:
                upload.cancel()
            else:
                writer.close()
        self.open.clear()


def _groups(keys: list[pa.Array], names: list[str]) -> tuple[Any, list[tuple[Any, ...]]]:
    """A code per row (numpy) and the key values of each code: rows of equal key values share
    a code."""
    if len(keys) == 1:
        encoded = pc.dictionary_encode(keys[0], null_encoding="encode")
        values = encoded.dictionary.to_pylist()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        return codes, [(v,) for v in values]
    rows = pa.Table.from_arrays(keys, names=names).to_pylist()
    found: dict[tuple[Any, ...], int] = {}
    codes = np.fromiter((found.setdefault(tuple(r.values()), len(found)) for r in rows),
                        dtype=np.int64, count=len(rows))
    return codes, list(found)


def _source(batch: pa.RecordBatch, column: str) -> pa.Array:
    if column not in batch.schema.names:
        raise ConfigurationError(f"ParquetFolder split_by: the files have no column {column!r} "
                                 f"({', '.join(batch.schema.names)}).")
    return batch.column(column)


def _text(value: Any) -> str:
    """A partition value as its folder names it (before escaping)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Landing:
    """What a landing read reported: per range, its counts, and per split its file."""

    reports: tuple[Mapping[str, Any], ...]

    def files(self) -> list[LandedFile]:
        """The files the successful tasks wrote (in the folder), by name."""
        return sorted((LandedFile(f["name"], f["size"], f["modified_ms"], bytes(f["footer"]),
                                  tuple(f["partition"] or ()))
                       for r in self.reports for f in r["files"] or ()), key=lambda f: f.name)

    def summaries(self) -> list[PartitionSummary]:
        """The per-partition statistics, as :func:`~airflow_provider_kafka_spark.spark.
        summarize` gives them."""
        return combine(((r["topic"], r["partition"]), SplitCounts(
            r["records"], r["first_offset"], r["last_offset"], r["min_us"], r["max_us"],
            r["bytes"])) for r in self.reports)

    def records(self) -> int:
        """The records read."""
        return sum(r["records"] for r in self.reports)

    def corrupt_records(self) -> int:
        """The records the readers could not decode (0 without decoding)."""
        return sum(r["corrupt"] or 0 for r in self.reports)

    def left_to_spark(self) -> int:
        """Records only Spark's path decodes exactly (the landing must be done again)."""
        return sum(r["left_to_spark"] or 0 for r in self.reports)

    def first_corrupt(self) -> dict[str, Any] | None:
        """The first record the readers could not decode, by topic, partition and offset:
        its ``topic``, ``partition``, ``offset`` and ``decode_error``; None without."""
        bad = [r for r in self.reports if r["corrupt"]]
        if not bad:
            return None
        first = min(bad, key=lambda r: (r["topic"], r["partition"], r["corrupt_offset"]))
        return {"topic": first["topic"], "partition": first["partition"],
                "offset": first["corrupt_offset"], "decode_error": first["corrupt_reason"]}


def land_kafka(reads: DataFrame) -> Landing:
    """Run the landing read ``reads`` (``read_kafka(..., land=ParquetFolder(...))``)."""
    return Landing(tuple(row.asDict() for row in reads.collect()))
