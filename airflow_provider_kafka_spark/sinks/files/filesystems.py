"""The file-system calls of the file sink's swap, and where they run.

* :class:`Files`: the few calls the swap makes, on string paths; :class:`HadoopFiles` (the
  driver's Hadoop ``FileSystem``, classic sessions) and :class:`LocalFiles` (the process's
  local file system: an executor's, over Spark Connect).
* :func:`in_driver` and :func:`on_executor`: run a step of the swap here, or in a one-task
  Spark job on an executor (Spark Connect); a step is ``step(files, notes, *args)`` and returns
  a JSON-ready value, leaving its log records in ``notes``.
* :func:`is_connect_session` and :func:`connect_local_path`: which paths a Connect session
  takes.

See :mod:`airflow_provider_kafka_spark.sinks.files` for why the steps run where they do.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


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
            "every Spark node mounts at the same place), or S3 ('s3a://bucket/out'). For "
            f"{scheme}: paths use a classic "
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


class Files(ABC):
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


class HadoopFiles(Files):
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


class LocalFiles(Files):
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


def in_driver(files: Files) -> Callable[..., Any]:
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


def on_executor(spark: SparkSession) -> Callable[..., Any]:
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
                value = json.dumps(step(LocalFiles(), notes, *args))
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
