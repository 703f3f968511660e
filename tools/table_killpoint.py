"""Table kill points: SIGKILL an ingest into an Iceberg or Delta table before, during or right
after its one table commit, then let the caller retry the same run.

A child process (``python -m tools.table_killpoint child --warehouse DIR [--job JSON]``)
starts its own local[2] SparkSession with the `tables` tier's catalogs (:func:`table_conf`:
Delta's extension and catalog, the Iceberg Hadoop catalog ``lake`` on ``DIR`` and, given an
:class:`S3Lake`, S3A on the suite's S3 server and the Iceberg catalog ``s3``, a JdbcCatalog on
PostgreSQL whose warehouse is on S3), warms up,
prints ``READY``, takes its :class:`Job` (``--job``, or one JSON line on stdin) and runs
``ingest(spark, ranges, config, sink, sql=job.sql)``. The sink is the package's
``IcebergSink``/``DeltaSink`` with ``commit_rows``, ``commit_files`` and ``intake`` wrapped (no
hook inside the package). A run the sink commits through Spark's writer (``commit_rows``: a
``sql``) prints ``COMMITTING <write id>`` when the table commit begins (the read, the
statistics and the look-up of the run's writes are done), then, by ``job.hold``:

``before``
    waits for the kill without writing anything;
``during``
    writes through the same rows in three partitions whose last task never ends: the other
    tasks write their data files into the table's folder, the write job never finishes, no
    commit is made;
``after_commit``
    lets the commit finish, prints ``COMMITTED <write id>`` and waits for the kill (the
    ingest never returns).

A run whose readers land the table's files (``sql=None``, records as read into a table that
takes them: the sink's intake answers ``LandedParquet``) prints ``LANDING <write id> <landing
folder>`` before the read, then, by ``job.hold``:

``during``
    the landing read runs with its first task held after it wrote its split's file (ingest's
    ``land_kafka`` is given the read with a pass-through ``mapInArrow`` on top, no shuffle: the
    same tasks): the readers write their files into the landing folder, the read never
    finishes, ``commit_files`` is never reached;
``before`` / ``after_commit``
    as above, at ``commit_files`` (``COMMITTING`` when it begins; every landed file is
    written by then).

:func:`kill_table_ingest` gives a started child (:class:`TableChild`; :class:`Standby` starts
each one while the kill point before it runs) its job, reaches the moment (the ``COMMITTING``
or ``LANDING`` line; then the first new data file in the table's folder while no new commit file
is there; or the ``COMMITTED`` line and the new commit file; on S3 the objects are listed
through the S3 API),
SIGKILLs the child's process group and what
descended from it, and says what it saw. The caller checks the table and retries the run
(``tests/tables/test_table_killpoints.py``). A held child that is never killed gives up after
:data:`HOLD_S`, or when its parent's pipe closes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tools.s3_server import S3Endpoint

ROOT = Path(__file__).resolve().parents[1]
MOMENTS = ("before", "during", "after_commit")
LAKE = "lake"
S3_CATALOG = "s3"
S3_ENV = "TABLE_KILLPOINT_S3"
"""The environment variable that hands the child its :class:`S3Lake` (JSON; it holds the S3
server's secret, so not on the command line)."""
HOLD_S = 600.0
"""How long a held child waits for its kill before it gives up."""

SQL = ("SELECT topic, `partition`, `offset`, CAST(key AS STRING) AS key, "
       "CAST(value AS STRING) AS value FROM kafka")
"""The default query (the tests pass theirs, ``tests/tables/cases.py`` ``SQL``)."""

CHILD_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""A short-lived driver starts in about half the CPU time with the C1 compiler only (and no
parallel collector threads)."""

_ICEBERG_COMMIT = re.compile(r"(v\d+|\d{5}-[0-9a-f-]{36})\.metadata\.json$")
"""A Hadoop catalog's ``v<N>.metadata.json``, a JDBC catalog's ``<N>-<uuid>.metadata.json``."""
_DELTA_COMMIT = re.compile(r"\d{20}\.json$")


@dataclass(frozen=True)
class S3Lake:
    """Tables on S3 (the suite's S3 server, ``tools/s3_server.py``): Delta tables at ``s3a://``
    paths and the Iceberg catalog ``s3``, Iceberg's JdbcCatalog on PostgreSQL (``jdbc_url``,
    ``jdbc_user``) whose warehouse ``warehouse`` (``s3a://<bucket>/<prefix>``) is on S3, its
    files read and written through S3A (``HadoopFileIO``)."""

    endpoint: S3Endpoint
    warehouse: str
    jdbc_url: str
    jdbc_user: str

    def conf(self) -> dict[str, str]:
        """S3A on the endpoint and the catalog ``s3`` (tables cached until refreshed, as in
        :func:`table_conf`'s ``lake``)."""
        catalog = f"spark.sql.catalog.{S3_CATALOG}"
        return {
            **self.endpoint.spark_conf(),
            catalog: "org.apache.iceberg.spark.SparkCatalog",
            f"{catalog}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            f"{catalog}.uri": self.jdbc_url,
            f"{catalog}.jdbc.user": self.jdbc_user,
            f"{catalog}.jdbc.schema-version": "V1",
            f"{catalog}.warehouse": self.warehouse,
            f"{catalog}.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
            f"{catalog}.cache.expiration-interval-ms": "-1",
        }

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "endpoint": asdict(self.endpoint)})

    @classmethod
    def from_json(cls, text: str) -> S3Lake:
        fields = json.loads(text)
        return cls(**{**fields, "endpoint": S3Endpoint(**fields["endpoint"])})

    @cached_property
    def _client(self) -> Any:
        return self.endpoint.boto3_client()

    def keys(self, folder: str) -> set[str]:
        """The keys of the objects under ``folder`` (``s3a://bucket/prefix``), relative to it,
        listed through the S3 API."""
        bucket, _, prefix = folder.removeprefix("s3a://").partition("/")
        prefix = prefix.rstrip("/") + "/"
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix)
        return {o["Key"][len(prefix):] for page in pages for o in page.get("Contents", [])}


def table_conf(lake_warehouse: Path, s3: S3Lake | None = None) -> dict[str, str]:
    """The `tables` tier's Spark settings for Delta (extension, ``spark_catalog``), the
    Iceberg Hadoop catalog ``lake`` on ``lake_warehouse`` and, with ``s3``, S3A and the Iceberg
    catalog ``s3`` (``tests/tables/conftest.py``'s ``table_spark`` has the same; the kill-point
    test checks that they agree)."""
    return {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.extensions": (
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
            "io.delta.sql.DeltaSparkSessionExtension"),
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        f"spark.sql.catalog.{LAKE}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{LAKE}.type": "hadoop",
        f"spark.sql.catalog.{LAKE}.warehouse": lake_warehouse.as_uri(),
        # Tables stay cached until refreshed, as in a long-lived driver: the sinks must see
        # other drivers' commits anyway (tests/tables/test_table_killpoints.py).
        f"spark.sql.catalog.{LAKE}.cache.expiration-interval-ms": "-1",
        **(s3.conf() if s3 is not None else {}),
    }


# -- the table's files, seen from outside ------------------------------------------------

@dataclass(frozen=True)
class TableFiles:
    """Where one table keeps its data files and its commits (Iceberg on the Hadoop catalog
    ``lake``: ``<warehouse>/<namespace>/<table>/{data,metadata}``; on the JDBC catalog ``s3``
    the same under its S3 warehouse; Delta: the table's folder and its ``_delta_log``), local
    folders or ``s3a://`` prefixes (then ``s3`` lists them)."""

    data: str
    commits: str
    commit_name: re.Pattern[str]
    s3: S3Lake | None = None

    @classmethod
    def of(cls, table_format: str, table: str, warehouse: Path,
           s3: S3Lake | None = None) -> TableFiles:
        if table_format == "iceberg":
            catalog, *namespace, name = table.split(".")
            if catalog == S3_CATALOG and s3 is not None and namespace:
                folder = "/".join([s3.warehouse.rstrip("/"), *namespace, name])
                return cls(f"{folder}/data", f"{folder}/metadata", _ICEBERG_COMMIT, s3)
            if catalog != LAKE or not namespace:
                raise ValueError(f"{table!r} is not a table of the Hadoop catalog {LAKE!r}"
                                 + (f" or the S3 catalog {S3_CATALOG!r}" if s3 else ""))
            local = warehouse.joinpath(*namespace, name)
            return cls(str(local / "data"), str(local / "metadata"), _ICEBERG_COMMIT)
        if table_format == "delta":
            if table.startswith("s3a://") and s3 is not None:
                return cls(table, f"{table.rstrip('/')}/_delta_log", _DELTA_COMMIT, s3)
            if not table.startswith("/"):
                raise ValueError(f"{table!r} is not a Delta table's path")
            return cls(table, str(Path(table) / "_delta_log"), _DELTA_COMMIT)
        raise ValueError(f"table_format={table_format!r}: pass 'iceberg' or 'delta'")

    def _files(self, folder: str) -> set[str]:
        """The files under ``folder``, relative to it (S3: the objects' keys)."""
        if self.s3 is not None:
            return self.s3.keys(folder)
        root = Path(folder)
        if not root.exists():
            return set()
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}

    def data_files(self) -> set[str]:
        """The Parquet files under the data folder (a Delta log's checkpoints excluded)."""
        return {f for f in self._files(self.data)
                if f.endswith(".parquet") and "_delta_log" not in f.split("/")}

    def commit_files(self) -> set[str]:
        """The table's committed versions (``vN.metadata.json``, ``<N>-<uuid>.metadata.json``,
        ``_delta_log/<N>.json``)."""
        return {f for f in self._files(self.commits)
                if "/" not in f and self.commit_name.fullmatch(f)}


# -- the harness -------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """One ingest for a child: ``ranges`` (the OffsetRanges' JSON) of the topic at
    ``bootstrap`` into ``table`` with the query ``sql``, held at ``hold``."""

    table_format: str
    table: str
    bootstrap: str
    ranges: str
    run: str
    hold: str
    application: str = "app"
    generation: int = 0
    sql: str | None = SQL
    """None: the records as read (into a table of Spark's Kafka schema the readers land
    files)."""
    decode: str | None = None
    """``ingest``'s ``decode``: the JSON of ``Decoding``'s arguments (None: no decoding)."""
    shape: str | None = None
    """``ingest``'s ``shape``: the JSON of ``Shape.to_json()`` (None: no shape)."""

    def __post_init__(self) -> None:
        if self.hold not in MOMENTS:
            raise ValueError(f"hold={self.hold!r}: pass one of {MOMENTS}")


@dataclass(frozen=True)
class TableKill:
    """What one kill point saw."""

    moment: str
    write_id: str  # from the child's LANDING or COMMITTING line
    returncode: int  # the child's: -9 when the SIGKILL ended it
    ready_s: float  # from the child's start to its READY line
    waited_s: float  # how long the caller waited for READY (0: it was ready)
    committing_s: float  # from the job to the COMMITTING line
    kill_s: float  # from the job to the kill
    cpu_s: float  # CPU time of the child and its descendants, from its start to the kill
    lines: tuple[str, ...]  # the child's protocol lines (READY, COMMITTING, COMMITTED, DONE)
    new_data_files: frozenset[str]  # since the job was sent, at the kill
    new_commit_files: frozenset[str]  # since LANDING or COMMITTING, at the kill
    landing: str | None = None  # the landing folder's name (LANDING), None: Spark's writer


class TableChild:
    """A child driver (``python -m tools.table_killpoint child``) in its own process group,
    started at once (with ``s3``: able to write tables on S3) and given its :class:`Job`
    later: its protocol lines come through a reader thread (the caller never blocks on a
    read), its stderr goes to ``<run_dir>/child.log``."""

    def __init__(self, warehouse: Path, run_dir: Path, s3: S3Lake | None = None) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.warehouse = warehouse
        self.s3 = s3
        self.log_path = run_dir / "child.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        env.pop(S3_ENV, None)
        if s3 is not None:
            env[S3_ENV] = s3.to_json()
        self.started = time.monotonic()
        self.ready_at: float | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.table_killpoint", "child", "--warehouse",
             str(warehouse)],
            cwd=run_dir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True, start_new_session=True)
        self.lines: list[str] = []
        self.cpu_s = 0.0
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def ready(self, timeout: float) -> float:
        """Wait for the READY line (once); how long this call waited."""
        if self.ready_at is not None:
            return 0.0
        began = time.monotonic()
        self.expect(("READY",), timeout)
        self.ready_at = time.monotonic()
        return self.ready_at - began

    def send(self, job: Job) -> None:
        """Give the child its job (one JSON line on its stdin)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(asdict(job)) + "\n")
        self.proc.stdin.flush()

    def expect(self, words: tuple[str, ...], timeout: float) -> tuple[str, str]:
        """The child's next line starting with one of ``words``: that word and the rest of
        the line (other lines are kept in ``lines``); fails when the child ends or
        ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        wanted = " or ".join(words)
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(0.0, remaining))
            except queue.Empty:
                raise TimeoutError(f"the kill-point child printed no {wanted} line in "
                                   f"{timeout:.0f}s{self.tail()}") from None
            if line is None:
                raise RuntimeError(f"the kill-point child ended (code {self.proc.wait()}) "
                                   f"before its {wanted} line{self.tail()}")
            self.lines.append(line)
            for word in words:
                if line == word or line.startswith(word + " "):
                    return word, line[len(word):].strip()

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float) -> Any:
        """Poll ``check()`` until it returns something true; fail if the child ends first."""
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"the kill-point child ended (code {self.proc.returncode})"
                                   f" before {what}{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout:.0f}s{self.tail()}")
            time.sleep(0.02)

    def kill(self) -> int:
        """SIGKILL the child's process group and every process descended from it (noted
        before the kill); the child's return code."""
        from tools.processes import alive, descendants

        family = descendants(self.proc.pid)
        self.cpu_s = _cpu_seconds([self.proc.pid, *family])
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


class Standby:
    """Child drivers for ``count`` kill points, each started (and warmed up) while the kill
    point before it runs: :meth:`take` hands out the waiting one and starts the next."""

    def __init__(self, warehouse: Path, run_dir: Path, count: int,
                 s3: S3Lake | None = None) -> None:
        self.warehouse, self.run_dir, self.left, self.s3 = warehouse, run_dir, count, s3
        self.started = 0
        self.waiting: TableChild | None = None
        self._start_next()

    def _start_next(self) -> None:
        if self.left > 0 and self.waiting is None:
            self.left -= 1
            self.started += 1
            self.waiting = TableChild(self.warehouse, self.run_dir / f"child-{self.started}",
                                      self.s3)

    def take(self) -> TableChild:
        if self.waiting is None:
            self.left += 1  # more were taken than counted
            self._start_next()
        child, self.waiting = self.waiting, None
        self._start_next()
        assert child is not None
        return child

    def close(self) -> None:
        if self.waiting is not None:
            self.waiting.close()
            self.waiting = None


def _cpu_seconds(pids: list[int]) -> float:
    """The user + system CPU time of ``pids`` and of their children already reaped."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def kill_table_ingest(child: TableChild, job: Job, *, ready_timeout: float = 180.0,
                      moment_timeout: float = 300.0) -> TableKill:
    """Give ``child`` the ``job`` and SIGKILL it at ``job.hold`` (``before`` / ``during`` /
    ``after_commit`` its table commit); what was seen. The child is gone when this returns,
    also when it fails. The timeouts are generous (a loaded 2-core machine): ``ready_timeout``
    for the READY line (its start and warm-up), ``moment_timeout`` for each step after the
    job."""
    files = TableFiles.of(job.table_format, job.table, child.warehouse, child.s3)
    try:
        waited = child.ready(ready_timeout)
        assert child.ready_at is not None
        data = files.data_files()  # nothing but the child writes the table's data files
        sent = time.monotonic()
        child.send(job)
        word, said = child.expect(("LANDING", "COMMITTING"), moment_timeout)
        # Only the run's one commit can come after this line (an Iceberg table's name mapping
        # is set before the LANDING line).
        commits = files.commit_files()
        landing = None
        if word == "LANDING":
            wid, _, folder = said.partition(" ")
            landing = folder.rstrip("/").rsplit("/", 1)[-1]
        else:
            wid = said
        committing = time.monotonic()
        if landing is not None and job.hold == "during":
            child.wait_for(lambda: files.data_files() - data, "new landed file", moment_timeout)
            if files.commit_files() != commits:
                raise AssertionError("a commit appeared while the landing read was held: "
                                     f"{sorted(files.commit_files() - commits)}")
        else:
            if landing is not None:
                _, began = child.expect(("COMMITTING",), moment_timeout)
                if began != wid:
                    raise AssertionError(f"COMMITTING {began} after LANDING {wid}")
                committing = time.monotonic()
            if job.hold == "during":
                child.wait_for(lambda: files.data_files() - data, "new data file",
                               moment_timeout)
                if files.commit_files() != commits:
                    raise AssertionError("a commit appeared while the write job was held: "
                                         f"{sorted(files.commit_files() - commits)}")
            elif job.hold == "after_commit":
                _, done = child.expect(("COMMITTED",), moment_timeout)
                if done != wid:
                    raise AssertionError(f"COMMITTED {done} after COMMITTING {wid}")
                child.wait_for(lambda: files.commit_files() - commits, "new commit file", 10)
        new_data, new_commits = files.data_files() - data, files.commit_files() - commits
        killed = time.monotonic()
        code = child.kill()
        return TableKill(moment=job.hold, write_id=wid, returncode=code,
                         ready_s=round(child.ready_at - child.started, 3),
                         waited_s=round(waited, 3), committing_s=round(committing - sent, 3),
                         kill_s=round(killed - sent, 3), cpu_s=round(child.cpu_s, 1),
                         lines=tuple(child.lines), new_data_files=frozenset(new_data),
                         new_commit_files=frozenset(new_commits), landing=landing)
    finally:
        child.close()


# -- the child ---------------------------------------------------------------------------

def held_sink(table_format: str, hold: str) -> type:
    """The package's sink class for ``table_format`` with ``intake``, ``commit_rows`` and
    ``commit_files`` wrapped for ``hold`` (see the module docs)."""
    from airflow_provider_kafka_spark.sinks.tables import TABLE_FORMATS, WRITE_COLUMN
    from airflow_provider_kafka_spark.spark.intake import LandedParquet

    base = TABLE_FORMATS[table_format]

    class Held(base):  # type: ignore[misc, valid-type]
        def intake(self, given: Any) -> Any:
            taken = super().intake(given)
            if isinstance(taken.takes, LandedParquet):
                folder = taken.takes.folder
                print(f"LANDING {dict(folder.constants)[WRITE_COLUMN]} {folder.path}",
                      flush=True)
                if hold == "during":
                    _hold_next_landing_read()
            return taken

        def commit_rows(self, spark: Any, df: Any, replacing: list[str], record: Any) -> Any:
            print(f"COMMITTING {record.write_id}", flush=True)
            if hold == "before":
                _hold()
            if hold == "during":
                df = _last_task_never_ends(df)
            done = super().commit_rows(spark, df, replacing, record)
            print(f"COMMITTED {record.write_id}", flush=True)
            if hold == "after_commit":
                _hold()
            return done

        def commit_files(self, spark: Any, folder: str, files: Any, replacing: list[str],
                         record: Any) -> Any:
            print(f"COMMITTING {record.write_id}", flush=True)
            if hold == "before":
                _hold()
            done = super().commit_files(spark, folder, files, replacing, record)
            print(f"COMMITTED {record.write_id}", flush=True)
            if hold == "after_commit":
                _hold()
            return done

    Held.__name__ = f"Held{base.__name__}"
    return Held


def _hold_next_landing_read() -> None:
    """Make ingest's next landing read (its ``land_kafka``, the one seam between the landing
    read and its collect) run with its first task held: the read with a pass-through
    ``mapInArrow`` on top (no shuffle: the same tasks) whose first task, once its split's
    file is written and reported, waits (up to :data:`HOLD_S`), so the other tasks land
    their files and the read never ends."""
    import importlib

    module: Any = importlib.import_module("airflow_provider_kafka_spark.spark.ingest")
    land = module.land_kafka

    def held(reads: Any) -> Any:
        module.land_kafka = land  # once
        return land(reads.mapInArrow(_first_task_held_after_its_input, reads.schema))

    module.land_kafka = held


def _first_task_held_after_its_input(batches: Iterator[Any]) -> Iterator[Any]:
    from pyspark import TaskContext

    passed = list(batches)  # the split's file is written once its report comes
    context = TaskContext.get()
    if context is not None and context.partitionId() == 0:
        time.sleep(HOLD_S)
    yield from passed


def _hold() -> None:
    """Wait for the kill: until the parent's pipe closes or :data:`HOLD_S` passes."""
    import select

    select.select([sys.stdin], [], [], HOLD_S)
    os._exit(3)


def _last_task_never_ends(df: Any) -> Any:
    """``df`` in three partitions, the same rows; the task of the last one waits (up to
    :data:`HOLD_S`) before it gives any row, so the others write their files and the job
    never ends."""
    partitions = 3

    def hold_last(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.partitionId() == partitions - 1:
            time.sleep(HOLD_S)
        yield from batches

    return df.repartition(partitions).mapInArrow(hold_last, df.schema)


def _warm_up(spark: Any, scratch: Path) -> None:
    """What every ingest needs once, done before READY (while the caller does other work):
    a Python worker, the Iceberg catalog, Delta's writer and log (on a scratch table). (S3A's
    client is made by the jobs on S3 only: most children write local tables.)"""
    spark.range(4, numPartitions=2).mapInArrow(lambda batches: batches, "id long").collect()
    spark.sql(f"SHOW NAMESPACES IN {LAKE}").collect()
    spark.range(3).write.format("delta").save(str(scratch))
    spark.sql(f"DESCRIBE HISTORY delta.`{scratch}`").collect()


def _child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.table_killpoint child")
    parser.add_argument("--warehouse", required=True, type=Path,
                        help="the warehouse folder of the Iceberg Hadoop catalog 'lake'")
    parser.add_argument("--job", help="the Job as JSON (table_format, table, bootstrap, "
                                      "ranges, run, hold[, application, generation, sql, "
                                      "decode, shape]); "
                                      "default: one JSON line read from stdin after READY")
    args = parser.parse_args(argv)

    from airflow_provider_kafka_spark.decoding import Decoding
    from airflow_provider_kafka_spark.offsets import OffsetRanges
    from airflow_provider_kafka_spark.shaping import Shape
    from airflow_provider_kafka_spark.spark import ingest, spark_session
    from tools.s3_jars import fetch_s3_jars
    from tools.tables_jars import fetch_table_jars

    here = Path.cwd()
    s3 = S3Lake.from_json(os.environ[S3_ENV]) if os.environ.get(S3_ENV) else None
    spark = spark_session("local[2]", app_name="table-killpoint-child",
                          jars=[*fetch_table_jars(), *(fetch_s3_jars() if s3 else [])], conf={
                              **table_conf(args.warehouse, s3),
                              "spark.ui.showConsoleProgress": "false",
                              "spark.local.dir": str(here / "spark-local"),
                              "spark.sql.warehouse.dir": (here / "warehouse").as_uri(),
                              "spark.driver.extraJavaOptions": CHILD_JVM_OPTIONS,
                          })
    _warm_up(spark, here / "scratch-delta")
    print("READY", flush=True)
    line = args.job if args.job is not None else sys.stdin.readline()
    if not line.strip():  # the parent went away (or closed the pipe) without a job
        return
    job = Job(**json.loads(line))
    sink = held_sink(job.table_format, job.hold)(job.table, application=job.application,
                                                 run=job.run, generation=job.generation)
    result = ingest(spark, OffsetRanges.from_json(job.ranges),
                    {"bootstrap.servers": job.bootstrap}, sink, sql=job.sql,
                    decode=None if job.decode is None else Decoding(**json.loads(job.decode)),
                    shape=None if job.shape is None else Shape.from_json(json.loads(job.shape)))
    print("DONE " + json.dumps(dict(result.output), default=str), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["child"]:
        sys.exit("usage: python -m tools.table_killpoint child --warehouse DIR [--job JSON] "
                 "(tests/tables/test_table_killpoints.py runs it)")
    _child(sys.argv[2:])
