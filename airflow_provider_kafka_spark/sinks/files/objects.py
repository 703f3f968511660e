"""The file sink on an object store (S3): a run is published by **one conditional PUT** of its
manifest, never by renames.

For ``path = s3a://<bucket>/<prefix>``::

    <prefix>/part-<topic>-<partition>-<start>-<stop>.<codec>.parquet   the readers' objects,
                                               named by their split: a retry rewrites the same keys
    <prefix>/part-<n>-<uuid>-c000...            Spark's writer's objects (a transform, a format
                                               other than Parquet, partition_by), and their folders
    <prefix>/_dead_letter/...                  undecodable records (Spark's writer)
    <prefix>/_kafka_spark_manifest.json        the published run: its files, ranges and counts

**Protocol** (:class:`ObjectRun`, one per attempt):

1. :meth:`ObjectRun.inspect` (before the read): list the folder (wrong keys, a missing bucket, a
   denied list fail here as :class:`ConfigurationError`, an unreachable endpoint as
   :class:`SinkError`), read the manifest's ETag (or that there is none), and PUT then DELETE a
   probe object (a denied write fails here). The probe's ``LastModified`` is the attempt's start
   on the store's clock.
   Then an empty write with the output's columns by Spark's writer, into a scratch folder of
   the attempt's own (:meth:`ObjectRun.scratch`: Hadoop's committer shares ``<folder>/_temporary``
   between every job writing the folder, and one job's commit removes it under the others), its
   file copied up into the folder (:meth:`ObjectRun.adopt_scratch`): the output of a run
   without records.
2. The data objects are written under their final keys, each complete or not at all
   (:class:`~airflow_provider_kafka_spark.s3.ObjectUpload`, or Spark's committer).
3. :meth:`ObjectRun.publish`: every object the run names must be there (one listing); then the
   manifest, listing exactly those objects, is PUT with ``If-Match: <the ETag seen in step 1>``
   (``If-None-Match: *`` when there was none). S3 refuses it (412/409) when another writer
   published meanwhile: the attempt fails with :class:`PublishConflictError`, nothing of it is
   published. After the PUT, objects the manifest does not list and that are older than the
   manifest (earlier runs, failed attempts) are deleted, and multipart uploads begun before this
   attempt (killed tasks) are aborted. An object newer than the manifest belongs to a writer
   that started after it: it is left to that writer.
4. :meth:`ObjectRun.abort`: the objects this attempt wrote that the manifest now in place does
   not list are deleted.

A reader of the manifest (:func:`published_files`) sees exactly one run at every moment. A
reader that lists the folder sees the published run plus, while a re-run is under way, the
objects it has written so far that are new (a re-run of the same slice by the readers rewrites
the same keys with the same records) and, until the re-run's cleanup, the previous run's objects
that the new one does not list.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_kafka_spark.errors import SinkError, error_line
from airflow_provider_kafka_spark.s3 import S3Settings, error_code, split_s3, store_error

log = logging.getLogger(__name__)

MANIFEST_NAME = "_kafka_spark_manifest.json"
PROBE_MARK = "_kafka_spark_probe-"
SCRATCH_MARK = "_kafka_spark_scratch-"
"""The folder of one attempt's own Spark write (prepare's empty write) under the output
folder, copied up and deleted before the read."""
_SPARK_JOB = re.compile(r"^part-\d{5}-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                        r"[0-9a-f]{12})")
_LOST_RACE = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")
_MISSING = ("404", "NoSuchKey", "NotFound")
"""The error codes of an object that is not there (a GET says NoSuchKey, a HEAD only 404)."""


class PublishConflictError(SinkError):
    """Another writer published the same output folder while this attempt wrote it."""


@dataclass(frozen=True)
class Listed:
    """An object under the output folder: its key relative to the folder, and when it was
    last written (the store's clock)."""

    name: str
    modified: datetime


@dataclass
class ObjectRun:
    """One attempt's publish of the output folder ``path`` on S3 (see the module docs)."""

    path: str
    settings: S3Settings
    bucket: str = field(init=False)
    prefix: str = field(init=False)
    began: datetime | None = None
    previous_etag: str | None = None
    # the folder's objects (name -> when last written) when the attempt began, or at mark()
    before: dict[str, datetime] = field(default_factory=dict)
    written: set[str] = field(default_factory=set)  # what this attempt published or wrote
    _client: Any = None

    def __post_init__(self) -> None:
        self.bucket, self.prefix = split_s3(self.path)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.settings.client()
        return self._client

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _where(self, name: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(name)}"

    # -- step 1 ----------------------------------------------------------------------------

    def inspect(self) -> None:
        """List the folder, read the manifest's ETag, write and delete a probe (see step 1)."""
        listed = self.listing(doing="list")
        self.before = {o.name: o.modified for o in listed}
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key(MANIFEST_NAME))
            self.previous_etag = head["ETag"]
        except Exception as exc:
            if error_code(exc) not in _MISSING:
                raise store_error(exc, "read the manifest", self._where(MANIFEST_NAME)) from exc
            self.previous_etag = None
        probe = self.key(f"{PROBE_MARK}{uuid.uuid4().hex}")
        try:
            self.client.put_object(Bucket=self.bucket, Key=probe, Body=b"")
            self.began = self.client.head_object(Bucket=self.bucket, Key=probe)["LastModified"]
            self.client.delete_object(Bucket=self.bucket, Key=probe)
        except Exception as exc:
            raise store_error(exc, "write", f"s3://{self.bucket}/{probe}") from exc

    def listing(self, *, doing: str = "list",
                hint: str = "Nothing was read or written.") -> list[Listed]:
        """Every object under the folder (recursively), but the manifest and S3A's directory
        markers (empty objects named ``<folder>/``, which hold no data); ``hint`` ends the
        message of a failure (what it left)."""
        found = []
        folder = f"{self.prefix}/" if self.prefix else ""
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=folder):
                for item in page.get("Contents", ()):
                    name = item["Key"][len(folder):]
                    if name and name != MANIFEST_NAME and not name.endswith("/"):
                        found.append(Listed(name, item["LastModified"]))
        except Exception as exc:
            raise store_error(exc, doing, self._where(), hint=hint) from exc
        return found

    # -- what Spark's writer wrote ------------------------------------------------------------

    def mark(self) -> None:
        """Before a Spark write: what the folder holds now (:meth:`spark_wrote` tells the
        write's objects from these)."""
        self.before = {o.name: o.modified for o in self.listing()}

    def spark_wrote(self) -> list[str]:
        """The objects Spark's writer added to the folder since :meth:`mark` (or
        :meth:`inspect`): the new part files of one write job (by the job id in their names),
        with their folders (``partition_by``, ``_dead_letter``). The markers it wrote, also
        those it rewrote over an earlier attempt's (``_SUCCESS``), are this attempt's to delete.

        Raises:
            PublishConflictError: part files of two jobs appeared (another writer of this
                folder at the same time): which are this attempt's cannot be told.
        """
        listed = self.listing()
        new = [o.name for o in listed if o.name not in self.before]
        self.written.update(new)  # markers (_SUCCESS) too: this attempt's to delete
        self.written.update(o.name for o in listed  # and what the write rewrote
                            if o.name in self.before and o.modified != self.before[o.name])
        parts = [n for n in new if not n.rsplit("/", 1)[-1].startswith(("_", "."))]
        jobs: dict[str, set[str]] = {}
        for name in parts:
            match = _SPARK_JOB.match(name.rsplit("/", 1)[-1])
            top = "_dead_letter" if name.startswith("_dead_letter/") else ""
            jobs.setdefault(top, set()).add(match.group(1) if match else "?")
        if any(len(ids) > 1 for ids in jobs.values()):
            raise PublishConflictError(
                f"the file sink found the files of several Spark writes in {self.path} "
                "(another run writes the same folder at the same time); this attempt cannot "
                "tell its own apart and publishes nothing. Run one writer per folder.")
        return sorted(parts)

    # -- a Spark write of its own --------------------------------------------------------------

    def scratch(self) -> str:
        """A folder of this attempt's own under the output folder (a name), for a Spark write
        that must not share the folder's ``_temporary`` with another writer's job (Hadoop's
        committer removes the whole ``_temporary`` when one job commits)."""
        return f"{SCRATCH_MARK}{uuid.uuid4().hex}"

    def adopt_scratch(self, scratch: str) -> list[str]:
        """Copy the data files Spark's writer wrote into ``scratch`` up into the output folder
        under the same names (a job id in each: no other writer's file has the name), delete
        ``scratch``, and return the names; they are this attempt's.

        Raises:
            ConfigurationError, SinkError: the store refused or did not answer (the scratch
                folder is deleted by :meth:`drop_scratch`).
        """
        folder = f"{scratch}/"
        names = [o.name[len(folder):] for o in self.listing(doing="list the empty write in")
                 if o.name.startswith(folder)]
        parts = sorted(n for n in names if not n.rsplit("/", 1)[-1].startswith(("_", ".")))
        for name in parts:
            try:
                self.client.copy_object(Bucket=self.bucket, Key=self.key(name), CopySource={
                    "Bucket": self.bucket, "Key": self.key(f"{folder}{name}")})
            except Exception as exc:
                raise store_error(exc, "copy", self._where(name),
                                  hint="Nothing was read.") from exc
            self.written.add(name)
        self.drop_scratch(scratch)
        return parts

    def drop_scratch(self, scratch: str) -> None:
        """Delete everything under ``scratch`` (S3A's markers too). Never raises: a leftover
        is deleted by the next publish of the folder (it is older than its manifest)."""
        folder = self.key(f"{scratch}/")
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=folder)
            keys = [{"Key": o["Key"]} for page in pages for o in page.get("Contents", ())]
            for i in range(0, len(keys), 1000):
                self.client.delete_objects(Bucket=self.bucket,
                                           Delete={"Objects": keys[i:i + 1000], "Quiet": True})
        except Exception as exc:
            log.warning("The file sink could not delete its scratch folder s3://%s/%s: %s. The "
                        "next publish of this folder deletes it.", self.bucket, folder,
                        error_line(exc))

    # -- step 3 -------------------------------------------------------------------------------

    def publish(self, names: Sequence[str], manifest: dict[str, Any]) -> None:
        """Check that every object of ``names`` is there, PUT the manifest (with ``names`` as
        its ``files``) conditionally, then clean up (see step 3).

        A PUT that fails (a refused condition included) is checked by reading the manifest
        back: when it is this attempt's (the store carried out a try whose answer was lost, and
        the client's retry met it), the run is published.

        Raises:
            SinkError: an object is missing, or the PUT failed; nothing was published (or, when
                the manifest could not be read back either, the message says it is unknown).
            PublishConflictError: another writer published the folder since :meth:`inspect`.
        """
        self.written.update(names)
        present = {o.name for o in self.listing(doing="list before publishing",
                                                hint="Nothing was published.")}
        missing = sorted(set(names) - present)
        if missing:
            self._check_unchanged()
            raise SinkError(f"the file sink cannot publish {self.path}: {len(missing)} of the "
                            f"run's objects are missing ({missing[:3]}); another writer's "
                            "cleanup or a lifecycle rule removed them. Nothing was published; "
                            "run again.")
        body = json.dumps({**manifest, "files": sorted(names)}, indent=2, sort_keys=True)
        condition = ({"IfMatch": self.previous_etag} if self.previous_etag is not None
                     else {"IfNoneMatch": "*"})
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(MANIFEST_NAME),
                                   Body=body.encode("utf-8"), ContentType="application/json",
                                   **condition)
        except Exception as exc:
            # The store may have carried out a PUT whose answer was lost (a reset, a timeout):
            # the client's retry of the conditional PUT is then refused by the manifest this
            # attempt wrote itself, and a failure of the last try says nothing of the first.
            ours = self._holds_manifest(body)
            if ours:
                log.info("The manifest PUT to %s failed (%s), but the manifest there is this "
                         "attempt's (the store carried out a try whose answer was lost): the "
                         "run is published.", self.path, error_line(exc, 200))
            elif error_code(exc) in _LOST_RACE and ours is not None:
                raise PublishConflictError(
                    f"another run published {self.path} while this attempt wrote it (the "
                    f"manifest changed: S3 answered {error_code(exc)}). Nothing of this attempt "
                    "was published. Run one writer per folder; a retry publishes this "
                    "slice over the other run's.") from exc
            else:
                raise store_error(exc, "publish the manifest", self._where(MANIFEST_NAME), hint=(
                    "Nothing was published." if ours is not None else
                    "Whether it was published is unknown (the manifest could not be read back "
                    "either); a retry publishes this slice again.")) from exc
        self._clean(set(names))

    def _holds_manifest(self, body: str) -> bool | None:
        """Whether the manifest at the folder is ``body`` (this attempt's: its objects' names
        are its own); None when it cannot be read."""
        try:
            there = self.client.get_object(Bucket=self.bucket,
                                           Key=self.key(MANIFEST_NAME))["Body"].read()
        except Exception as exc:
            return False if error_code(exc) in _MISSING else None
        return bool(there == body.encode("utf-8"))

    def _check_unchanged(self) -> None:
        """Raise :class:`PublishConflictError` when the manifest is not the one
        :meth:`inspect` saw (another writer published meanwhile)."""
        try:
            now: str | None = self.client.head_object(
                Bucket=self.bucket, Key=self.key(MANIFEST_NAME))["ETag"]
        except Exception as exc:
            if error_code(exc) not in _MISSING:
                raise store_error(exc, "read the manifest", self._where(MANIFEST_NAME),
                                  hint="Nothing was published.") from exc
            now = None
        if now != self.previous_etag:
            raise PublishConflictError(
                f"another run published {self.path} while this attempt wrote it (the "
                "manifest changed, and its cleanup removed objects of this attempt). Nothing "
                "of this attempt was published. Run one writer per folder.")

    def _clean(self, listed: set[str]) -> None:
        """After the publish: delete this attempt's objects the manifest does not list, and
        the other objects it does not list that are older than it; abort multipart uploads
        begun before this attempt. Failures are logged only (the run is published; the next
        one cleans)."""
        own, self.written = self.written - listed, set()
        try:
            published = self.client.head_object(Bucket=self.bucket,
                                                Key=self.key(MANIFEST_NAME))["LastModified"]
            stale = [o.name for o in self.listing() if o.name not in listed
                     and (o.modified < published or o.name in own)
                     and not self._others_scratch(o)]
            self._delete(stale)
            if stale:
                log.info("Deleted %d object(s) of earlier runs or attempts from %s.",
                         len(stale), self.path)
            self._abort_uploads()
        except Exception as exc:  # published already: a leftover is only clutter
            log.warning("The run is published at %s, but cleaning up after it failed: %s. The "
                        "next run of this folder cleans up.", self.path, error_line(exc))

    def _others_scratch(self, listed: Listed) -> bool:
        """Whether ``listed`` is in the scratch folder of a writer that began after this
        attempt (its empty write may be under way; one that began before is a leftover)."""
        return (listed.name.startswith(SCRATCH_MARK) and self.began is not None
                and listed.modified >= self.began)

    def _abort_uploads(self) -> None:
        folder = f"{self.prefix}/" if self.prefix else ""
        answer = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=folder)
        for upload in answer.get("Uploads", ()):
            if self.began is not None and upload["Initiated"] < self.began:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"],
                                                   UploadId=upload["UploadId"])
                log.info("Aborted an unfinished upload of an earlier attempt: s3://%s/%s",
                         self.bucket, upload["Key"])

    def _delete(self, names: Iterable[str]) -> None:
        keys = [{"Key": self.key(n)} for n in names]
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(Bucket=self.bucket,
                                       Delete={"Objects": keys[i:i + 1000], "Quiet": True})

    # -- step 4 -------------------------------------------------------------------------------

    def abort(self) -> None:
        """Delete what this attempt wrote that the manifest in place does not list. Never
        raises (what remains, the next publish deletes)."""
        if not self.written:
            return
        try:
            kept = set(published_names(self.client, self.bucket, self.key(MANIFEST_NAME)))
            self._delete(sorted(self.written - kept))
            self.written.clear()
        except Exception as exc:  # runs while another exception propagates
            log.warning("The file sink could not delete this attempt's objects in %s: %s. The "
                        "next publish of this folder deletes them.", self.path, error_line(exc))


def published_names(client: Any, bucket: str, manifest_key: str) -> list[str]:
    """The ``files`` of the manifest at ``manifest_key`` (none when it does not exist)."""
    try:
        body = client.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
    except Exception as exc:
        if error_code(exc) in _MISSING:
            return []
        raise
    return list(json.loads(body).get("files", ()))


def published_files(path: str, s3: S3Settings | None = None) -> list[str]:
    """The objects of the run published at the S3 folder ``path``, as URIs of ``path``'s
    scheme: what a reader reads to see exactly that run, e.g. ::

        spark.read.parquet(*published_files("s3a://lake/orders/2026-11-28T09", settings))
        pyarrow.parquet.read_table([f.split("://", 1)[1] for f in files],
                                   filesystem=settings.filesystem())

    An empty list when nothing is published there.

    Raises:
        ConfigurationError, SinkError: the store refused or did not answer.
    """
    settings = s3 or S3Settings()
    bucket, prefix = split_s3(path)
    key = f"{prefix}/{MANIFEST_NAME}" if prefix else MANIFEST_NAME
    try:
        names = published_names(settings.client(), bucket, key)
    except Exception as exc:
        raise store_error(exc, "read the manifest", f"s3://{bucket}/{key}",
                          hint="Nothing was read.") from exc
    base = path.rstrip("/")
    return [f"{base}/{name}" for name in names]
