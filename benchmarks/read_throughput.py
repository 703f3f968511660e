#!/usr/bin/env python3
"""Bounded-read throughput: engine="python" vs engine="spark-kafka" vs a bare native consume.

    .venv/bin/python benchmarks/read_throughput.py [--records 2000000] [--repeats 5]

Produces N records of ~200 B over 6 partitions once, resolves the ranges, then times a full
bounded read of those ranges into Spark's ``noop`` sink with each engine, and the same ranges
read by ``read_split`` (the native reader) in plain processes, one per Spark core, batches
discarded: the practical limit on this machine, without Spark. Reports medians, records/s,
MB/s, CPU seconds per million records of every process (JVM, Python workers with their native
threads, driver) with their spread, the ratios python/spark-kafka and python/raw, the peak
RSS of Spark's Python workers for 1 M and 10 M records, and a cProfile of one partition read
by ``read_split`` outside Spark.

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
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyspark  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from airflow_provider_kafka_spark.offsets import (  # noqa: E402
    OffsetRanges,
    PartitionRange,
    Subscription,
    resolve_offsets,
)
from airflow_provider_kafka_spark.offsets.config import native_settings  # noqa: E402
from airflow_provider_kafka_spark.spark import (  # noqa: E402
    fetch_spark_kafka_jars,
    read_kafka,
    read_split,
    spark_session,
)
from airflow_provider_kafka_spark.spark.native import BatchProducer, librdkafka_version  # noqa: E402
from benchmarks.measure import ProcessTree, cpu_panel, spread, timed  # noqa: E402
from tools.local_broker import local_broker  # noqa: E402


def produce(config: dict[str, Any], records: int, size: int, partitions: int) -> tuple[str, int]:
    """A fresh topic with ``records`` records of ``size``-byte values, round-robin; total bytes."""
    topic = f"bench-read-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[
        topic].result(30)
    producer = BatchProducer(native_settings({
        **config, "linger.ms": 50, "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000, "compression.type": "none"}), True)
    payload = os.urandom(size * 16)
    started = time.monotonic()
    for first in range(0, records, 100_000):
        ids = range(first, min(records, first + 100_000))
        producer.produce_batch(pa.RecordBatch.from_pydict({
            "key": pa.array([b"%012d" % i for i in ids], pa.binary()),
            "value": pa.array([payload[(i * 7919) % (size * 15):][:size - 12] for i in ids],
                              pa.binary()),
            "partition": pa.array([i % partitions for i in ids], pa.int32()),
        }), topic)
    assert producer.flush(120) == 0
    assert producer.delivery_failures()[0] == 0, producer.delivery_failures()
    print(f"produced {records:,} records in {time.monotonic() - started:.1f}s", flush=True)
    return topic, records * size


def raw_worker(config: dict[str, Any], ranges: list[PartitionRange], out: Any) -> None:
    """Read ``ranges`` with ``read_split`` (the native reader) in this process, no Spark;
    batches are counted and dropped.

    Puts ``(records, seconds, CPU seconds)`` on ``out``: the time and the CPU (all threads of
    the process, librdkafka's included) of the reads alone, so process start-up and imports
    are not charged to the reader.
    """
    started, cpu = time.perf_counter(), time.process_time()
    count = sum(batch.num_rows for r in ranges for batch in read_split(r, config))
    out.put((count, time.perf_counter() - started, time.process_time() - cpu))


def run_raw(config: dict[str, Any], ranges: OffsetRanges,
            processes: int) -> tuple[int, float, float]:
    """Read ``ranges`` in ``processes`` parallel readers; (records, slowest worker's seconds,
    the workers' CPU seconds)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    shares = [list(ranges.ranges)[i::processes] for i in range(processes)]
    workers = [ctx.Process(target=raw_worker, args=(config, s, queue)) for s in shares if s]
    for w in workers:
        w.start()
    results = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    return (sum(n for n, _, _ in results), max(t for _, t, _ in results),
            sum(c for _, _, c in results))


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


ENGINES = ("python", "spark_kafka", "raw")
LABELS = {"python": "python\n(kafka_bounded)", "spark_kafka": "spark-kafka\n(Spark's source)",
          "raw": "bare native consume\n(read_split, no Spark)"}


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, cost) = plt.subplots(1, 2, figsize=(11, 4.4))
    labels = [LABELS[k] for k in ENGINES]
    colors = ["#2f6db5", "#e08a1e", "#7a7a7a"]
    values = [result["engines"][k]["records_per_s"] / 1000 for k in ENGINES]
    bars = speed.bar(labels, values, color=colors)
    speed.bar_label(bars, fmt="%.0f k/s")
    speed.set_ylim(0, max(values) * 1.15)
    speed.set_ylabel("records per second (thousands), median")
    speed.set_title(f"python/spark-kafka = {result['ratio_python_vs_spark_kafka']:.2f}x, "
                    f"python/raw = {result['ratio_python_vs_raw']:.2f}x", fontsize=10)
    cpu_panel(cost, labels, colors, [result["engines"][k]["cpu_s_per_million"] for k in ENGINES],
              f"CPU python/spark-kafka = {result['ratio_cpu_python_vs_spark_kafka']:.2f}x")
    fig.suptitle(f"Bounded read of {result['records']:,} records x {result['record_bytes']} B, "
                 f"{result['partitions']} partitions, {result['spark_cores']} cores, "
                 f"{result['repeats']} interleaved rounds", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def worker_rss(spark: Any, config: dict[str, Any], sizes: list[int], size: int,
               partitions: int) -> dict[str, Any]:
    """Peak RSS of one Spark Python worker reading the first ``n`` records of one topic, for
    each ``n`` in ``sizes`` (smallest first): flat in data size when nothing accumulates."""
    topic, _ = produce(config, max(sizes), size, partitions)
    full = resolve_offsets(config, Subscription.topics([topic]), "earliest", "latest")
    peaks = {}
    for n in sorted(sizes):
        share = n // len(full.ranges)
        ranges = OffsetRanges(tuple(PartitionRange(r.topic, r.partition, r.start,
                                                   min(r.stop, r.start + share))
                                    for r in full.ranges))
        with ProcessTree() as tree:
            seconds = timed(lambda: read_kafka(spark, ranges, config, engine="python")  # noqa: B023
                            .write.format("noop").mode("overwrite").save())
        peaks[n] = tree.peak_python_rss
        print(f"rss: {ranges.total():,} records in {seconds:.1f}s, peak worker RSS "
              f"{tree.peak_python_rss / 2**20:.0f} MB", flush=True)
    admin = AdminClient(config)
    admin.delete_topics([topic])[topic].result(30)
    smallest, largest = min(sizes), max(sizes)
    return {
        "peak_python_worker_rss_mb": {str(n): round(v / 2**20, 1) for n, v in peaks.items()},
        f"ratio_rss_{largest // 1_000_000}m_vs_{smallest // 1_000_000}m": round(
            peaks[largest] / peaks[smallest], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rss-records", default="1000000,10000000",
                        help="record counts of the worker-RSS reads ('' skips them)")
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

        raw_cpu: list[float] = []

        def raw() -> float:
            count, seconds, cpu_seconds = run_raw(config, ranges, cores)
            assert count == args.records, count
            raw_cpu.append(cpu_seconds)
            return seconds

        runs: dict[str, list[float]] = {name: [] for name in ENGINES}
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in ENGINES}
        # Other jobs share the machine: the 1-minute load average before each run.
        load: dict[str, list[float]] = {name: [] for name in ENGINES}
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
                # The bare readers' CPU as they measured it themselves (no process start-up).
                cpu[name].append(dict(tree.cpu_s) if name != "raw"
                                 else {"jvm": 0.0, "python": raw_cpu[-1], "driver": 0.0})
                print(f"run {i + 1} {name}: {seconds:.2f}s ({args.records / seconds:,.0f} "
                      f"records/s), CPU s {cpu[name][-1]}, load {load[name][-1]}", flush=True)
        sizes = [int(n) for n in args.rss_records.split(",") if n]
        rss = worker_rss(spark, config, sizes, args.record_bytes, args.partitions) if sizes else {}
        spark.stop()
        biggest = max(ranges, key=lambda r: r.size)
        profile = profile_split(config, biggest)
        admin = AdminClient(config)
        admin.delete_topics([topic])[topic].result(30)

    engines = {}
    for name, seconds in runs.items():
        median = statistics.median(seconds)
        per_million = [sum(c.values()) / args.records * 1e6 for c in cpu[name]]
        engines[name] = {
            "runs_s": [round(s, 3) for s in seconds],
            "loadavg_1m_before_runs": load[name],
            "median_s": round(median, 3),
            "records_per_s": round(args.records / median),
            "records_per_s_spread": spread([args.records / s for s in seconds], 0),
            "mb_per_s": round(total_bytes / median / 1e6, 1),
            "cpu_s_median": {kind: round(statistics.median(c[kind] for c in cpu[name]), 2)
                             for kind in ("jvm", "python", "driver")},
            "cpu_s_per_million": spread(per_million),
        }
    cpu_per_million = {k: v["cpu_s_per_million"]["median"] for k, v in engines.items()}
    result = {
        "records": args.records,
        "record_bytes": args.record_bytes,
        "partitions": args.partitions,
        "repeats": args.repeats,
        "spark_cores": cores,
        "sink": "Spark noop sink (python, spark_kafka); batches dropped (raw)",
        "raw_client": f"read_split (native reader), {cores} processes, no Spark",
        "engines": engines,
        "records_per_s": {k: v["records_per_s"] for k, v in engines.items()},
        "cpu_s_per_million": cpu_per_million,
        "ratio_python_vs_spark_kafka": round(
            engines["python"]["records_per_s"] / engines["spark_kafka"]["records_per_s"], 3),
        "ratio_python_vs_raw": round(
            engines["python"]["records_per_s"] / engines["raw"]["records_per_s"], 3),
        "ratio_cpu_python_vs_spark_kafka": round(
            cpu_per_million["python"] / cpu_per_million["spark_kafka"], 3),
        "python_worker_peak_rss_mb": {"per_worker": round(python_rss.peak_python_rss / 2**20, 1),
                                      "all_workers": round(
                                          python_rss.peak_python_rss_total / 2**20, 1)},
        "worker_rss_by_records": rss,
        "profile_read_split_one_partition": profile,
        "environment": {
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "pyspark": pyspark.__version__, "librdkafka_native": librdkafka_version(),
            "spark_kafka_jars": (ROOT / ".cache" / "spark-kafka" / "jars" / ".version")
            .read_text().strip(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    chart(result, args.out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("records_per_s", "cpu_s_per_million",
                                             "ratio_python_vs_spark_kafka",
                                             "ratio_python_vs_raw",
                                             "ratio_cpu_python_vs_spark_kafka",
                                             "python_worker_peak_rss_mb",
                                             "worker_rss_by_records")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
