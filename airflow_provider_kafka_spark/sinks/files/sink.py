"""The :class:`FileSink`: the :class:`~airflow_provider_kafka_spark.sinks.base.Sink` steps of a
folder of files (prepare / intake / write or adopt / commit / abort), and
:func:`check_file_sink_arguments`.

The swap it runs is in :mod:`~airflow_provider_kafka_spark.sinks.files.swap`, the file systems
it runs on in :mod:`~airflow_provider_kafka_spark.sinks.files.filesystems`; the protocol as a
whole is described in :mod:`airflow_provider_kafka_spark.sinks.files`.
"""

from __future__ import annotations

import json
import logging
import posixpath
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_provider_kafka_spark.arguments import checkable
from airflow_provider_kafka_spark.causes import classify
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    KafkaSparkError,
    SinkError,
    cut,
    error_line,
    kafka_errors,
)
from airflow_provider_kafka_spark.naming import Dataset, dataset_of_path
from airflow_provider_kafka_spark.options import (
    DEAD_LETTER_FOLDER,
    check_column_names,
    check_data_source_name,
    check_writer_options,
)
from airflow_provider_kafka_spark.s3 import S3Settings, is_s3, settings_of_spark, split_s3
from airflow_provider_kafka_spark.sinks.base import RunInfo, Sink
from airflow_provider_kafka_spark.sinks.files import swap
from airflow_provider_kafka_spark.sinks.files.filesystems import (
    HadoopFiles,
    connect_local_path,
    in_driver,
    is_connect_session,
    on_executor,
)
from airflow_provider_kafka_spark.sinks.files.objects import ObjectRun, PublishConflictError
from airflow_provider_kafka_spark.sinks.files.swap import MANIFEST_NAME, STAGING_MARK, Layout
from airflow_provider_kafka_spark.spark.intake import Intake, LandedParquet, SinkInput, SparkRows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_kafka_spark.spark.read.landing import LandedFile, ParquetFolder

log = logging.getLogger(__name__)


def check_file_sink_arguments(path: Any, format: Any, options: Any, partition_by: Any,
                              owner: str = "FileSink", *, rendered: bool = True) -> None:
    """Raise :class:`ConfigurationError` for arguments no file sink can take (no Spark
    needed; the session checks the rest in :meth:`FileSink.prepare`); with ``rendered=False``
    (a sink in a DAG file) a templated ``path`` or ``format`` is checked once rendered."""
    if checkable(path, rendered=rendered) and (not isinstance(path, str) or not path.strip()):
        raise ConfigurationError(
            f"{owner}: path={path!r} is not valid; pass the folder of the output, e.g. "
            "'s3a://lake/events/2024-05-01T00' or '/data/events/2024-05-01T00'."
        )
    if checkable(format, rendered=rendered):
        check_data_source_name(owner, "format", format)
    check_writer_options(owner, "options", options)
    check_column_names(owner, "partition_by", partition_by)


class FileSink(Sink):
    """Write a DataFrame as files into the folder ``path``, replacing that folder as a whole
    only once the new output is complete (see :mod:`airflow_provider_kafka_spark.sinks.files`
    for the staging layout and what is atomic on which file system).

    :param path: the output folder, on any Hadoop file system the session reaches; on a Spark
        Connect session, a local path of the cluster's machines (``file:`` or absolute).
    :param format: a Spark data source name (``parquet``, ``json``, ``csv``, ``orc``...).
    :param options: Spark writer options.
    :param partition_by: columns to partition the folder by.
    :param s3: for an ``s3a://`` (or ``s3://``) path, how to reach the bucket:
        :class:`~airflow_provider_kafka_spark.s3.S3Settings`, or a function returning them
        (e.g. ``hooks.AwsConnection("aws_default")``, read when the run starts); the Spark
        session is given them for the bucket too. None: the session's own ``fs.s3a.*``
        settings (per bucket as S3A reads them).

    On S3 the run is published without renames, by a conditional PUT of its manifest (see
    :mod:`airflow_provider_kafka_spark.sinks.files.objects`); elsewhere the folder is swapped
    in by two renames (:mod:`~airflow_provider_kafka_spark.sinks.files.swap`).

    In the ingest operator ``path`` and ``format`` are templated, e.g.
    ``FileSink("s3a://lake/events/{{ data_interval_start | ds }}")``: the folder of the run's
    output, replaced as a whole by each run (a retry or a cleared run replaces that run's
    output).
    """

    template_fields: Sequence[str] = ("path", "format")

    def __init__(self, path: str, *, format: str = "parquet",
                 options: Mapping[str, Any] | None = None,
                 partition_by: Sequence[str] = (),
                 s3: S3Settings | Callable[[], S3Settings] | None = None) -> None:
        check_file_sink_arguments(path, format, options, partition_by, rendered=False)
        if s3 is not None and not (isinstance(s3, S3Settings) or callable(s3)):
            raise ConfigurationError(
                f"FileSink: s3={type(s3).__name__} is not valid; pass S3Settings(...), a "
                "function returning them (e.g. hooks.AwsConnection('aws_default')), or None "
                "(the Spark session's fs.s3a.* settings).")
        self.s3 = s3
        self.path = path.strip() if isinstance(path, str) else path
        self.format = format.strip() if isinstance(format, str) else format
        self.options = dict(options or {})
        self.partition_by = [c.strip() for c in partition_by]
        self._run: Callable[..., Any] | None = None  # runs a step where the files are
        self._layout: Layout | None = None
        self._staged = False  # the staging folder exists (prepare succeeded, no commit yet)
        self._created: str | None = None  # the topmost parent folder prepare() created
        self._writes_to = ""  # the staging folder as Spark's writer is given it
        self._codec = "snappy"  # the session's Parquet codec, unless options set one
        self._connect = False  # prepared on a Spark Connect session
        self._objects: ObjectRun | None = None  # on S3: the attempt's publish
        self._object_names: list[str] = []  # on S3: the run's objects, once written
        self._empty_names: list[str] = []  # on S3: the empty write's (the output without rows)

    def __repr__(self) -> str:
        return (f"FileSink({self.path!r}, format={self.format!r}"
                + (f", options={self.options!r}" if self.options else "")
                + (f", partition_by={self.partition_by!r}" if self.partition_by else "") + ")")

    def for_run(self, run: RunInfo) -> FileSink:
        """A new sink of the rendered arguments (nothing of ``run`` is needed)."""
        return FileSink(self.path, format=self.format, options=self.options,
                        partition_by=self.partition_by, s3=self.s3)

    def dataset(self, location: str | None = None) -> Dataset:
        """The output folder's dataset (``file``, ``s3://bucket``...)."""
        return dataset_of_path(self.path)

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
        given = {k.lower(): v for k, v in self.options.items()}.get("compression")
        self._codec = str(given or spark.conf.get(  # Spark's option names ignore case
            "spark.sql.parquet.compression.codec", "snappy")).lower()
        self._connect = is_connect_session(spark)
        if is_s3(self.path):
            self._prepare_objects(spark, shaped)
            return
        if self._connect:
            target = connect_local_path(self.path)
            self._run = on_executor(spark)
            self._layout = Layout.of(target, posixpath.dirname(target),
                                     posixpath.basename(target), token, posixpath.join)
            self._writes_to = f"file:{self._layout.staging}"
        else:
            files = self._hadoop_files(spark)
            self._run = in_driver(files)
            target = files.qualified(self.path)
            parent = files.parent(target)
            if parent is None:
                self._root_error()
            self._layout = Layout.of(target, parent, files.name(target), token, files.child)
            self._writes_to = self._layout.staging
        if self._layout.name in ("", "/", ".", ".."):
            self._root_error()
        self._created = self._run(swap.inspect, self._layout, self.path)
        self._staged = True
        try:
            self._writer(shaped.limit(0)).save(self._writes_to)
            if is_connect_session(spark):
                self._run(swap.check_staged, self._layout, self.path)
        except KafkaSparkError:
            self.abort()
            raise
        except Exception as exc:
            self.abort()
            raise self._empty_write_failed(shaped, exc) from exc

    def write(self, df: DataFrame, dead_letters: DataFrame | None = None) -> dict[str, Any]:
        """Write ``df`` into the staging folder, and ``dead_letters`` (as Parquet) into its
        ``_dead_letter`` folder, published with it; ``path`` is untouched."""
        self._require_prepared("write")
        mode = "errorifexists" if self._objects is None else "append"
        if self._objects is not None:
            self._objects.mark()
        try:
            with kafka_errors():
                self._writer(df).save(self._writes_to)
                if dead_letters is not None:
                    dead_letters.write.mode(mode).parquet(
                        f"{self._writes_to.rstrip('/')}/{DEAD_LETTER_FOLDER}")
        except Exception as exc:
            cause = classify(exc)
            if self._objects is None or cause.kind != "concurrent writer":
                raise
            raise PublishConflictError(
                f"the file sink's Spark write to {self.path} failed: {error_line(exc)}. "
                f"Another run writes the same folder at the same time. {cause.says()} Nothing "
                "of this attempt was published; run one writer per folder.") from exc
        if self._objects is not None:
            self._object_names = self._objects.spark_wrote()
        if dead_letters is None:
            return self.describe()
        return {**self.describe(), "dead_letter": {
            "path": f"{self.path.rstrip('/')}/{DEAD_LETTER_FOLDER}", "format": "parquet"}}

    def intake(self, given: SinkInput) -> Intake:
        """Staged (nothing is visible before :meth:`commit`). Records the native readers hand
        on (as read, or decoded by the readers themselves; shaped by ``ingest``'s ``shape``,
        if any) land as Parquet files in the staging folder (on S3: the output folder),
        written by the readers, then :meth:`adopt`; Spark's writer writes them instead
        (:meth:`write`) for a format other than Parquet, options other than ``compression``,
        ``partition_by`` of columns the shape does not make, a file system other than the
        local one or S3, a Spark Connect session, or records transformed."""
        self._require_prepared("intake")
        folder = self._landing_folder(given) if given.native_rows else None
        return Intake(LandedParquet(folder, self.adopt) if folder else SparkRows(), staged=True)

    def _landing_folder(self, given: SinkInput) -> ParquetFolder | None:
        """The folder the readers may write the records into as Parquet files (shaped and
        partitioned as ``given`` and ``partition_by`` say), or None when Spark's writer must
        write them (see :meth:`intake`)."""
        from airflow_provider_kafka_spark.spark.read.landing import PARQUET_CODECS, ParquetFolder

        local = not self._connect and self._writes_to.startswith("file:/")
        shaped = set() if given.shape is None else set(given.shape.names())
        if (self.format.lower() != "parquet" or not set(self.partition_by) <= shaped
                or not (local or self._objects is not None)
                or {k.lower() for k in self.options} - {"compression"}
                or self._codec not in PARQUET_CODECS):
            return None
        shape, by = given.shape, tuple(self.partition_by)
        if self._objects is not None:
            bucket, prefix = self._objects.bucket, self._objects.prefix
            return ParquetFolder(f"s3://{bucket}/{prefix}", self._codec, self._objects.settings,
                                 shape=shape, partition_by=by)
        return ParquetFolder(self._writes_to[len("file:"):], self._codec, shape=shape,
                             partition_by=by)

    def adopt(self, files: Sequence[LandedFile]) -> dict[str, Any]:
        """Instead of :meth:`write`: the readers wrote ``files`` into the folder
        :meth:`intake` named (:class:`LandedParquet`); every other file there goes. The
        output's description."""
        layout = self._require_prepared("adopt")
        names = [f.name for f in files]
        if self._objects is not None:
            self._object_names = sorted(names)
            self._objects.written.update(names)
        else:
            assert self._run is not None and layout is not None
            self._run(swap.keep_only, layout, self.path, sorted(names))
        if not any(n.startswith(f"{DEAD_LETTER_FOLDER}/") for n in names):
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
        if self._objects is not None:
            self._objects.publish(self._object_names or self._empty_names, dict(manifest))
            self._staged = False
            return
        assert self._run is not None and layout is not None
        self._run(swap.commit, layout, self.path, json.dumps(dict(manifest), indent=2,
                                                             sort_keys=True))
        self._staged = False

    def abort(self) -> None:
        """Delete the staging folder, put the previous output back if it was set aside, and
        remove the empty parent folders :meth:`prepare` created. Never raises: what cannot be
        cleaned is logged, and the next successful run of the same path deletes it. On S3:
        the objects this attempt wrote that no published manifest lists are deleted."""
        if self._objects is not None:
            self._objects.abort()
            self._staged = False
            return
        if self._run is None or self._layout is None:
            return
        try:
            self._run(swap.abort, self._layout, self.path, self._created)
        except Exception as exc:  # runs while another exception propagates: log, never mask it
            log.warning("The file sink could not clean up after the failure: %s. A staging folder "
                        "(%s*) may remain next to %s; the next successful run of the same path "
                        "deletes it.", error_line(exc), STAGING_MARK, self.path)
        self._staged = False

    # -- helpers ---------------------------------------------------------------------------

    def _writer(self, df: DataFrame, mode: str | None = None) -> Any:
        mode = mode or ("append" if self._objects is not None else "overwrite")
        writer = df.write.mode(mode).format(self.format).options(**self.options)
        return writer.partitionBy(*self.partition_by) if self.partition_by else writer

    def _hadoop_files(self, spark: SparkSession) -> HadoopFiles:
        """The Hadoop file system of ``path`` in the driver's JVM; the format is looked up
        first (no job, no file touched). The file system gets the session's Hadoop
        configuration, the one Spark's writer uses (``spark.hadoop.*`` and what was set on the
        session since, e.g. ``FileSink(s3=...)``'s per-bucket S3A options): Hadoop caches a
        file system per scheme and bucket, and one made here with other settings would be the
        writer's too."""
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
            cause = classify(exc, otherwise=False)
            if cause.retryable:  # the lookup reads the classpath, nothing remote: rarely
                raise SinkError(f"the file sink could not look up the output format "
                                f"{self.format!r}: {error_line(exc)}. {cause.says()} Nothing "
                                "was read or written.") from exc
            raise self._unknown_format(exc) from exc
        try:
            target = jvm.org.apache.hadoop.fs.Path(self.path)
            hadoop = spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[attr-defined]
            return HadoopFiles(jvm, target.getFileSystem(hadoop))
        except Exception as exc:
            cause = classify(exc)
            if cause.retryable:  # e.g. a file system whose initialize() reaches its server
                raise SinkError(
                    f"the file sink cannot reach path {self.path!r}: {error_line(exc)}. "
                    f"{cause.says()} Nothing was read or written.") from exc
            raise ConfigurationError(
                f"the file sink cannot reach path {self.path!r}: {error_line(exc)}. "
                f"{cause.says()} Check the URI scheme and that its file system is configured in "
                "the Spark session. Nothing was read or written."
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

    def _empty_write_failed(self, shaped: DataFrame, exc: BaseException) -> KafkaSparkError:
        """The error of a failed empty write in :meth:`prepare`, by its cause
        (:func:`~airflow_provider_kafka_spark.causes.classify`): an unknown format or a refused
        argument is a :class:`ConfigurationError`; another writer of the same S3 folder a
        :class:`PublishConflictError`; an I/O error, a timeout, throttling or a server error
        (anything not known to be permanent) a :class:`SinkError`, which Airflow retries."""
        cause = classify(exc)
        text = str(exc)
        if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text:
            return self._unknown_format(exc)
        wrote = (f"the file sink could not write an empty DataFrame with the output's columns "
                 f"({cut(shaped.schema.simpleString(), 300)}) as {self.format!r} to "
                 f"{self._writes_to}: {error_line(exc)}.")
        after = "Nothing was read or written." if self._objects is None else "Nothing was read."
        if cause.kind == "concurrent writer" and self._objects is not None:
            return PublishConflictError(
                f"{wrote} Another run writes the same folder at the same time. "
                f"{cause.says()} Nothing of this attempt was published; run one writer per "
                f"folder. {after}")
        if cause.retryable:
            return SinkError(f"{wrote} {cause.says()} {after}")
        hint = ""
        if self._objects is not None and cause.kind == "missing class":
            hint = (f" Spark has no file system for {self.path.split(':', 1)[0]}: put "
                    "hadoop-aws and the AWS SDK of the session's Hadoop version on its "
                    "classpath (spark.jars).")
        where = ("the bucket's credentials" if self._objects is not None
                 else "that the folder's parent can be written")
        return ConfigurationError(
            f"{wrote}{hint} {cause.says()} Check the format, options ({self.options}) and "
            f"partition_by ({self.partition_by}) against these columns, and {where}. {after}")

    def _prepare_objects(self, spark: SparkSession, shaped: DataFrame) -> None:
        """On S3: the store's checks (:meth:`ObjectRun.inspect`: credentials, bucket, a write),
        then an empty write with the output's columns (it checks the format, options and
        ``partition_by`` with Spark's S3A, and is the output of a run without records; a run
        with records does not list it, and its publish deletes it): into a scratch folder of
        the attempt's own, its file then copied up into the folder, so that two writers of
        one folder at the same time never share Hadoop's ``_temporary`` (one job's commit
        removes it under the other's)."""
        bucket, _ = split_s3(self.path)
        if self.s3 is None:
            settings = settings_of_spark(spark, bucket)
        else:
            settings = self.s3() if callable(self.s3) else self.s3
            if not isinstance(settings, S3Settings):
                raise ConfigurationError(f"FileSink: s3 returned {type(settings).__name__}, "
                                         "not S3Settings.")
            for key, value in settings.hadoop_options(bucket).items():
                spark.conf.set(key, value)  # Spark's writer reaches the bucket the same way
        if not self._connect:
            self._hadoop_files(spark)  # the format is a data source of the session
        objects = ObjectRun(self.path, settings)
        objects.inspect()
        self._objects, self._layout, self._staged = objects, None, True
        scratch = objects.scratch()  # its own _temporary: another writer's job cannot remove it
        self._writes_to = f"{self.path.rstrip('/')}/{scratch}"
        try:
            self._writer(shaped.limit(0), mode="append").save(self._writes_to)
            self._empty_names = objects.adopt_scratch(scratch)
        except KafkaSparkError:
            objects.drop_scratch(scratch)
            self.abort()
            raise
        except Exception as exc:
            objects.drop_scratch(scratch)
            self.abort()
            raise self._empty_write_failed(shaped, exc) from exc
        finally:
            self._writes_to = self.path

    def _require_prepared(self, step: str) -> Layout | None:
        """The attempt's staging layout (None on S3, where there is none)."""
        if self._objects is not None and self._staged:
            return None
        if not self._staged or self._layout is None:
            raise SinkError(f"FileSink.{step}() called without a successful prepare() (or after "
                            "commit/abort); call prepare(spark, shaped) first, once per write.")
        return self._layout
