"""S3 kill points: SIGKILL an ingest into an S3 folder before, during or after its publish, or
let a reader task die in the middle of its upload; the caller then checks the folder and runs
the same ingest again.

A child process (``python -m tools.s3_killpoint child [--task-dies-mid-upload]``) takes the S3
endpoint from its first stdin line (JSON; the keys go on no command line), starts its own
local SparkSession with the s3a jars (``tools/s3_jars.py``) pointed at that endpoint, warms up,
prints ``READY``, takes its :class:`Job` (the next stdin line) and runs
``ingest(spark, ranges, config, FileSink(job.path))``: the readers upload each split's Parquet
under its final key, and the run is published by one conditional PUT of the manifest
(``airflow_provider_kafka_spark/sinks/files/objects.py``). By ``job.hold`` it prints a line and
waits for its kill:

``before``
    ``PREPARED`` once the sink's ``prepare`` returned (the store inspected, the empty write
    with the output's columns in the folder), before anything is read;
``uploaded``
    ``UPLOADED`` when the sink's ``commit`` begins: every reader's object is uploaded, the
    manifest is not PUT;
``published``
    ``PUBLISHED`` once the manifest's PUT returned, before the cleanup of objects it does not
    list (the child wraps the publish's private cleanup step, ``ObjectRun._clean``: there is
    no public hook between the two);
``after``
    ``COMMITTED`` once the commit returned (published and cleaned up); the ingest never
    returns;
``none``
    no hold: ``DONE <result JSON>`` at the end.

With ``--task-dies-mid-upload`` the child runs on ``local[2,2]`` (a failed task is tried again
once) and its Python workers come from the daemon module :mod:`tools.s3_task_dies`: the first
attempt of the task of split 0 uploads its object in small parts and SIGKILLs itself right
after the first part (an unfinished multipart upload stays on the store); its second attempt
uploads the object whole.

:class:`S3Child` is the caller's side: the child in its own process group (stderr in
``<run_dir>/child.log``), its protocol lines through a reader thread, :meth:`S3Child.kill`
(SIGKILL to the group and every descendant, by pid). ``tests/integration/test_s3_faults.py``
uses it. A held child that is never killed gives up after :data:`HOLD_S`, or when its
parent's pipe closes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MOMENTS = ("before", "uploaded", "published", "after")
HOLD_S = 600.0
"""How long a held child waits for its kill before it gives up."""
CHILD_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""A short-lived driver needs about half the CPU with the C1 compiler only and no parallel
collector threads."""


@dataclass(frozen=True)
class Job:
    """One ingest for a child: ``ranges`` (an ``OffsetRanges``' JSON) of the topics at
    ``bootstrap`` into the S3 folder ``path`` (``s3a://bucket/prefix``), held at ``hold``
    (one of :data:`MOMENTS`, or ``none``); ``decoded``: the values decoded as text by the
    readers and landed partitioned by the record's hour (:data:`DECODED_SHAPE`)."""

    path: str
    bootstrap: str
    ranges: str
    hold: str = "none"
    decoded: bool = False

    def __post_init__(self) -> None:
        if self.hold not in (*MOMENTS, "none"):
            raise ValueError(f"hold={self.hold!r}: pass one of {MOMENTS} or 'none'")


def decoded_shape() -> Any:
    """The shape of a ``decoded`` job: partition, offset, the value as text, the hour."""
    from airflow_provider_kafka_spark.shaping import Derived, Shape

    return Shape(["partition", "offset", "value"], {"hour": Derived("timestamp", "hour")})


class S3Child:
    """A child driver (see the module docs), started at once and given its :class:`Job` later
    (start it early, it takes seconds to warm up)."""

    def __init__(self, endpoint: Any, run_dir: Path, *, task_dies_mid_upload: bool = False
                 ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = run_dir / "child.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        command = [sys.executable, "-m", "tools.s3_killpoint", "child"]
        if task_dies_mid_upload:
            command.append("--task-dies-mid-upload")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen(command, cwd=run_dir, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._write(json.dumps({"url": endpoint.url, "access_key": endpoint.access_key,
                                "secret_key": endpoint.secret_key,
                                "region": endpoint.region}))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def _write(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def send(self, job: Job) -> None:
        """Give the child its job (it starts once it is ready)."""
        self._write(json.dumps(asdict(job)))

    def expect(self, word: str, timeout: float) -> str:
        """The rest of the child's next line starting with ``word`` (other lines are kept in
        ``lines``); fails when the child ends or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the S3 kill-point child printed no {word} line in "
                                   f"{timeout:.0f}s{self.tail()}") from None
            if line is None:
                raise RuntimeError(f"the S3 kill-point child ended (code {self.proc.wait()}) "
                                   f"before its {word} line{self.tail()}")
            self.lines.append(line)
            if line == word or line.startswith(word + " "):
                return line[len(word):].strip()

    def kill(self) -> int:
        """SIGKILL the child's process group and every process descended from it (noted
        before the kill, by pid); the child's return code."""
        from tools.processes import alive, descendants

        family = descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in family:  # one that moved to a group of its own, if any
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        code = self.proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.05)
        return code

    def close(self) -> None:
        """Kill the child if it still runs; close its pipes and log."""
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        self._reader.join(10)
        self._log.close()

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
            return f"; its log ({self.log_path}) ends:\n" + "\n".join(text)
        return ""


# -- the child ---------------------------------------------------------------------------

def _hold() -> None:
    """Wait for the kill: until the parent's pipe closes or :data:`HOLD_S` passes."""
    import select

    select.select([sys.stdin], [], [], HOLD_S)
    os._exit(3)


def _held_sink(hold: str) -> type:
    """The package's ``FileSink`` with its steps wrapped for ``hold`` (see the module docs)."""
    from airflow_provider_kafka_spark.sinks import FileSink
    from airflow_provider_kafka_spark.sinks.files import objects

    if hold == "published":
        def held_clean(self: Any, listed: set[str]) -> None:
            print("PUBLISHED", flush=True)
            _hold()

        objects.ObjectRun._clean = held_clean  # type: ignore[method-assign]

    class HeldFileSink(FileSink):
        def prepare(self, spark: Any, shaped: Any) -> None:
            super().prepare(spark, shaped)
            if hold == "before":
                print("PREPARED", flush=True)
                _hold()

        def commit(self, manifest: Any) -> None:
            if hold == "uploaded":
                print("UPLOADED", flush=True)
                _hold()
            super().commit(manifest)
            if hold == "after":
                print("COMMITTED", flush=True)
                _hold()

    return HeldFileSink


def _child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.s3_killpoint child")
    parser.add_argument("--task-dies-mid-upload", action="store_true",
                        help="the first attempt of split 0's task dies after its first part")
    args = parser.parse_args(argv)
    endpoint = json.loads(sys.stdin.readline())

    from airflow_provider_kafka_spark.offsets import OffsetRanges
    from airflow_provider_kafka_spark.spark import ingest, spark_session
    from tools.s3_jars import fetch_s3_jars
    from tools.s3_server import S3Endpoint

    here = Path.cwd()
    conf = {
        **S3Endpoint(**endpoint).spark_conf(),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.local.dir": str(here / "spark-local"),
        "spark.sql.warehouse.dir": (here / "warehouse").as_uri(),
        "spark.driver.extraJavaOptions": CHILD_JVM_OPTIONS,
    }
    master = "local[2]"
    if args.task_dies_mid_upload:
        master = "local[2,2]"
        conf["spark.python.daemon.module"] = "tools.s3_task_dies"
    spark = spark_session(master, app_name="s3-killpoint-child", conf=conf,
                          jars=fetch_s3_jars())
    spark.range(4, numPartitions=2).mapInArrow(lambda batches: batches, "id long").collect()
    print("READY", flush=True)
    line = sys.stdin.readline()
    if not line.strip():  # the parent went away (or closed the pipe) without a job
        return
    job = Job(**json.loads(line))
    if job.decoded:
        from airflow_provider_kafka_spark.decoding import Decoding

        result = ingest(spark, OffsetRanges.from_json(job.ranges),
                        {"bootstrap.servers": job.bootstrap},
                        _held_sink(job.hold)(job.path, partition_by=["hour"]),
                        decode=Decoding(value_format="string"), shape=decoded_shape())
    else:
        result = ingest(spark, OffsetRanges.from_json(job.ranges),
                        {"bootstrap.servers": job.bootstrap}, _held_sink(job.hold)(job.path))
    print("DONE " + json.dumps({"records": result.records}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["child"]:
        sys.exit("usage: python -m tools.s3_killpoint child [--task-dies-mid-upload] "
                 "(tests/integration/test_s3_faults.py runs it)")
    _child(sys.argv[2:])
