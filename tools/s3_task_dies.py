"""A PySpark daemon module (``spark.python.daemon.module=tools.s3_task_dies``) whose Python
workers die in the middle of an S3 upload: in the first attempt of the task of split 0, the
readers' :class:`~airflow_provider_kafka_spark.s3.ObjectUpload` uploads in parts of
:data:`PART_BYTES` and the worker SIGKILLs itself right after the first part, leaving an
unfinished multipart upload on the store. Every other task (and that task's next attempt)
uploads as the package does. Used by ``tools/s3_killpoint.py``'s ``--task-dies-mid-upload``.

The workers are forked from this daemon, so they run with these wrappers; then it is
PySpark's own daemon (``pyspark.daemon.manager``).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from airflow_provider_kafka_spark import s3

PART_BYTES = 64 * 1024
"""The part size of the dying upload (S3's 5 MiB minimum applies only when an upload is
completed, which this one never is)."""

_init = s3.ObjectUpload.__init__
_upload_part = s3.ObjectUpload._upload_part


def _dies() -> bool:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context is not None and context.partitionId() == 0 and context.attemptNumber() == 0


def _small_parts(self: Any, client: Any, bucket: str, key: str,
                 part_bytes: int = s3.PART_BYTES) -> None:
    _init(self, client, bucket, key, PART_BYTES if _dies() else part_bytes)


def _dies_after_the_first_part(self: Any, body: bytes) -> None:
    _upload_part(self, body)
    if _dies():
        os.kill(os.getpid(), signal.SIGKILL)


s3.ObjectUpload.__init__ = _small_parts  # type: ignore[method-assign]
s3.ObjectUpload._upload_part = _dies_after_the_first_part  # type: ignore[method-assign]

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
