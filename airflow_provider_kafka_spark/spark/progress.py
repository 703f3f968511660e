"""Progress lines of a long ingest: :func:`report_progress` wraps the Spark write of one slice
and logs, every ``every`` seconds, how far Spark is with it. No Airflow import; the lines go to
the logger ``airflow_provider_kafka_spark.spark.ingest``, which an Airflow task's log shows.

Where the numbers come from (measured with PySpark 4.3 on a local session):

* The readers themselves (``engine="python"``, classic session): while a task runs, its reader
  sends the records it has read of its split, at most every :data:`REPORT_EVERY_S` seconds,
  in a UDP datagram to the driver (:class:`SplitReports`, an address the read is given): the
  count moves within a split, at the cost of one small datagram a second per task. A lost
  datagram only delays the count.
* Classic session: the jobs started inside the block carry a job tag; a thread reads their
  stages from Spark's status store (the store the UI and its REST API show; it is there with
  ``spark.ui.enabled=false`` too). ``inputRecords`` of the package's Python data source
  (``engine="python"``) grows only when a task ends: a running task reports 0 even with
  1-second executor heartbeats. A landing read (the file sink's Parquet written by the readers
  themselves) returns one row per split, so there the count is the finished tasks' share of
  the slice (the tasks of the stages that read); this share is also the floor of the count
  elsewhere.
* Spark Connect: no status store; Spark Connect's progress handler reports each stage's
  finished and total tasks, so the count is the finished tasks' share of the slice.
* Nothing readable (an error asking Spark): the line says how long the write has run.

Progress reporting never fails the ingest: a failure to ask Spark is logged at debug level.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges

__all__ = ["report_progress"]

log = logging.getLogger("airflow_provider_kafka_spark.spark.ingest")

_JOIN_TIMEOUT = 30.0

REPORT_EVERY_S = 0.5
"""How often a running reader reports its count (at most)."""


@dataclass(frozen=True)
class Progress:
    """What Spark reported of the block's jobs at one moment."""

    records: int = 0
    """Records Spark counted as read (``inputRecords``)."""
    tasks_done: int = 0
    tasks: int = 0
    """Finished and all tasks of the stages that read (0 of 0: none yet)."""

    def read(self, size: int) -> int:
        """The records read of a slice of ``size``, at most ``size``: Spark's count, or the
        finished tasks' share of ``size`` when that is more (a split's count arrives only when
        its task ends)."""
        share = size * self.tasks_done // self.tasks if self.tasks else 0
        return min(size, max(self.records, share))


@contextmanager
def report_progress(spark: SparkSession, ranges: OffsetRanges, *, owner: str,
                    every: float | None = 30.0) -> Iterator[str | None]:
    """Log, every ``every`` seconds while the block runs, how far the Spark jobs started inside
    it are with ``ranges``: ``<owner>: 1,234,567 of at most 2,000,000 records read (62%),
    410,000 records/s, about 2 s left; Spark UI: http://host:4040`` (the UI part only when
    the session has one). ``at most``: the slice's size is ``sum(stop - start)``, and
    transaction markers or aborted records leave gaps. A block shorter than ``every`` logs
    nothing. ``every`` None or 0: nothing at all.

    Yields the address the readers report their counts to while they run (``read_kafka``'s
    ``progress_to``), or None (no reporting, or a Spark Connect session, whose executors may
    not reach this process).

    The jobs are the ones the calling thread starts (a job tag, removed on exit). The
    reporting thread is stopped and joined on exit, also on an exception, which passes
    through unchanged.
    """
    if not every:
        yield None
        return
    reporter = _Reporter(spark, ranges, owner, float(every))
    reporter.start()
    try:
        yield reporter.reports.address if reporter.reports is not None else None
    finally:
        reporter.stop()


class SplitReports:
    """A UDP socket on the driver where readers report, while their tasks run, the records
    they have read of their split (:func:`reported`); :meth:`total` sums the latest of each."""

    def __init__(self, host: str) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, 0))
        self._socket.settimeout(0.2)
        self.address = f"{host}:{self._socket.getsockname()[1]}"
        self._counts: dict[str, int] = {}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="split-reports", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._closing.is_set():
            try:
                data = self._socket.recv(512)
            except OSError:  # the timeout (to look at _closing), or the socket closed
                continue
            split, _, count = data.decode("ascii", "replace").rpartition(" ")
            if split and count.isdigit():
                self._counts[split] = max(self._counts.get(split, 0), int(count))

    def total(self) -> int:
        """The records the readers reported so far."""
        return sum(self._counts.values())

    def close(self) -> None:
        self._closing.set()
        self._thread.join(_JOIN_TIMEOUT)
        self._socket.close()


def reported(batches: Iterable[Any], address: str, split: str) -> Iterator[Any]:
    """``batches`` (Arrow record batches of the split ``split``), passed through unchanged;
    every :data:`REPORT_EVERY_S` seconds, and at the end, their rows so far are sent to
    ``address`` (``host:port`` of a :class:`SplitReports`). Sending never fails the read."""
    host, _, port = address.rpartition(":")
    target = (host, int(port))
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rows, last = 0, time.monotonic()

    def send() -> None:
        with contextlib.suppress(OSError):  # progress is never worth failing a read
            sender.sendto(f"{split} {rows}".encode("ascii", "replace"), target)

    try:
        for batch in batches:
            rows += batch.num_rows
            if time.monotonic() - last >= REPORT_EVERY_S:
                send()
                last = time.monotonic()
            yield batch
        send()
    finally:
        sender.close()


class _Reporter:
    """The reporting thread and the Spark side it reads (a status store or Connect's
    progress handler)."""

    def __init__(self, spark: SparkSession, ranges: OffsetRanges, owner: str,
                 every: float) -> None:
        self.owner, self.every, self.size = owner, every, ranges.total()
        self.tag = f"kafka-spark-progress-{uuid.uuid4().hex[:12]}"
        self.source: _Classic | _Connect | None = None
        self.stopping = threading.Event()
        self.began = time.monotonic()
        self.highest = 0
        self.reports: SplitReports | None = None
        self.thread = threading.Thread(target=self._run, name=f"progress-{owner}", daemon=True)
        try:
            context = getattr(spark, "_sc", None)  # None on Spark Connect
            self.source = _Classic(context, self.tag) if context is not None else _Connect(spark)
            if context is not None:
                self.reports = SplitReports(context.getConf().get("spark.driver.host",
                                                                  "127.0.0.1"))
        except Exception as error:  # noqa: BLE001  # progress is never worth failing an ingest
            log.debug("%s: no progress from Spark (%s: %s)", owner, type(error).__name__, error)

    def start(self) -> None:
        self.began = time.monotonic()
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(_JOIN_TIMEOUT)
        if self.reports is not None:
            self.reports.close()
        if self.source is not None:
            try:
                self.source.close()
            except Exception as error:  # noqa: BLE001
                log.debug("%s: closing the progress source failed (%s: %s)", self.owner,
                          type(error).__name__, error)

    def _run(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                line = self.line()
            except Exception as error:  # noqa: BLE001
                log.debug("%s: no progress line (%s: %s)", self.owner, type(error).__name__,
                          error)
                continue
            if not self.stopping.is_set():
                log.info("%s", line)

    def line(self) -> str:
        """The progress line now."""
        elapsed = time.monotonic() - self.began
        progress, ui = None, None
        if self.source is not None:
            try:
                progress, ui = self.source.jobs(), self.source.ui()
            except Exception as error:  # noqa: BLE001
                log.debug("%s: Spark's progress is unreadable (%s: %s)", self.owner,
                          type(error).__name__, error)
        where = f"; Spark UI: {ui}" if ui else ""
        if self.reports is not None and self.reports.total():
            progress = [*(progress or []), Progress(records=self.reports.total())]
        if progress is None:
            return (f"{self.owner}: still writing after {_duration(elapsed)}, of at most "
                    f"{self.size:,} records; progress unknown{where}")
        # The job furthest along (a second pass over the slice starts at 0); never goes back.
        self.highest = max([self.highest, *(job.read(self.size) for job in progress)])
        read = self.highest
        rate = read / elapsed if elapsed > 0 else 0.0
        percent = 100 * read // self.size if self.size else 100
        left = (f"about {_duration((self.size - read) / rate)} left" if rate > 0
                else "time left unknown")
        return (f"{self.owner}: {read:,} of at most {self.size:,} records read ({percent}%), "
                f"{rate:,.0f} records/s, {left}{where}")


class _Classic:
    """A classic session's jobs with the block's tag, read from Spark's status store."""

    def __init__(self, context: Any, tag: str) -> None:
        self.context, self.tag = context, tag
        jvm_context = context._jsc.sc()
        self.tracker = jvm_context.statusTracker()
        self.store = jvm_context.statusStore()
        context.addJobTag(tag)  # the calling thread's jobs from now on

    def jobs(self) -> list[Progress]:
        """Each job's stages that read something, summed up."""
        found = []
        for job in self.tracker.getJobIdsForTag(self.tag):
            info = self.tracker.getJobInfo(job)
            if info.isEmpty():
                continue
            records = done = tasks = 0
            for stage in info.get().stageIds():
                try:
                    data = self.store.lastStageAttempt(stage)
                except Exception:  # noqa: BLE001  # not in the store yet
                    continue
                if data.inputRecords() > 0:  # a stage that read (not a shuffle's, a range's)
                    records += data.inputRecords()
                    done += data.numCompleteTasks()
                    tasks += data.numTasks()
            found.append(Progress(records, done, tasks))
        return found

    def ui(self) -> str | None:
        return self.context.uiWebUrl

    def close(self) -> None:
        self.context.removeJobTag(self.tag)


class _Connect:
    """A Spark Connect session's stages, as its progress handler reports them (finished and
    all tasks; no record counts)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.lock = threading.Lock()
        self.stages: dict[int, tuple[int, int]] = {}
        spark.registerProgressHandler(self)  # type: ignore[arg-type]

    def __call__(self, stages: Any, inflight_tasks: int, operation_id: str | None,
                 done: bool) -> None:
        with self.lock:
            for stage in stages or ():
                self.stages[stage.stage_id] = (stage.num_completed_tasks, stage.num_tasks)

    def jobs(self) -> list[Progress]:
        """All stages seen as one job."""
        with self.lock:
            counts = list(self.stages.values())
        return [Progress(0, sum(d for d, _ in counts), sum(t for _, t in counts))]

    def ui(self) -> str | None:
        return None

    def close(self) -> None:
        self.spark.removeProgressHandler(self)  # type: ignore[arg-type]


def _duration(seconds: float) -> str:
    """``7 s``, ``3 min 5 s``, ``2 h 4 min``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
