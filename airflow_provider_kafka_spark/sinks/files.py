"""The file sink: one folder per run, replaced as a whole, and only once the new one is complete.

Spark's ``mode("overwrite")`` deletes the folder before it writes, so a write that fails
half-way would leave nothing where the previous good output was. This sink never overwrites
the run's folder; it stages the new output next to it and swaps it in at the end. For
``path = <parent>/<name>``::

    <parent>/<name>/                                  the run's output: data + manifest
    <parent>/.<name>._kafka_spark_staging-<token>/    this attempt's output while it is written
    <parent>/.<name>._kafka_spark_previous-<token>/   the previous output, during the swap only

``<token>`` is ``<UTC time>-<random>`` (e.g. ``20240501T100000-1a2b3c4d``), unique per attempt.
The hidden siblings sit in the same folder, so on the same file system (and bucket), and
Spark's and Hadoop's readers skip names starting with ``.`` or ``_`` when they list
``<parent>``.

**Protocol.**

1. :meth:`FileSink.prepare` (before the read): the format is looked up among the session's
   data sources; an interrupted swap is repaired (``<name>`` missing but a ``previous`` folder
   present: it is renamed back to ``<name>``); an empty DataFrame with the output's columns
   is written to the staging folder, which checks the format against the columns, the
   options, ``partition_by`` and that the location is writable, all without reading a record.
2. :meth:`FileSink.write`: the Spark job writes the staging folder (``overwrite``: only the
   staging folder is replaced).
3. :meth:`FileSink.commit`: the manifest ``_kafka_spark_manifest.json`` is written into the
   staging folder, then ``<name>`` is renamed to ``previous``, the staging folder is renamed to
   ``<name>``, and ``previous`` is deleted. A failure of the second rename renames ``previous``
   back. Last, the leftovers of earlier interrupted attempts (``staging`` and ``previous``
   siblings of the same ``<name>``) are deleted.
4. :meth:`FileSink.abort` (after any failure): the staging folder is deleted, ``previous`` is
   renamed back if ``<name>`` is missing, and the parent folders that :meth:`prepare` created
   are removed while empty.

So the previous output stays readable, unchanged, until the new one is complete with its
manifest; a failed write leaves it as it was. A process killed at any point leaves the previous
output at ``<name>`` or the new one, except between the two renames of step 3, when both sit
under their hidden names and ``<name>`` is missing until the next attempt's :meth:`prepare`
renames the previous output back. A killed attempt's staging folder stays aside until the next
successful run of the same path deletes it.

**Where the steps run.** On a classic session, everything goes through the Hadoop
``FileSystem`` API of the driver's JVM, so any file system the session reaches works. On a
Spark Connect session there is no driver JVM on this side, and the files are written by the
server's executors on a file system this client may not see at all (an Airflow worker talking
to a remote cluster). So the file-system steps (the checks and repair of step 1, the manifest
and the swap of step 3, step 4) run **inside a one-task Spark job** on an executor, with
Python's ``os`` functions, and only for local paths (``file:`` or an absolute path without a
scheme: a path on the cluster's machines, not on the client). That path must be on a file
system every Spark node mounts at the same place (one machine, or a network mount such as
NFS), as Spark's own ``file:`` output needs: step 1 checks that the executor running the
steps sees the staging folder Spark wrote, and fails before the read otherwise. Any other
scheme (``s3a:``, ``hdfs:``, ``abfs:``, ``gs:``...) is refused over Spark Connect before the read,
with a :class:`ConfigurationError` (use a classic session for those).

**What is atomic where.** A directory rename is only as atomic as the file system makes it:

* local file systems (``file:``, POSIX ``rename(2)``) and HDFS (one NameNode operation):
  each rename is atomic, so ``<name>`` always holds a whole output, and it is missing only
  between the two renames (microseconds);
* Azure ABFS with a hierarchical namespace, and GCS buckets with a hierarchical namespace:
  atomic directory renames, as above;
* object stores that emulate directories (S3A, GCS without hierarchical namespace, WASB): a
  directory rename copies and deletes every object, takes time proportional to the output,
  and is not atomic: during the swap a reader can see ``<name>`` missing or partly there,
  and a crash during a rename leaves the objects split between the two names. The previous
  output is still never deleted before the new one is completely staged. Use a table format
  (Iceberg, Delta, Hudi) or an S3A committer for atomic commits on such stores.

One writer per path: two runs writing the same ``path`` at the same time may fail each other
(the second rename finds ``<name>`` taken, or a cleanup removes the other's staging folder).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError
from airflow_provider_kafka_spark.options import DATA_SOURCE_NAME
from airflow_provider_kafka_spark.sinks.base import Sink, cut, error_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

MANIFEST_NAME = "_kafka_spark_manifest.json"
"""The manifest file in each output folder; Spark's readers skip names starting with ``_``."""
STAGING_MARK = "._kafka_spark_staging-"
"""``.<name>`` + this + ``<token>``: the folder an attempt writes before the swap."""
DEAD_LETTER_FOLDER = "_dead_letter"
"""The folder of undecodable records inside an output folder (Parquet; skipped by readers of
the output, like every name starting with ``_``)."""
PREVIOUS_MARK = "._kafka_spark_previous-"
"""``.<name>`` + this + ``<token>``: where the previous output waits during the swap."""

_OPTION_TYPES = (str, int, float, bool)


def check_file_sink_arguments(path: Any, format: Any, options: Any, partition_by: Any,
                              owner: str = "FileSink") -> None:
    """Raise :class:`ConfigurationError` for arguments no file sink can take (no Spark
    needed; the session checks the rest in :meth:`FileSink.prepare`)."""
    if not isinstance(path, str) or not path.strip():
        raise ConfigurationError(
            f"{owner}: path={path!r} is not valid; pass the folder of the output, e.g. "
            "'s3a://lake/events/2024-05-01T00' or '/data/events/2024-05-01T00'."
        )
    if not isinstance(format, str) or not DATA_SOURCE_NAME.fullmatch(format.strip()):
        raise ConfigurationError(
            f"{owner}: format={format!r} is not valid; pass a Spark data source name such "
            "as 'parquet', 'json', 'csv', 'orc', or 'avro' (with its package)."
        )
    if not isinstance(options, Mapping) or not all(
            isinstance(k, str) and k and isinstance(v, _OPTION_TYPES) for k, v in options.items()):
        raise ConfigurationError(
            f"{owner}: options={options!r} is not valid; pass a dict of Spark writer options "
            "with string keys and str, int, float or bool values, e.g. {'compression': 'zstd'}."
        )
    if isinstance(partition_by, str) or not isinstance(partition_by, Sequence) or not all(
            isinstance(c, str) and c.strip() for c in partition_by):
        raise ConfigurationError(
            f"{owner}: partition_by={partition_by!r} is not valid; pass a list of column "
            "names, e.g. ['event_date'] (a list even for one column)."
        )


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no driver JVM on this side)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_local_path(path: str) -> str:
    """``path`` as the absolute local path of the cluster's machines that the file sink uses
    on a Spark Connect session (``file:/x``, ``file:///x``, ``file://localhost/x`` and ``/x``
    are ``/x``; normalized, without a trailing ``/``).

    Raises:
        ConfigurationError: another scheme than ``file:``, a ``file:`` URI naming another
            host, or a relative path (it would be relative to the server's working folder).
    """
    parsed = urlsplit(path)
    scheme = parsed.scheme.lower()
    if scheme not in ("", "file") or (scheme == "file" and parsed.netloc not in ("", "localhost")):
        raise ConfigurationError(
            f"the file sink cannot write {path!r} over Spark Connect: on a Connect session it "
            "moves files with an executor's local file system calls, so it takes only local "
            "paths of the cluster's machines ('file:/data/out' or '/data/out', on a file system "
            f"every Spark node mounts at the same place). For {scheme}: paths use a classic "
            "session (a 'spark' connection or a local master), which swaps through Hadoop's "
            "FileSystem. Nothing was read or written."
        )
    local = parsed.path if scheme else path
    if not posixpath.isabs(local):
        raise ConfigurationError(
            f"the file sink's path {path!r} is relative; over Spark Connect it would be "
            "relative to the server's working folder. Pass an absolute path, e.g. "
            "'/data/events/2024-05-01T00'. Nothing was read or written."
        )
    return "/" + posixpath.normpath(local).lstrip("/")


class FileSink(Sink):
    """Write a DataFrame as files into the folder ``path``, replacing that folder as a whole
    only once the new output is complete (see the module docstring for the staging layout and
    what is atomic on which file system).

    :param path: the output folder, on any Hadoop file system the session reaches; on a Spark
        Connect session, a local path of the cluster's machines (``file:`` or absolute).
    :param format: a Spark data source name (``parquet``, ``json``, ``csv``, ``orc``...).
    :param options: Spark writer options.
    :param partition_by: columns to partition the folder by.
    """

    def __init__(self, path: str, *, format: str = "parquet",
                 options: Mapping[str, Any] | None = None,
                 partition_by: Sequence[str] = ()) -> None:
        options = {} if options is None else options
        check_file_sink_arguments(path, format, options, partition_by)
        self.path = path.strip()
        self.format = format.strip()
        self.options = dict(options)
        self.partition_by = [c.strip() for c in partition_by]
        self._run: Callable[..., Any] | None = None  # runs a step where the files are
        self._layout: _Layout | None = None
        self._staged = False  # the staging folder exists (prepare succeeded, no commit yet)
        self._created: str | None = None  # the topmost parent folder prepare() created
        self._writes_to = ""  # the staging folder as Spark's writer is given it

    def describe(self) -> dict[str, Any]:
        """``{"path", "format", "manifest"}``."""
        return {"path": self.path, "format": self.format,
                "manifest": f"{self.path.rstrip('/')}/{MANIFEST_NAME}"}

    # -- the steps -----------------------------------------------------------------------

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:
        """Look the format up, repair an interrupted swap, and write an empty DataFrame with
        ``shaped``'s columns to a new staging folder.

        Raises:
            ConfigurationError: an unknown format, ``path`` a file or a root, or the empty
                write failed (format vs. columns, options, ``partition_by``, permissions); on
                Spark Connect also a path that is not local (``file:``) or not absolute, or
                whose staging folder the executors do not see. Nothing is left behind.
        """
        token = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        if is_connect_session(spark):
            target = connect_local_path(self.path)
            self._run = _on_executor(spark)
            self._layout = _Layout.of(target, posixpath.dirname(target),
                                      posixpath.basename(target), token, posixpath.join)
            self._writes_to = f"file:{self._layout.staging}"
        else:
            files = self._hadoop_files(spark)
            self._run = _in_driver(files)
            target = files.qualified(self.path)
            parent = files.parent(target)
            if parent is None:
                self._root_error()
            self._layout = _Layout.of(target, parent, files.name(target), token, files.child)
            self._writes_to = self._layout.staging
        if self._layout.name in ("", "/", ".", ".."):
            self._root_error()
        self._created = self._run(_inspect, self._layout, self.path)
        self._staged = True
        try:
            self._writer(shaped.limit(0)).save(self._writes_to)
            if is_connect_session(spark):
                self._run(_check_staged, self._layout, self.path)
        except ConfigurationError:
            self.abort()
            raise
        except Exception as exc:
            self.abort()
            if "DATA_SOURCE_NOT_FOUND" in str(exc) or "Failed to find data source" in str(exc):
                raise self._unknown_format(exc) from exc
            raise ConfigurationError(
                f"the file sink could not write an empty DataFrame with the output's columns "
                f"({cut(shaped.schema.simpleString(), 300)}) as {self.format!r} to "
                f"{self._writes_to}: {error_line(exc)}. Check the format, options "
                f"({self.options}) and partition_by ({self.partition_by}) against these columns, "
                "and that the folder's parent can be written. Nothing was read or written."
            ) from exc

    def write(self, df: DataFrame, dead_letters: DataFrame | None = None) -> dict[str, Any]:
        """Write ``df`` into the staging folder, and ``dead_letters`` (as Parquet) into its
        ``_dead_letter`` folder, published with it; ``path`` is untouched."""
        from airflow_provider_kafka_spark.spark import kafka_errors

        self._require_prepared("write")
        with kafka_errors():
            self._writer(df).save(self._writes_to)
            if dead_letters is not None:
                dead_letters.write.mode("errorifexists").parquet(
                    f"{self._writes_to.rstrip('/')}/{DEAD_LETTER_FOLDER}")
        if dead_letters is None:
            return self.describe()
        return {**self.describe(), "dead_letter": {
            "path": f"{self.path.rstrip('/')}/{DEAD_LETTER_FOLDER}", "format": "parquet"}}

    def commit(self, manifest: Mapping[str, Any]) -> None:
        """Write ``manifest`` into the staging folder and swap the folder in for ``path``.

        Raises:
            SinkError: a rename failed; the previous output is back at ``path`` (or, if even
                that failed, the message says where it is).
        """
        layout = self._require_prepared("commit")
        assert self._run is not None
        self._run(_commit, layout, self.path, json.dumps(dict(manifest), indent=2,
                                                         sort_keys=True))
        self._staged = False

    def abort(self) -> None:
        """Delete the staging folder, put the previous output back if it was set aside, and
        remove the empty parent folders :meth:`prepare` created. Never raises: what cannot be
        cleaned is logged, and the next successful run of the same path deletes it."""
        if self._run is None or self._layout is None:
            return
        try:
            self._run(_abort, self._layout, self.path, self._created)
        except Exception as exc:  # runs while another exception propagates: log, never mask it
            log.warning("The file sink could not clean up after the failure: %s. A staging folder "
                        "(%s*) may remain next to %s; the next successful run of the same path "
                        "deletes it.", error_line(exc), STAGING_MARK, self.path)
        self._staged = False

    # -- helpers ---------------------------------------------------------------------------

    def _writer(self, df: DataFrame) -> Any:
        writer = df.write.mode("overwrite").format(self.format).options(**self.options)
        return writer.partitionBy(*self.partition_by) if self.partition_by else writer

    def _hadoop_files(self, spark: SparkSession) -> _HadoopFiles:
        """The Hadoop file system of ``path`` in the driver's JVM; the format is looked up
        first (no job, no file touched)."""
        jvm, jsc = getattr(spark, "_jvm", None), getattr(spark, "_jsc", None)
        if jvm is None or jsc is None:
            raise ConfigurationError(
                f"the file sink got a session without a driver JVM ({type(spark).__name__}) "
                f"for {self.path!r}; pass a classic SparkSession or a Spark Connect one."
            )
        try:
            conf = spark._jsparkSession.sessionState().conf()  # type: ignore[attr-defined]
            jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
                self.format, conf)
        except Exception as exc:
            raise self._unknown_format(exc) from exc
        try:
            target = jvm.org.apache.hadoop.fs.Path(self.path)
            return _HadoopFiles(jvm, target.getFileSystem(jsc.hadoopConfiguration()))
        except Exception as exc:
            raise ConfigurationError(
                f"the file sink cannot reach path {self.path!r}: {error_line(exc)}. Check the "
                "URI scheme and that its file system is configured in the Spark session."
            ) from exc

    def _root_error(self) -> NoReturn:
        raise ConfigurationError(
            f"the file sink's path {self.path!r} is the root of its file system; pass a "
            "folder below it (the folder is replaced as a whole)."
        )

    def _unknown_format(self, exc: BaseException) -> ConfigurationError:
        return ConfigurationError(
            f"output format {self.format!r} is not a data source of this Spark session: "
            f"{error_line(exc)}. Use a built-in file format ('parquet', 'json', 'csv', "
            "'orc', 'text') or put the package that provides it on the session's classpath "
            "(e.g. spark.jars.packages=org.apache.spark:spark-avro_2.13:<spark version> for "
            "'avro')."
        )

    def _require_prepared(self, step: str) -> _Layout:
        if not self._staged or self._layout is None:
            raise SinkError(f"FileSink.{step}() called without a successful prepare() (or after "
                            "commit/abort); call prepare(spark, shaped) first, once per write.")
        return self._layout


# -- the file system, wherever it is ---------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """The folders of one attempt (strings: Hadoop URIs, or local paths over Connect)."""

    target: str
    parent: str
    name: str
    staging: str
    previous: str

    @classmethod
    def of(cls, target: str, parent: str, name: str, token: str,
           child: Callable[[str, str], str]) -> _Layout:
        return cls(target, parent, name, child(parent, f".{name}{STAGING_MARK}{token}"),
                   child(parent, f".{name}{PREVIOUS_MARK}{token}"))


class _Files(ABC):
    """The few file-system calls the protocol makes, on string paths."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def is_dir(self, path: str) -> bool: ...

    @abstractmethod
    def rename(self, source: str, destination: str) -> bool: ...

    @abstractmethod
    def delete(self, path: str, recursive: bool) -> None: ...

    @abstractmethod
    def names(self, folder: str) -> list[str]: ...

    @abstractmethod
    def write_text(self, path: str, text: str) -> None: ...

    @abstractmethod
    def parent(self, path: str) -> str | None: ...

    @abstractmethod
    def child(self, folder: str, name: str) -> str: ...


class _HadoopFiles(_Files):
    """A Hadoop ``FileSystem`` in the driver's JVM (classic sessions)."""

    def __init__(self, jvm: Any, fs: Any) -> None:
        self._jvm = jvm
        self._fs = fs

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def qualified(self, path: str) -> str:
        return str(self._fs.makeQualified(self._path(path)).toString())

    def name(self, path: str) -> str:
        return str(self._path(path).getName())

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def is_dir(self, path: str) -> bool:
        return self.exists(path) and bool(self._fs.getFileStatus(self._path(path)).isDirectory())

    def rename(self, source: str, destination: str) -> bool:
        return bool(self._fs.rename(self._path(source), self._path(destination)))

    def delete(self, path: str, recursive: bool) -> None:
        self._fs.delete(self._path(path), recursive)

    def names(self, folder: str) -> list[str]:
        return [str(s.getPath().getName()) for s in self._fs.listStatus(self._path(folder))]

    def write_text(self, path: str, text: str) -> None:
        stream = self._fs.create(self._path(path), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def parent(self, path: str) -> str | None:
        parent = self._path(path).getParent()
        return None if parent is None else str(parent.toString())

    def child(self, folder: str, name: str) -> str:
        return str(self._jvm.org.apache.hadoop.fs.Path(self._path(folder), name).toString())


class _LocalFiles(_Files):
    """The local file system of the process (an executor's, over Spark Connect)."""

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def rename(self, source: str, destination: str) -> bool:
        os.rename(source, destination)
        return True

    def delete(self, path: str, recursive: bool) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            if recursive:
                shutil.rmtree(path)
            else:
                os.rmdir(path)
        elif os.path.lexists(path):
            os.remove(path)

    def names(self, folder: str) -> list[str]:
        return os.listdir(folder)

    def write_text(self, path: str, text: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def parent(self, path: str) -> str | None:
        parent = posixpath.dirname(path)
        return None if parent == path else parent

    def child(self, folder: str, name: str) -> str:
        return posixpath.join(folder, name)


Notes = list[tuple[int, str]]
"""Log records a step leaves for the driver: ``(logging level, message)``."""


def _in_driver(files: _Files) -> Callable[..., Any]:
    """Run steps here, on ``files`` (classic sessions: the driver's Hadoop file system)."""
    def run(step: Callable[..., Any], *args: Any) -> Any:
        notes: Notes = []
        try:
            return step(files, notes, *args)
        finally:
            for level, message in notes:
                log.log(level, "%s", message)
    return run


_STEP_SCHEMA = "error string, message string, levels array<int>, notes array<string>, value string"
_STEP_ERRORS: dict[str, type[Exception]] = {"ConfigurationError": ConfigurationError,
                                            "SinkError": SinkError}


def _on_executor(spark: SparkSession) -> Callable[..., Any]:
    """Run steps in a one-task Spark job, on an executor's local file system (Spark Connect:
    the files are where the cluster writes them, not necessarily where this client runs).
    A step's ConfigurationError or SinkError is raised here again, its notes logged here."""
    def run(step: Callable[..., Any], *args: Any) -> Any:
        def task(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow as pa

            for _ in batches:
                pass
            notes: Notes = []
            error = message = value = None
            try:
                value = json.dumps(step(_LocalFiles(), notes, *args))
            except (ConfigurationError, SinkError) as exc:
                error, message = type(exc).__name__, str(exc)
            yield pa.RecordBatch.from_pydict({
                "error": pa.array([error], pa.string()),
                "message": pa.array([message], pa.string()),
                "levels": pa.array([[level for level, _ in notes]], pa.list_(pa.int32())),
                "notes": pa.array([[text for _, text in notes]], pa.list_(pa.string())),
                "value": pa.array([value], pa.string())})

        (row,) = spark.range(0, 1, 1, 1).mapInArrow(task, _STEP_SCHEMA).collect()
        for level, text in zip(row["levels"], row["notes"], strict=True):
            log.log(level, "%s", text)
        if row["error"] is not None:
            raise _STEP_ERRORS[row["error"]](row["message"])
        return json.loads(row["value"])
    return run


# -- the protocol's steps: (files, notes, layout, path, ...) -> JSON-ready value ------------


def _inspect(files: _Files, notes: Notes, layout: _Layout, path: str) -> str | None:
    """Step 1 before the empty write: refuse a file at ``path``, put back an output an
    interrupted swap set aside, and return the topmost parent folder that does not exist yet
    (the write creates it; :func:`_abort` removes it again while empty)."""
    if files.exists(layout.target) and not files.is_dir(layout.target):
        raise ConfigurationError(
            f"the file sink's path {path!r} is a file; pass a folder (the sink replaces "
            "the folder as a whole), or remove the file."
        )
    _recover(files, notes, layout, path)
    created = None
    folder: str | None = layout.parent
    while folder is not None and not files.exists(folder):
        created, folder = folder, files.parent(folder)
    return created


def _check_staged(files: _Files, notes: Notes, layout: _Layout, path: str) -> None:
    """Over Spark Connect, after the empty write: the executor must see what Spark wrote."""
    if not files.is_dir(layout.staging):
        raise ConfigurationError(
            f"Spark wrote the file sink's staging folder file:{layout.staging}, but the "
            f"executor that swaps it in does not see it on its file system. Over Spark "
            f"Connect, {path!r} must be on a file system every Spark node (and the Connect "
            "server) mounts at the same place: one machine, or a network mount. Use such a "
            "path, or a classic session for other file systems. Nothing was read; the empty "
            "staging folder may remain on the node that wrote it."
        )


def _commit(files: _Files, notes: Notes, layout: _Layout, path: str, manifest: str) -> None:
    """Step 3: the manifest into the staging folder, then the swap, then the cleanup."""
    _write_manifest(files, layout, path, manifest)
    previous = None
    if files.exists(layout.target):
        _rename(files, layout.target, layout.previous, "set the previous output aside", path)
        previous = layout.previous
    try:
        _rename(files, layout.staging, layout.target, "move the new output into place", path)
    except BaseException:
        _put_previous_back(files, layout, path)
        raise
    if previous is not None:
        _delete(files, notes, previous, "the previous output", path)
    for leftover in _siblings(files, layout, STAGING_MARK) + _siblings(files, layout,
                                                                      PREVIOUS_MARK):
        _delete(files, notes, leftover, "a leftover of an interrupted attempt", path)


def _abort(files: _Files, notes: Notes, layout: _Layout, path: str,
           created: str | None) -> None:
    """Step 4: put the previous output back if this attempt set it aside, delete the staging
    folder and the empty parent folders :func:`_inspect` found missing."""
    try:
        _put_previous_back(files, layout, path)
        if files.exists(layout.staging):
            files.delete(layout.staging, True)
        _remove_created_parents(files, layout, created)
    except Exception as exc:  # runs while another exception propagates: log, never mask it
        notes.append((logging.WARNING, (
            f"The file sink could not clean up after the failure: {error_line(exc)}. A staging "
            f"folder ({STAGING_MARK}*) may remain next to {path}; the next successful run of the "
            "same path deletes it.")))


def _siblings(files: _Files, layout: _Layout, mark: str) -> list[str]:
    """The paths next to ``path`` named ``.<name><mark>*``, oldest token first."""
    if not files.exists(layout.parent):
        return []
    prefix = f".{layout.name}{mark}"
    return [files.child(layout.parent, n)
            for n in sorted(n for n in files.names(layout.parent) if n.startswith(prefix))]


def _recover(files: _Files, notes: Notes, layout: _Layout, path: str) -> None:
    """``path`` missing while a previous output waits aside: an attempt died between the
    two renames of its swap. Rename the newest such folder back to ``path``."""
    if files.exists(layout.target):
        return
    waiting = _siblings(files, layout, PREVIOUS_MARK)
    if waiting:
        _rename(files, waiting[-1], layout.target,
                "restore the output an interrupted swap set aside", path)
        notes.append((logging.WARNING, (
            f"{path} was missing and its previous output waited at {waiting[-1]} (an attempt "
            "was stopped in the middle of its swap): renamed it back.")))


def _put_previous_back(files: _Files, layout: _Layout, path: str) -> None:
    if files.exists(layout.previous) and not files.exists(layout.target):
        _rename(files, layout.previous, layout.target, "put the previous output back", path)


def _rename(files: _Files, source: str, destination: str, purpose: str, path: str) -> None:
    where = f"{source} -> {destination}"
    if files.exists(destination):
        raise SinkError(
            f"cannot {purpose} ({where}): the destination exists. Is another run writing "
            f"{path!r} at the same time? Run one writer per folder; remove the "
            "destination if it is a leftover."
        )
    try:
        renamed = files.rename(source, destination)
    except Exception as exc:
        raise SinkError(f"could not {purpose} ({where}): {error_line(exc)}. Check the "
                        "permissions on the output's parent folder.") from exc
    if not renamed:
        raise SinkError(f"the file system refused to {purpose} ({where}). Check that the "
                        "source exists and the parent folder can be written.")


def _delete(files: _Files, notes: Notes, target: str, what: str, path: str) -> None:
    """Delete ``target`` recursively; a failure is logged, not raised (the output is already
    in place, and the next successful run deletes it)."""
    try:
        files.delete(target, True)
        notes.append((logging.INFO, f"Deleted {what}: {target}"))
    except Exception as exc:  # the commit is done; a leftover is only clutter
        notes.append((logging.WARNING, f"Could not delete {what} at {target}: "
                                       f"{error_line(exc)}. The next successful run of {path} "
                                       "deletes it."))


def _write_manifest(files: _Files, layout: _Layout, path: str, text: str) -> None:
    manifest = files.child(layout.staging, MANIFEST_NAME)
    try:
        files.write_text(manifest, text)
    except Exception as exc:
        raise SinkError(f"could not write the manifest {manifest}: {error_line(exc)}. "
                        f"The output at {path!r} is unchanged; check the space and "
                        "permissions of its parent folder, then run again.") from exc


def _remove_created_parents(files: _Files, layout: _Layout, created: str | None) -> None:
    """Remove, bottom-up, the folders above the staging folder that prepare() created,
    while they are empty (never a folder holding anything)."""
    if created is None:
        return
    chain: list[str] = []
    folder: str | None = layout.parent
    while folder is not None and folder != created:
        chain.append(folder)
        folder = files.parent(folder)
    if folder is None:  # not below the created folder: nothing of ours to remove
        return
    for folder in [*chain, created]:
        if not files.exists(folder) or files.names(folder):
            return
        files.delete(folder, False)
