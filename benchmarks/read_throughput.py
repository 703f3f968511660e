#!/usr/bin/env python3
"""Bounded-read throughput: engine="python" vs engine="spark-kafka" vs a raw librdkafka consumer.

    .venv/bin/python benchmarks/read_throughput.py [--records 2000000] [--repeats 3]

Produces N records of ~200 B over 6 partitions once, resolves the ranges, then times a full
bounded read of those ranges into Spark's ``noop`` sink with each engine, and the same ranges
read by plain confluent-kafka batch consumers (one process per Spark core, records discarded):
the raw client limit on this machine. Reports medians, records/s, MB/s, the ratios
python/spark-kafka and python/raw, the peak RSS of Spark's Python workers, and a cProfile of
one partition read by ``read_split`` outside Spark (where the Python engine spends its time).

Writes benchmarks/results/read_throughput.json and .png. Starts its own broker with
scripts/kafka-broker unless --bootstrap is given.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing
import os
import platform
import pstats
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import pyspark  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from airflow_provider_kafka_spark.offsets import (  # noqa: E402
    OffsetRanges,
    PartitionRange,
    Subscription,
    consumer_config,
    resolve_offsets,
)
from airflow_provider_kafka_spark.spark import (  # noqa: E402
    fetch_spark_kafka_jars,
    read_kafka,
    read_split,
    spark_session,
)
from tools.local_broker import local_broker  # noqa: E402


def produce(config: dict[str, Any], records: int, size: int, partitions: int) -> tuple[str, int]:
    """A fresh topic with ``records`` records of ``size``-byte values, round-robin; total bytes."""
    topic = f"bench-read-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[
        topic].result(30)
    producer = Producer({**config, "linger.ms": 50, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    payload = os.urandom(size * 16)
    started = time.monotonic()
    for i in range(records):
        offset = (i * 7919) % (size * 15)
        while True:
            try:
                producer.produce(topic, value=payload[offset:offset + size - 12],
                                 key=b"%012d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    print(f"produced {records:,} records in {time.monotonic() - started:.1f}s", flush=True)
    return topic, records * size


def raw_worker(config: dict[str, Any], ranges: list[PartitionRange], out: Any) -> None:
    """Consume ``ranges`` with one plain batch consumer; records are counted and dropped.

    Puts ``(records, seconds)`` on ``out``: the time from creating the consumer to the end, so
    process start-up and imports are not charged to the client.
    """
    started = time.perf_counter()
    # The same librdkafka defaults as engine="python", so "raw" is the client's real limit.
    consumer = Consumer(consumer_config(config,
                                        isolation_level="read_committed"))
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
    remaining = {r.partition: r.stop for r in ranges if r.size}
    count = 0
    while remaining:
        for m in consumer.consume(10_000, 0.5):
            err = m.error()
            p = m.partition()
            if p not in remaining:
                continue
            if err is None:
                if m.offset() < remaining[p]:
                    m.value()
                    count += 1
                if m.offset() + 1 >= remaining[p]:
                    del remaining[p]
            elif err.code() == KafkaError._PARTITION_EOF and m.offset() >= remaining[p]:
                del remaining[p]
    consumer.close()
    out.put((count, time.perf_counter() - started))


def run_raw(config: dict[str, Any], ranges: OffsetRanges, processes: int) -> tuple[int, float]:
    """Read ``ranges`` in ``processes`` parallel consumers; (records, slowest worker's seconds)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    shares = [list(ranges.ranges)[i::processes] for i in range(processes)]
    workers = [ctx.Process(target=raw_worker, args=(config, s, queue)) for s in shares if s]
    for w in workers:
        w.start()
    results = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    return sum(n for n, _ in results), max(t for _, t in results)


class ProcessTree:
    """Samples the processes under this one while a run is timed (every 50 ms).

    Gives the CPU seconds used by the JVM and by Python child processes (Spark's Python
    workers, or the raw consumers), and the peak RSS of the Python children. Processes that
    start during the run count from zero; a process's CPU after its last sample is missed.
    """

    def __init__(self) -> None:
        self.cpu_s = {"jvm": 0.0, "python": 0.0}
        self.peak_python_rss = 0
        self.peak_python_rss_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread()
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}

    def __enter__(self) -> ProcessTree:
        self._first = {p.pid: _cpu(p) for p in psutil.Process().children(recursive=True)}
        self._last = {}
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu_s = {"jvm": 0.0, "python": 0.0}
        for pid, (kind, cpu) in self._last.items():
            self.cpu_s[kind] += cpu - self._first.get(pid, 0.0)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            rss = []
            for child in me.children(recursive=True):
                try:
                    kind = "jvm" if "java" in child.name().lower() else "python"
                    self._last[child.pid] = (kind, _cpu(child))
                    if kind == "python":
                        rss.append(child.memory_info().rss)
                except psutil.Error:
                    continue
            if rss:
                self.peak_python_rss = max(self.peak_python_rss, max(rss))
                self.peak_python_rss_total = max(self.peak_python_rss_total, sum(rss))
            time.sleep(0.05)


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def timed(fn: Callable[[], float | None]) -> float:
    """Seconds ``fn`` took, or the seconds it reports itself."""
    started = time.perf_counter()
    reported = fn()
    return reported if reported is not None else time.perf_counter() - started


def profile_split(config: dict[str, Any], split: PartitionRange) -> dict[str, Any]:
    """One partition read by read_split outside Spark: plain timing, then under cProfile."""
    started = time.perf_counter()
    plain_rows = sum(b.num_rows for b in read_split(split, config))
    plain = time.perf_counter() - started
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    rows = sum(b.num_rows for b in read_split(split, config))
    profiler.disable()
    elapsed = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:12]  # type: ignore[attr-defined]
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
    print(text.getvalue())
    return {
        "records": rows,
        "seconds_unprofiled": round(plain, 3),
        "records_per_s_unprofiled": round(plain_rows / plain),
        "seconds_profiled": round(elapsed, 3),
        "tottime_share": [
            {"function": f"{Path(f).name}:{line}({name})", "share": round(v[2] / total, 3),
             "calls": v[1]}
            for (f, line, name), v in top
        ],
    }


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["python\n(kafka_bounded)", "spark-kafka\n(Spark's source)", "raw\n(confluent-kafka)"]
    keys = ["python", "spark_kafka", "raw"]
    values = [result["engines"][k]["records_per_s"] / 1000 for k in keys]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    bars = ax.bar(labels, values, color=["#2f6db5", "#e08a1e", "#7a7a7a"])
    ax.bar_label(bars, fmt="%.0f k/s")
    ax.set_ylim(0, max(values) * 1.15)
    ax.set_ylabel("records per second (thousands), median")
    ax.set_title(f"Bounded read of {result['records']:,} records x {result['record_bytes']} B, "
                 f"{result['partitions']} partitions, {result['spark_cores']} cores\n"
                 f"python/spark-kafka = {result['ratio_python_vs_spark_kafka']:.2f}x, "
                 f"python/raw = {result['ratio_python_vs_raw']:.2f}x", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--out", type=Path, default=RESULTS / "read_throughput.json")
    args = parser.parse_args()

    jars = fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                                  ROOT / ".cache" / "spark-kafka" / "jars")
    with local_broker(args.bootstrap) as bootstrap:
        config = {"bootstrap.servers": bootstrap}
        topic, total_bytes = produce(config, args.records, args.record_bytes, args.partitions)
        ranges = resolve_offsets(config, Subscription.topics([topic]), "earliest", "latest")
        assert ranges.total() == args.records, ranges
        spark = spark_session(args.master, app_name="read-throughput-benchmark",
                              conf={"spark.ui.enabled": "false"}, jars=jars)
        cores = spark.sparkContext.defaultParallelism

        def spark_read(engine: str) -> Callable[[], None]:
            def run() -> None:
                read_kafka(spark, ranges, config, engine=engine).write.format("noop") \
                    .mode("overwrite").save()
            return run

        def raw() -> float:
            count, seconds = run_raw(config, ranges, cores)
            assert count == args.records, count
            return seconds

        runs: dict[str, list[float]] = {"python": [], "spark_kafka": [], "raw": []}
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
        # Other jobs share the machine: the 1-minute load average before each run.
        load: dict[str, list[float]] = {name: [] for name in runs}
        actions = {"python": spark_read("python"), "spark_kafka": spark_read("spark-kafka"),
                   "raw": raw}
        for name, action in actions.items():  # warm-up: JVM classes, Python workers
            print(f"warm-up {name}: {timed(action):.2f}s", flush=True)
        python_rss = ProcessTree()
        for i in range(args.repeats):
            for name, action in actions.items():
                tree = python_rss if name == "python" else ProcessTree()
                load[name].append(round(os.getloadavg()[0], 2))
                with tree:
                    seconds = timed(action)
                runs[name].append(seconds)
                cpu[name].append(dict(tree.cpu_s))
                print(f"run {i + 1} {name}: {seconds:.2f}s ({args.records / seconds:,.0f} "
                      f"records/s), CPU s {tree.cpu_s}, load {load[name][-1]}", flush=True)
        spark.stop()
        biggest = max(ranges, key=lambda r: r.size)
        profile = profile_split(config, biggest)
        admin = AdminClient(config)
        admin.delete_topics([topic])[topic].result(30)

    engines = {}
    for name, seconds in runs.items():
        median = statistics.median(seconds)
        engines[name] = {
            "runs_s": [round(s, 3) for s in seconds],
            "loadavg_1m_before_runs": load[name],
            "median_s": round(median, 3),
            "records_per_s": round(args.records / median),
            "mb_per_s": round(total_bytes / median / 1e6, 1),
            "cpu_s_median": {kind: round(statistics.median(c[kind] for c in cpu[name]), 2)
                             for kind in ("jvm", "python")},
        }
    result = {
        "records": args.records,
        "record_bytes": args.record_bytes,
        "partitions": args.partitions,
        "repeats": args.repeats,
        "spark_cores": cores,
        "sink": "Spark noop sink (python, spark_kafka); records dropped (raw)",
        "raw_client": f"confluent-kafka batch consumer, {cores} processes",
        "engines": engines,
        "records_per_s": {k: v["records_per_s"] for k, v in engines.items()},
        "ratio_python_vs_spark_kafka": round(
            engines["python"]["records_per_s"] / engines["spark_kafka"]["records_per_s"], 3),
        "ratio_python_vs_raw": round(
            engines["python"]["records_per_s"] / engines["raw"]["records_per_s"], 3),
        "python_worker_peak_rss_mb": {"per_worker": round(python_rss.peak_python_rss / 2**20, 1),
                                      "all_workers": round(
                                          python_rss.peak_python_rss_total / 2**20, 1)},
        "profile_read_split_one_partition": profile,
        "environment": {
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "pyspark": pyspark.__version__,
            "spark_kafka_jars": (ROOT / ".cache" / "spark-kafka" / "jars" / ".version")
            .read_text().strip(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    chart(result, args.out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("records_per_s", "ratio_python_vs_spark_kafka",
                                             "ratio_python_vs_raw",
                                             "python_worker_peak_rss_mb")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
