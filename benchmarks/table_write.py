#!/usr/bin/env python3
"""Table write: the exactly-once table sinks (``ingest`` into IcebergSink / DeltaSink) vs a plain
Spark append of the same DataFrame, Iceberg and Delta, in one run with interleaved rounds.

    .venv-tables/bin/python benchmarks/table_write.py [--records 2000000] [--rounds 3]

Runs under ``.venv-tables`` (pyspark 4.1 with the Iceberg 1.12 and Delta 4.4 jars of
``tools/tables/pom.xml``, fetched once by ``tools/tables_jars.py``). Starts a broker
(``tools/local_broker``, stopped by its pid at the end), produces N records (12 B keys, 200 B
ASCII values) over 6 partitions once, resolves ``earliest``..``latest`` and then, after a
warm-up round, times ``--rounds`` interleaved rounds of four runs, each into a **fresh, empty
table** (created before the run and dropped after it, neither timed):

* ``ours``: ``ingest(spark, ranges, config, IcebergSink/DeltaSink(table, application, run=<new
  run id>), sql=SQL)``: the argument and transform checks, ``sink.prepare`` (runtime, table,
  schema), ``read_kafka(...).persist(MEMORY_AND_DISK)``, ``summarize`` (per-partition
  statistics; fills the cache), the SQL over the view ``kafka``, ``sink.write``,
  ``sink.commit`` (read the application's newest commits, which name the table's head, look
  up the run's write ids in the table's rows, one table commit with the write id column and the
  run's record, the commit made: Iceberg's snapshots read, Delta's version from the session),
  ``unpersist``;
* ``plain``: the same ``read_kafka(...).persist(MEMORY_AND_DISK)``, the same ``summarize``, the
  same SQL over the view ``kafka``, then ``df.writeTo(table).append()`` (Iceberg) or
  ``df.write.format("delta").mode("append").save(path)`` (Delta), ``unpersist``. No look-ups,
  no record, no write id column.

So ``ours / plain`` isolates what the exactly-once bookkeeping costs on top of the same read
and append. The measured rounds' tables for ``ours`` already have the sink's column
``_kafka_spark_write`` (and Iceberg's full metrics for it), as every run after an
application's first finds them; the warm-up round creates them without it (the sink adds it,
as on a first run). Reports CPU seconds per million records of every process (Spark's JVM,
its Python workers with the native reader's threads, the driver: ``benchmarks/measure.py``;
the broker is not a child and is not counted) and wall seconds, medians with min-max,
``overhead_iceberg`` / ``overhead_delta`` = ours / plain CPU seconds per million (of the
medians, and per round), and the wall seconds, CPU seconds and Spark jobs of each step (the
sink's methods, ingest's read + statistics and the table writes wrapped in timers).

Writes benchmarks/results/table_write.json and .png.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import platform
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyspark  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql.readwriter import DataFrameWriter, DataFrameWriterV2  # noqa: E402

from airflow_provider_kafka_spark.offsets import OffsetRanges, Subscription, resolve_offsets  # noqa: E402
from airflow_provider_kafka_spark.offsets.config import native_settings  # noqa: E402
from airflow_provider_kafka_spark.sinks.tables import (  # noqa: E402
    WRITE_COLUMN,
    DeltaSink,
    IcebergSink,
    TableSink,
)
from airflow_provider_kafka_spark.spark import ingest, spark_session  # noqa: E402
from airflow_provider_kafka_spark.spark.native import BatchProducer, librdkafka_version  # noqa: E402
from airflow_provider_kafka_spark.spark.read.reader import LostOffsets, read_kafka  # noqa: E402
from benchmarks.measure import KINDS, ProcessTree, cpu_panel, spread  # noqa: E402
from tools.local_broker import local_broker  # noqa: E402
from tools.tables_jars import fetch_table_jars  # noqa: E402

INGEST_MODULE = importlib.import_module("airflow_provider_kafka_spark.spark.ingest")
FORMATS = ("iceberg", "delta")
SIDES = ("ours", "plain")
CATALOG = "lake"
APPLICATION = "bench.table_write"
COLUMNS = "topic STRING, `partition` INT, `offset` BIGINT, key STRING, value STRING"
SQL = ("SELECT topic, `partition`, `offset`, CAST(key AS STRING) AS key, "
       "CAST(value AS STRING) AS value FROM kafka")
WHAT = {
    "ours": "ingest(spark, ranges, config, IcebergSink|DeltaSink(table, application, run=<new "
            "run id>), sql=SQL): argument/transform checks, sink.prepare, read_kafka(...)."
            "persist(MEMORY_AND_DISK), summarize, SQL over view 'kafka', sink.write, "
            "sink.commit (the application's commits read, the run's write ids looked up in "
            "the rows, one overwrite-by-filter (Iceberg) / append (Delta; a replaceWhere "
            "overwrite only when the run has earlier rows) commit with the write id column and "
            "the run's record, the commit made read back (Iceberg) or taken from the session "
            "(Delta)), unpersist",
    "plain": "read_kafka(...).persist(MEMORY_AND_DISK), summarize, the same SQL over view "
             "'kafka', df.writeTo(table).append() (Iceberg) / df.write.format('delta')"
             ".mode('append').save(path) (Delta), unpersist; no bookkeeping",
    "table": "a fresh empty unpartitioned table per run (created before, dropped after; not "
             "timed): Iceberg in a Hadoop catalog in a temporary warehouse, Delta by path; "
             "ours' tables already have _kafka_spark_write (Iceberg: full metrics for it) in "
             "the measured rounds, not in the warm-up round",
}


# -- timing the steps ----------------------------------------------------------------------

METRICS = ("wall_s", "cpu_s", "spark_jobs")


class Steps:
    """Wall seconds, CPU seconds (this process and every process under it) and Spark jobs
    started, of named steps of one run; nested steps are named by their path
    (``commit/commit_rows/table_write``)."""

    def __init__(self, jobs: Callable[[], int] = lambda: 0) -> None:
        self.totals: dict[str, dict[str, float]] = {
            metric: defaultdict(float) for metric in METRICS}
        self._jobs = jobs
        self._stack: list[str] = []

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._stack.append(name)
        path = "/".join(self._stack)
        start = (time.perf_counter(), tree_cpu(), self._jobs())
        try:
            yield
        finally:
            end = (time.perf_counter(), tree_cpu(), self._jobs())
            for metric, a, b in zip(METRICS, start, end, strict=True):
                self.totals[metric][path] += b - a
            self._stack.pop()

    def timed(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.step(name):
                return fn(*args, **kwargs)
        return wrapped

    def timed_iterator(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``fn`` returns an iterator (the sinks' lazy ``commits``): time spent in its steps."""
        def wrapped(*args: Any, **kwargs: Any) -> Iterator[Any]:
            it = iter(fn(*args, **kwargs))
            while True:
                with self.step(name):
                    try:
                        item = next(it)
                    except StopIteration:
                        return
                yield item
        return wrapped


STEPS = Steps()  # the current run's; replaced before each run


def tree_cpu() -> float:
    """CPU seconds so far of this process and every process under it (reaped grandchildren,
    e.g. Spark's forked Python workers, through their parents' children times)."""
    me = psutil.Process()
    total = 0.0
    for process in (me, *me.children(recursive=True)):
        with contextlib.suppress(psutil.Error):
            t = process.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _install_timers() -> None:
    """Time the table writes (both sides) and ingest's read + statistics step."""
    for cls, method in ((DataFrameWriterV2, "append"), (DataFrameWriterV2, "overwrite"),
                        (DataFrameWriter, "save")):
        original = getattr(cls, method)

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                with STEPS.step("table_write"):
                    return original(*args, **kwargs)
            return wrapped
        setattr(cls, method, make(original))
    summarize = INGEST_MODULE.summarize

    def timed_summarize(*args: Any, **kwargs: Any) -> Any:
        with STEPS.step("read_and_summarize"):
            return summarize(*args, **kwargs)
    INGEST_MODULE.summarize = timed_summarize  # type: ignore[attr-defined]


def _instrument(sink: TableSink) -> TableSink:
    """The sink with its steps wrapped in timers (instance attributes: nothing else changes)."""
    for method in ("prepare", "write", "commit", "refresh", "writes_of_run",
                   "application_state", "commit_rows"):
        if hasattr(sink, method):  # refresh: only in newer versions of the sinks
            setattr(sink, method, STEPS.timed(getattr(sink, method), method))
    sink.commits = STEPS.timed_iterator(sink.commits, "commits")  # type: ignore[method-assign]
    return sink


# -- the data, the tables and the two sides -------------------------------------------------

def produce(config: dict[str, Any], records: int, value_bytes: int,
            partitions: int) -> str:
    """A fresh topic with ``records`` records (12 B keys, ``value_bytes`` B ASCII values),
    round-robin over ``partitions``."""
    topic = f"bench-table-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[
        topic].result(30)
    producer = BatchProducer(native_settings({
        **config, "linger.ms": 50, "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000, "compression.type": "none"}), True)
    rng = random.Random(15)
    payload = "".join(rng.choices(string.ascii_letters + string.digits, k=value_bytes * 16)
                      ).encode()
    started = time.monotonic()
    for first in range(0, records, 100_000):
        ids = range(first, min(records, first + 100_000))
        producer.produce_batch(pa.RecordBatch.from_pydict({
            "key": pa.array([b"%012d" % i for i in ids], pa.binary()),
            "value": pa.array([payload[(i * 7919) % (value_bytes * 15):][:value_bytes]
                               for i in ids], pa.binary()),
            "partition": pa.array([i % partitions for i in ids], pa.int32()),
        }), topic)
    assert producer.flush(120) == 0
    assert producer.delivery_failures()[0] == 0, producer.delivery_failures()
    print(f"produced {records:,} records in {time.monotonic() - started:.1f}s", flush=True)
    return topic


def tables_conf(warehouse: Path, driver_memory: str) -> dict[str, str]:
    """The tables session's settings: Iceberg's Hadoop catalog ``CATALOG`` in ``warehouse`` and
    Delta's catalog (as tests/tables/conftest.py configures the tables session)."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory,
        "spark.sql.shuffle.partitions": "4",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.extensions": (
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
            "io.delta.sql.DeltaSparkSessionExtension"),
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        f"spark.sql.catalog.{CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{CATALOG}.type": "hadoop",
        f"spark.sql.catalog.{CATALOG}.warehouse": warehouse.as_uri(),
    }


class Tables:
    """Fresh tables in a temporary warehouse."""

    def __init__(self, spark: Any, warehouse: Path) -> None:
        self.spark = spark
        self.warehouse = warehouse
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")

    def create(self, fmt: str, with_write_column: bool) -> str:
        suffix = uuid.uuid4().hex[:10]
        columns = COLUMNS + (f", {WRITE_COLUMN} STRING" if with_write_column else "")
        if fmt == "iceberg":
            name = f"{CATALOG}.db.t_{suffix}"
            properties = (f" TBLPROPERTIES ('write.metadata.metrics.column.{WRITE_COLUMN}'="
                          "'full')" if with_write_column else "")
            self.spark.sql(f"CREATE TABLE {name} ({columns}) USING iceberg{properties}")
            return name
        path = str(self.warehouse / f"delta_{suffix}")
        self.spark.sql(f"CREATE TABLE delta.`{path}` ({columns}) USING delta")
        return path

    def count(self, fmt: str, table: str) -> int:
        df = (self.spark.table(table) if fmt == "iceberg"
              else self.spark.read.format("delta").load(table))
        return df.count()

    def drop(self, fmt: str, table: str) -> None:
        if fmt == "iceberg":
            self.spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
        else:
            shutil.rmtree(table, ignore_errors=True)


def run_ours(spark: Any, fmt: str, table: str, ranges: OffsetRanges,
             config: dict[str, Any], records: int) -> dict[str, Any]:
    sink_type = IcebergSink if fmt == "iceberg" else DeltaSink
    sink = _instrument(sink_type(table, application=APPLICATION,
                                 run=f"bench-{uuid.uuid4().hex[:12]}"))
    with STEPS.step("ingest"):
        result = ingest(spark, ranges, config, sink, sql=SQL)
    output = dict(result.output)
    assert output["committed"] and not output["skipped"], output
    assert output["records_written"] == records, output
    return output


def run_plain(spark: Any, fmt: str, table: str, ranges: OffsetRanges,
              config: dict[str, Any]) -> None:
    with STEPS.step("plain"):
        records = read_kafka(spark, ranges, config, isolation_level=ranges.isolation_level,
                             lost=LostOffsets()).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            INGEST_MODULE.summarize(records)  # type: ignore[attr-defined]  # the timed one, as ingest calls it
            records.createOrReplaceTempView("kafka")
            df = spark.sql(SQL)
            if fmt == "iceberg":
                df.writeTo(table).append()
            else:
                df.write.format("delta").mode("append").save(table)
        finally:
            records.unpersist()


# -- the run ---------------------------------------------------------------------------------

class LoadSampler:
    """The 1-minute load average every 5 s while the rounds run."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(round(os.getloadavg()[0], 2))
            self._stop.wait(5)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def profile_table(steps: list[dict[str, float]]) -> dict[str, float]:
    """Median per step over the rounds (the steps in their order)."""
    names = list(dict.fromkeys(name for s in steps for name in s))
    return {name: round(statistics.median(s.get(name, 0.0) for s in steps), 3)
            for name in names}


def derived_steps(side: str, measured: dict[str, float]) -> dict[str, float]:
    """The steps of one run (one metric) under readable names, including what is left once
    the timed steps are taken out."""
    s = dict(measured)
    if side == "plain":
        total = s.get("plain", 0.0)
        read = s.get("plain/read_and_summarize", 0.0)
        write = s.get("plain/table_write", 0.0)
        return {"total": total, "read_and_summarize": read, "table_write": write,
                "rest (read_kafka plan, SQL, unpersist)": total - read - write}
    total = s.get("ingest", 0.0)
    read = s.get("ingest/read_and_summarize", 0.0)
    prepare = s.get("ingest/prepare", 0.0)
    write = s.get("ingest/write", 0.0)
    commit = s.get("ingest/commit", 0.0)
    refresh = s.get("ingest/commit/refresh", 0.0)
    lookup = s.get("ingest/commit/writes_of_run", 0.0)
    state = s.get("ingest/commit/application_state", 0.0)
    rows = s.get("ingest/commit/commit_rows", 0.0)
    head = s.get("ingest/commit/commit_rows/commits", 0.0)
    table_write = s.get("ingest/commit/commit_rows/table_write", 0.0)
    return {
        "total": total,
        "read_and_summarize": read,
        "prepare (runtime, table, schema, write column checks)": prepare,
        "sink.write (keeps the DataFrame)": write,
        "commit: table refresh (sinks that have one)": refresh,
        "commit: look-up of the run's write ids in the rows": lookup,
        "commit: reading the application's commits": state,
        "commit: newest commit (Iceberg validate-from)": head,
        "commit: table_write (the data and the commit)": table_write,
        "commit: post-commit look-up of the commit made": rows - head - table_write,
        "commit: rest": commit - refresh - lookup - state - rows,
        "rest (checks before the read, read_kafka plan, SQL, unpersist)":
            total - read - prepare - write - commit,
    }


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cost, wall, steps) = plt.subplots(1, 3, figsize=(18, 4.8))
    runs = [(f, s) for f in FORMATS for s in SIDES]
    labels = [f"{f}\n{'ours (ingest)' if s == 'ours' else 'plain append'}" for f, s in runs]
    colors = ["#2a6", "#9c9", "#48c", "#9bd"]
    cpu_panel(cost, labels, colors, [result["sides"][f][s]["cpu_s_per_million"] for f, s in runs],
              f"CPU ours/plain: Iceberg {result['overhead_iceberg']:.2f}x, "
              f"Delta {result['overhead_delta']:.2f}x")
    walls = [result["sides"][f][s]["wall_s"] for f, s in runs]
    medians = [w["median"] for w in walls]
    errors = [[m - w["min"] for m, w in zip(medians, walls, strict=True)],
              [w["max"] - m for m, w in zip(medians, walls, strict=True)]]
    bars = wall.bar(labels, medians, color=colors, yerr=errors, capsize=4)
    wall.bar_label(bars, fmt="%.1f", label_type="center", color="white")
    wall.set_ylabel("wall seconds per run")
    wall.set_title(f"wall ours/plain: Iceberg {result['overhead_wall_iceberg']:.2f}x, Delta "
                   f"{result['overhead_wall_delta']:.2f}x (median, min-max)", fontsize=10)
    # the steps' CPU seconds (median), stacked
    parts = [("read_and_summarize", "read + summarize", "#bbb"),
             ("prepare (runtime, table, schema, write column checks)", "prepare", "#e94"),
             ("commit: table refresh (sinks that have one)", "table refresh", "#6cc"),
             ("commit: look-up of the run's write ids in the rows", "look-up of run's rows",
              "#c33"),
             ("commit: reading the application's commits", "reading commits", "#a5c"),
             ("commit: newest commit (Iceberg validate-from)", "newest commit", "#76c"),
             ("commit: table_write (the data and the commit)", "table write", "#48c"),
             ("commit: post-commit look-up of the commit made", "post-commit look-up", "#fc3")]
    x = list(range(len(runs)))
    bottoms = [0.0] * len(runs)
    for key, label, color in parts:
        values = []
        for f, s in runs:
            profile = result["profile"]["cpu_s"][f][s]
            if s == "plain":
                key_plain = {"read_and_summarize": "read_and_summarize",
                             "commit: table_write (the data and the commit)": "table_write"}
                values.append(profile.get(key_plain.get(key, ""), 0.0))
            else:
                values.append(profile.get(key, 0.0))
        steps.bar(x, values, bottom=bottoms, color=color, label=label)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    totals = [result["profile"]["cpu_s"][f][s]["total"] for f, s in runs]
    steps.bar(x, [max(0.0, t - b) for t, b in zip(totals, bottoms, strict=True)],
              bottom=bottoms, color="#ddd", label="the rest (checks, plans, unpersist)")
    steps.set_xticks(x, labels)
    steps.set_ylabel("CPU seconds per run (median per step, all processes)")
    steps.set_title(f"where the CPU goes ({result['records']:,} records per run)", fontsize=10)
    steps.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"Table write: {result['records']:,} records x {result['value_bytes']} B, "
                 f"{result['spark_master']}, {result['rounds']} interleaved rounds, fresh table "
                 f"per run, load avg {result['load_avg_1m']['median']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.rstrip("\n")
    return {"head": git("rev-parse", "HEAD"),
            "modified_package_files": git("status", "--porcelain", "--",
                                          "airflow_provider_kafka_spark").splitlines()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=6, help="topic partitions")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--bootstrap", help="bootstrap.servers of a running broker")
    parser.add_argument("--out", type=Path, default=RESULTS / "table_write.json")
    args = parser.parse_args()

    code = git_state()  # the package as this process imported it (a later edit is not measured)
    jars = fetch_table_jars()
    _install_timers()
    global STEPS
    cpu: dict[str, dict[str, list[dict[str, float]]]] = {
        f: {s: [] for s in SIDES} for f in FORMATS}
    wall: dict[str, dict[str, list[float]]] = {f: {s: [] for s in SIDES} for f in FORMATS}
    steps: dict[str, dict[str, dict[str, list[dict[str, float]]]]] = {
        m: {f: {s: [] for s in SIDES} for f in FORMATS} for m in METRICS}
    load_before: dict[str, dict[str, list[float]]] = {
        f: {s: [] for s in SIDES} for f in FORMATS}
    warmup: dict[str, dict[str, Any]] = {f: {} for f in FORMATS}
    with local_broker(args.bootstrap) as bootstrap, \
            tempfile.TemporaryDirectory(prefix="bench-table-write-") as scratch:
        config: dict[str, Any] = {"bootstrap.servers": bootstrap}
        topic = produce(config, args.records, args.value_bytes, args.partitions)
        ranges = resolve_offsets(config, Subscription.topics([topic]), "earliest", "latest")
        assert ranges.total() == args.records, ranges
        warehouse = Path(scratch) / "warehouse"
        warehouse.mkdir()
        spark = spark_session(args.master, app_name="table-write-benchmark", jars=jars,
                              conf=tables_conf(warehouse, args.driver_memory))
        try:
            jvm: Any = spark.sparkContext._jvm
            java = jvm.java.lang.System.getProperty("java.version")
            tables = Tables(spark, warehouse)
            tracker = spark.sparkContext.statusTracker()

            def jobs() -> int:
                return max(tracker.getJobIdsForGroup(None), default=-1) + 1

            runs = [(f, s) for f in FORMATS for s in SIDES]
            with LoadSampler() as load:
                for round_ in range(args.rounds + 1):  # round 0 warms every path up
                    order = runs if round_ % 2 else list(reversed(runs))
                    for fmt, side in order:
                        table = tables.create(fmt, with_write_column=side == "ours" and round_ > 0)
                        gc.collect()
                        jvm.java.lang.System.gc()
                        STEPS = Steps(jobs)
                        before = round(os.getloadavg()[0], 2)
                        with ProcessTree() as tree:
                            started = time.perf_counter()
                            if side == "ours":
                                run_ours(spark, fmt, table, ranges, config, args.records)
                            else:
                                run_plain(spark, fmt, table, ranges, config)
                            elapsed = time.perf_counter() - started
                        written = tables.count(fmt, table)
                        assert written == args.records, f"{fmt} {side}: {written} rows"
                        tables.drop(fmt, table)
                        per_million = tree.total_cpu_s / args.records * 1e6
                        named = {m: derived_steps(side, STEPS.totals[m]) for m in METRICS}
                        print(f"round {round_} {fmt:<7} {side:<5} {elapsed:7.2f}s wall, "
                              f"{per_million:5.2f} CPU-s/M {dict(tree.cpu_s)}, load {before}; "
                              + ", ".join(f"{k.split(' (')[0]} {v:.2f}s/"
                                          f"{named['cpu_s'][k]:.2f}cpu/"
                                          f"{named['spark_jobs'][k]:.0f}j"
                                          for k, v in named["wall_s"].items() if v >= 0.005),
                              flush=True)
                        if round_ == 0:
                            warmup[fmt][side] = {"wall_s": round(elapsed, 3),
                                                 "cpu_s_per_million": round(per_million, 3),
                                                 "steps_s": {k: round(v, 3)
                                                             for k, v in named["wall_s"].items()},
                                                 "steps_cpu_s": {k: round(v, 3) for k, v
                                                                 in named["cpu_s"].items()}}
                            continue
                        cpu[fmt][side].append(dict(tree.cpu_s))
                        wall[fmt][side].append(elapsed)
                        for m in METRICS:
                            steps[m][fmt][side].append(named[m])
                        load_before[fmt][side].append(before)
        finally:
            spark.stop()
        with contextlib.suppress(Exception):
            AdminClient(config).delete_topics([topic])[topic].result(30)

    sides: dict[str, dict[str, Any]] = {f: {} for f in FORMATS}
    for fmt in FORMATS:
        for side in SIDES:
            per_million = [sum(c.values()) / args.records * 1e6 for c in cpu[fmt][side]]
            sides[fmt][side] = {
                "cpu_s_per_million": spread(per_million),
                "cpu_s_per_million_by_kind": {
                    kind: round(statistics.median(c[kind] for c in cpu[fmt][side])
                                / args.records * 1e6, 3) for kind in KINDS},
                "wall_s": spread(wall[fmt][side]),
                "records_per_s": round(args.records / statistics.median(wall[fmt][side])),
                "runs_cpu_s_per_million": [round(x, 3) for x in per_million],
                "runs_wall_s": [round(x, 3) for x in wall[fmt][side]],
                "loadavg_1m_before_runs": load_before[fmt][side],
            }
    overhead = {fmt: round(sides[fmt]["ours"]["cpu_s_per_million"]["median"]
                           / sides[fmt]["plain"]["cpu_s_per_million"]["median"], 3)
                for fmt in FORMATS}
    overhead_wall = {fmt: round(sides[fmt]["ours"]["wall_s"]["median"]
                                / sides[fmt]["plain"]["wall_s"]["median"], 3)
                     for fmt in FORMATS}
    table_jars = sorted(p.name for p in jars if "iceberg" in p.name or "delta" in p.name)
    result = {
        "records": args.records,
        "value_bytes": args.value_bytes,
        "key_bytes": 12,
        "topic_partitions": args.partitions,
        "rounds": args.rounds,
        "spark_master": args.master,
        "driver_memory": args.driver_memory,
        "sql": SQL,
        "what": WHAT,
        "target": "overhead_<format> = ours / plain CPU seconds per million <= 1.10",
        "overhead_iceberg": overhead["iceberg"],
        "overhead_delta": overhead["delta"],
        "overhead_wall_iceberg": overhead_wall["iceberg"],
        "overhead_wall_delta": overhead_wall["delta"],
        "targets_met": {fmt: overhead[fmt] <= 1.10 for fmt in FORMATS},
        "overhead_per_round": {fmt: [round(o / p, 3) for o, p in zip(
            sides[fmt]["ours"]["runs_cpu_s_per_million"],
            sides[fmt]["plain"]["runs_cpu_s_per_million"], strict=True)] for fmt in FORMATS},
        "cpu_s_per_million": {f: {s: sides[f][s]["cpu_s_per_million"]["median"] for s in SIDES}
                              for f in FORMATS},
        "sides": sides,
        "profile": {m: {f: {s: profile_table(steps[m][f][s]) for s in SIDES} for f in FORMATS}
                    for m in METRICS},
        "profile_note": ("median per step over the rounds; wall_s: wall seconds, cpu_s: CPU "
                         "seconds of this process and every process under it (sampled at the "
                         "step's start and end), spark_jobs: Spark jobs started in the step; "
                         "'rest' = the run less its timed steps"),
        "warmup_round": warmup,
        "load_avg_1m": {**spread(load.samples, 2), "samples_every_5s": load.samples},
        "versions": {
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "java": java, "table_jars": table_jars,
            "librdkafka_native": librdkafka_version(), "cpus": os.cpu_count(),
            "git_at_start": code,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    chart(result, args.out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("cpu_s_per_million", "overhead_iceberg",
                                             "overhead_delta", "overhead_wall_iceberg",
                                             "overhead_wall_delta",
                                             "targets_met")}, indent=2))
    print(f"load average (1 min) during the run: {result['load_avg_1m']['median']} "
          f"({result['load_avg_1m']['min']} - {result['load_avg_1m']['max']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
