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

**What is atomic where.** Everything goes through the Hadoop ``FileSystem`` API of the
driver's JVM, so any file system the session reaches works, but a directory rename is only as
atomic as the file system makes it:

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
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.offsets.errors import ConfigurationError
from airflow_provider_kafka_spark.sinks.base import Sink, SinkError, cut, error_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

MANIFEST_NAME = "_kafka_spark_manifest.json"
"""The manifest file in each output folder; Spark's readers skip names starting with ``_``."""
STAGING_MARK = "._kafka_spark_staging-"
"""``.<name>`` + this + ``<token>``: the folder an attempt writes before the swap."""
PREVIOUS_MARK = "._kafka_spark_previous-"
"""``.<name>`` + this + ``<token>``: where the previous output waits during the swap."""
FORMAT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
"""What a Spark data source name looks like: ``parquet``, ``avro``, ``org.example.Format``."""

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
    if not isinstance(format, str) or not FORMAT_NAME.fullmatch(format.strip()):
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


class FileSink(Sink):
    """Write a DataFrame as files into the folder ``path``, replacing that folder as a whole
    only once the new output is complete (see the module docstring for the staging layout and
    what is atomic on which file system).

    :param path: the output folder, on any Hadoop file system the session reaches.
    :param format: a Spark data source name (``parquet``, ``json``, ``csv``, ``orc``...).
    :param options: Spark writer options.
    :param partition_by: columns to partition the folder by.

    Needs a classic Spark session (a driver JVM); a Spark Connect session fails in
    :meth:`prepare`, before anything is read.
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
        self._fs: Any = None
        self._jvm: Any = None
        self._target: Any = None
        self._parent: Any = None
        self._name = ""
        self._token = ""
        self._staging: Any = None
        self._previous: Any = None
        self._created: Any = None  # the topmost parent folder prepare() created

    def describe(self) -> dict[str, Any]:
        """``{"path", "format", "manifest"}``."""
        return {"path": self.path, "format": self.format,
                "manifest": f"{self.path.rstrip('/')}/{MANIFEST_NAME}"}

    # -- the steps -----------------------------------------------------------------------

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:
        """Look the format up, repair an interrupted swap, and write an empty DataFrame with
        ``shaped``'s columns to a new staging folder.

        Raises:
            ConfigurationError: a Spark Connect session, an unknown format, ``path`` a file
                or a root, or the empty write failed (format vs. columns, options,
                ``partition_by``, permissions); nothing is left behind.
        """
        jvm, jsc = getattr(spark, "_jvm", None), getattr(spark, "_jsc", None)
        if jvm is None or jsc is None:
            raise ConfigurationError(
                f"the file sink writes {self.path!r} through the Spark driver's JVM (Hadoop "
                "FileSystem renames); Spark Connect sessions are not supported for file output "
                "yet. Use a classic session (a 'spark' connection, or none for local Spark)."
            )
        self._jvm = jvm
        self._check_format(spark)
        try:
            target = jvm.org.apache.hadoop.fs.Path(self.path)
            self._fs = target.getFileSystem(jsc.hadoopConfiguration())
            self._target = self._fs.makeQualified(target)
            self._parent = self._target.getParent()
            self._name = self._target.getName()
        except Exception as exc:
            raise ConfigurationError(
                f"the file sink cannot reach path {self.path!r}: {error_line(exc)}. Check the "
                "URI scheme and that its file system is configured in the Spark session."
            ) from exc
        if self._parent is None or not self._name:
            raise ConfigurationError(
                f"the file sink's path {self.path!r} is the root of its file system; pass a "
                "folder below it (the folder is replaced as a whole)."
            )
        if self._fs.exists(self._target) and not self._fs.getFileStatus(self._target).isDirectory():
            raise ConfigurationError(
                f"the file sink's path {self.path!r} is a file; pass a folder (the sink replaces "
                "the folder as a whole), or remove the file."
            )
        self._recover()
        self._token = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        self._staging = self._sibling(STAGING_MARK + self._token)
        self._created = self._topmost_missing(self._parent)
        staging = self._staging.toString()
        try:
            self._writer(shaped.limit(0)).save(staging)
        except Exception as exc:
            self.abort()
            raise ConfigurationError(
                f"the file sink could not write an empty DataFrame with the output's columns "
                f"({cut(shaped.schema.simpleString(), 300)}) as {self.format!r} to "
                f"{staging}: {error_line(exc)}. Check the format, options "
                f"({self.options}) and partition_by ({self.partition_by}) against these columns, "
                "and that the folder's parent can be written. Nothing was read or written."
            ) from exc

    def write(self, df: DataFrame) -> dict[str, Any]:
        """Write ``df`` into the staging folder; ``path`` is untouched."""
        from airflow_provider_kafka_spark.spark import kafka_errors

        self._require_prepared("write")
        with kafka_errors():
            self._writer(df).save(self._staging.toString())
        return self.describe()

    def commit(self, manifest: Mapping[str, Any]) -> None:
        """Write ``manifest`` into the staging folder and swap the folder in for ``path``.

        Raises:
            SinkError: a rename failed; the previous output is back at ``path`` (or, if even
                that failed, the message says where it is).
        """
        self._require_prepared("commit")
        self._write_manifest(json.dumps(dict(manifest), indent=2, sort_keys=True))
        if self._fs.exists(self._target):
            previous = self._sibling(PREVIOUS_MARK + self._token)
            self._rename(self._target, previous, "set the previous output aside")
            self._previous = previous
        try:
            self._rename(self._staging, self._target, "move the new output into place")
        except BaseException:
            self._put_previous_back()
            raise
        self._staging = None
        if self._previous is not None:
            self._delete(self._previous, "the previous output")
            self._previous = None
        for leftover in self._siblings(STAGING_MARK) + self._siblings(PREVIOUS_MARK):
            self._delete(leftover, "a leftover of an interrupted attempt")

    def abort(self) -> None:
        """Delete the staging folder, put the previous output back if it was set aside, and
        remove the empty parent folders :meth:`prepare` created. Never raises: what cannot be
        cleaned is logged, and the next successful run of the same path deletes it."""
        if self._fs is None:
            return
        try:
            self._put_previous_back()
            if self._staging is not None and self._fs.exists(self._staging):
                self._fs.delete(self._staging, True)
            self._staging = None
            self._remove_created_parents()
        except Exception as exc:  # runs while another exception propagates: log, never mask it
            log.warning("The file sink could not clean up after the failure: %s. A staging folder "
                        "(%s*) may remain next to %s; the next successful run of the same path "
                        "deletes it.", error_line(exc), STAGING_MARK, self.path)

    # -- helpers ---------------------------------------------------------------------------

    def _writer(self, df: DataFrame) -> Any:
        writer = df.write.mode("overwrite").format(self.format).options(**self.options)
        return writer.partitionBy(*self.partition_by) if self.partition_by else writer

    def _check_format(self, spark: SparkSession) -> None:
        """Find the format among the session's data sources (no job, no file touched)."""
        try:
            conf = spark._jsparkSession.sessionState().conf()  # type: ignore[attr-defined]
            self._jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
                self.format, conf)
        except Exception as exc:
            raise ConfigurationError(
                f"output format {self.format!r} is not a data source of this Spark session: "
                f"{error_line(exc)}. Use a built-in file format ('parquet', 'json', 'csv', "
                "'orc', 'text') or put the package that provides it on the session's classpath "
                "(e.g. spark.jars.packages=org.apache.spark:spark-avro_2.13:<spark version> for "
                "'avro')."
            ) from exc

    def _require_prepared(self, step: str) -> None:
        if self._staging is None:
            raise SinkError(f"FileSink.{step}() called without a successful prepare() (or after "
                            "commit/abort); call prepare(spark, shaped) first, once per write.")

    def _sibling(self, suffix: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._parent, f".{self._name}{suffix}")

    def _siblings(self, mark: str) -> list[Any]:
        """The paths next to ``path`` named ``.<name><mark>*``, oldest token first."""
        if not self._fs.exists(self._parent):
            return []
        pattern = _glob_escape(f".{self._name}{mark}") + "*"
        found = self._fs.listStatus(self._parent, self._jvm.org.apache.hadoop.fs.GlobFilter(pattern))
        return sorted((status.getPath() for status in found), key=lambda p: p.getName())

    def _recover(self) -> None:
        """``path`` missing while a previous output waits aside: an attempt died between the
        two renames of its swap. Rename the newest such folder back to ``path``."""
        if self._fs.exists(self._target):
            return
        waiting = self._siblings(PREVIOUS_MARK)
        if waiting:
            self._rename(waiting[-1], self._target, "restore the output an interrupted swap set "
                                                   "aside")
            log.warning("%s was missing and its previous output waited at %s (an attempt was "
                        "stopped in the middle of its swap): renamed it back.", self.path,
                        waiting[-1].toString())

    def _put_previous_back(self) -> None:
        if self._previous is not None and not self._fs.exists(self._target):
            self._rename(self._previous, self._target, "put the previous output back")
        self._previous = None

    def _rename(self, source: Any, destination: Any, purpose: str) -> None:
        where = f"{source.toString()} -> {destination.toString()}"
        if self._fs.exists(destination):
            raise SinkError(
                f"cannot {purpose} ({where}): the destination exists. Is another run writing "
                f"{self.path!r} at the same time? Run one writer per folder; remove the "
                "destination if it is a leftover."
            )
        try:
            renamed = self._fs.rename(source, destination)
        except Exception as exc:
            raise SinkError(f"could not {purpose} ({where}): {error_line(exc)}. Check the "
                            "permissions on the output's parent folder.") from exc
        if not renamed:
            raise SinkError(f"the file system refused to {purpose} ({where}). Check that the "
                            "source exists and the parent folder can be written.")

    def _delete(self, path: Any, what: str) -> None:
        """Delete ``path`` recursively; a failure is logged, not raised (the output is already
        in place, and the next successful run deletes it)."""
        try:
            self._fs.delete(path, True)
            log.info("Deleted %s: %s", what, path.toString())
        except Exception as exc:  # the commit is done; a leftover is only clutter
            log.warning("Could not delete %s at %s: %s. The next successful run of %s deletes "
                        "it.", what, path.toString(), error_line(exc), self.path)

    def _write_manifest(self, text: str) -> None:
        path = self._jvm.org.apache.hadoop.fs.Path(self._staging, MANIFEST_NAME)
        try:
            stream = self._fs.create(path, True)
            try:
                stream.write(bytearray(text.encode("utf-8")))
            finally:
                stream.close()
        except Exception as exc:
            raise SinkError(f"could not write the manifest {path.toString()}: {error_line(exc)}. "
                            f"The output at {self.path!r} is unchanged; check the space and "
                            "permissions of its parent folder, then run again.") from exc

    def _topmost_missing(self, folder: Any) -> Any:
        created = None
        while folder is not None and not self._fs.exists(folder):
            created, folder = folder, folder.getParent()
        return created

    def _remove_created_parents(self) -> None:
        """Remove, bottom-up, the folders above the staging folder that prepare() created,
        while they are empty (never a folder holding anything)."""
        if self._created is None:
            return
        chain, folder = [], self._parent
        while folder is not None and folder.toString() != self._created.toString():
            chain.append(folder)
            folder = folder.getParent()
        if folder is None:  # not below the created folder: nothing of ours to remove
            return
        for folder in [*chain, self._created]:
            if not self._fs.exists(folder) or len(self._fs.listStatus(folder)) > 0:
                return
            self._fs.delete(folder, False)


def _glob_escape(text: str) -> str:
    """``text`` as a literal Hadoop glob."""
    return re.sub(r"([\\*?\[\]{}^,!-])", r"\\\1", text)
