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
steps sees the staging folder Spark wrote, and fails before the read otherwise. S3 needs no
such step: its publish is S3 calls made here, so S3 works over Spark Connect too. Any other
scheme (``hdfs:``, ``abfs:``, ``gs:``...) is refused over Spark Connect before the read, with
a :class:`ConfigurationError` (use a classic session for those).

**What is atomic where** (one table; ``docs/airflow.md`` says what a reader sees when):

=============================================  ==============================================
store                                          how a run is published
=============================================  ==============================================
local (``file:``), HDFS                         the two renames above, each atomic (POSIX
                                               ``rename(2)``, one NameNode operation):
                                               ``<name>`` always holds a whole output, missing
                                               only between the renames (microseconds)
ABFS, GCS with a hierarchical namespace        the same renames, atomic there
S3 (``s3a:``, ``s3:``, ``s3n:``)                no rename: the objects are written under their
                                               final keys and the run is published by one
                                               conditional PUT of the manifest
                                               (:mod:`~airflow_provider_kafka_spark.sinks.files.objects`);
                                               over Spark Connect too
GCS without hierarchical namespace, WASB       the renames, which copy and delete every object
                                               there: not atomic, time proportional to the
                                               output; the previous output is still never
                                               deleted before the new one is complete
=============================================  ==============================================

One writer per path: two runs writing the same ``path`` at the same time may fail each other
(the second rename finds ``<name>`` taken, a cleanup removes the other's staging folder; on S3
the second publish is refused), never mix.

**Where the code is.**

* ``sink.py``: :class:`FileSink` (prepare / intake / write or adopt / commit / abort) and
  :func:`check_file_sink_arguments`;
* ``objects.py``: the publish on S3 (one conditional PUT of the manifest) and
  :func:`published_files`;
* ``swap.py``: the protocol: the folders of an attempt, inspect and recover (step 1), commit
  with its manifest and two renames (step 3), abort (step 4);
* ``filesystems.py``: the file-system calls (Hadoop's in the driver's JVM, or an executor's
  local ones) and where the steps run (``in_driver``, ``on_executor``).
"""

from airflow_provider_kafka_spark.sinks.files.filesystems import (
    connect_local_path,
    is_connect_session,
)
from airflow_provider_kafka_spark.sinks.files.objects import PublishConflictError, published_files
from airflow_provider_kafka_spark.sinks.files.sink import (
    DEAD_LETTER_FOLDER,
    FileSink,
    check_file_sink_arguments,
)
from airflow_provider_kafka_spark.sinks.files.swap import MANIFEST_NAME, PREVIOUS_MARK, STAGING_MARK

__all__ = [
    "DEAD_LETTER_FOLDER",
    "MANIFEST_NAME",
    "PREVIOUS_MARK",
    "STAGING_MARK",
    "FileSink",
    "PublishConflictError",
    "check_file_sink_arguments",
    "connect_local_path",
    "is_connect_session",
    "published_files",
]
