#!/usr/bin/env python3
"""Write throughput: write_kafka exactly_once vs at_least_once vs Spark's built-in Kafka sink.

    .venv/bin/python benchmarks/write_throughput.py [--records 1000000] [--repeats 5] [--id-writes 50]

Builds one DataFrame of N records (key = the row number, value = 200 B), caches it in memory
and then writes it, in interleaved rounds, with ``write_kafka(delivery_guarantee=
"exactly_once")`` (which includes its per-partition row-count pass), ``write_kafka(
delivery_guarantee="at_least_once")`` and ``df.write.format("kafka")`` (Spark's own sink:
Java producer, ``acks=all``, idempotent, at-least-once), each into a fresh 6-partition topic.
Every mode is measured in every round. Every write is checked to have put exactly N records
into its topic. The topics are all kept until the end of the run and deleted then (also on
failure): deleting earlier rounds' topics while Spark's cached Java producer lived on once
failed its next write (NOT_LEADER_OR_FOLLOWER, then OUT_OF_ORDER_SEQUENCE_NUMBER until the
delivery timeout). Reports medians, records/s, CPU seconds per million records of every
process (JVM, Python workers with the native producer's threads, driver) with their spread,
and the ratios exactly_once/at_least_once and exactly_once/spark_kafka.

Then, unless ``--id-writes 0``, the transactional ids of a run of writes: ``--id-writes``
(default 50) consecutive ``write_kafka(delivery_guarantee="exactly_once")`` writes of one
small 6-partition DataFrame (600 rows), each with its own ``write_id`` and all with one
``transactional_id_prefix`` unique to this run, into one topic; then the transactional ids
with that prefix the brokers' transaction coordinators know (``tools/transactions.py``, Kafka's
``kafka-transactions.sh list``). Reported as ``transactional_ids_after_50_writes`` (the count,
whatever ``--id-writes`` is), ``writes_for_transactional_ids`` (the number of writes) and
``write_parallelism`` (the DataFrame's partitions): one id per task and write would give
writes x parallelism; a bounded pool of ids, at most the pool's size.

Writes benchmarks/results/write_throughput.json and .png. Starts its own broker with
scripts/kafka-broker unless --bootstrap is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

import pyspark  # noqa: E402
from confluent_kafka import IsolationLevel, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

from airflow_provider_kafka_spark.spark import (  # noqa: E402
    fetch_spark_kafka_jars,
    spark_session,
    write_kafka,
)
from airflow_provider_kafka_spark.spark.native import librdkafka_version  # noqa: E402
from benchmarks.measure import ProcessTree, cpu_panel, spread  # noqa: E402
from tools.local_broker import local_broker  # noqa: E402
from tools.transactions import transactional_ids  # noqa: E402
from tools.write_kafka_rows import read_committed  # noqa: E402

MODES = ("exactly_once", "at_least_once", "spark_kafka")
TOPIC_PARTITIONS = 6
ID_WRITE_ROWS = 600
ID_WRITE_PARALLELISM = 6


def create_topic(admin: AdminClient, topic: str, timeout: float = 30.0) -> None:
    """Create ``topic`` (``TOPIC_PARTITIONS`` partitions) and wait until the cluster's
    metadata gives every partition a leader, so no write starts against a topic still being
    set up."""
    admin.create_topics([NewTopic(topic, TOPIC_PARTITIONS, 1)])[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        partitions = admin.list_topics(topic=topic, timeout=timeout).topics[topic].partitions
        if len(partitions) == TOPIC_PARTITIONS and all(
                p.leader >= 0 and p.error is None for p in partitions.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: partitions without a leader after {timeout:.0f}s")
        time.sleep(0.1)


def delete_topics(admin: AdminClient, topics: list[str]) -> None:
    """Delete ``topics`` (all of this run's), reporting but not raising failures."""
    if not topics:
        return
    for topic, future in admin.delete_topics(topics, operation_timeout=60).items():
        try:
            future.result(timeout=90)
        except Exception as exc:  # noqa: BLE001 - cleanup: say what is left, go on
            print(f"could not delete topic {topic}: {exc}", file=sys.stderr, flush=True)


def committed_count(config: dict[str, Any], admin: AdminClient, topic: str, mode: str) -> int:
    """Records in ``topic``: the sum of high watermarks, or a read_committed read for
    transactional output (whose offsets include commit markers)."""
    if mode == "exactly_once":
        return len(read_committed(config, topic, timeout=300))
    tps = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(TOPIC_PARTITIONS)}
    futures = admin.list_offsets(tps, isolation_level=IsolationLevel.READ_UNCOMMITTED)
    return sum(f.result(timeout=30).offset for f in futures.values())


def count_transactional_ids(spark: Any, bootstrap: str, topic: str, writes: int
                            ) -> dict[str, Any]:
    """``writes`` consecutive exactly_once writes of one small DataFrame (``ID_WRITE_ROWS``
    rows in ``ID_WRITE_PARALLELISM`` partitions) into ``topic``, each with its own write id and
    all with one transactional id prefix unique to this run; then the number of transactional
    ids with that prefix the transaction coordinators know."""
    from pyspark.sql import functions as F

    df = spark.range(0, ID_WRITE_ROWS, numPartitions=ID_WRITE_PARALLELISM).select(
        F.col("id").cast("string").cast("binary").alias("key"),
        F.col("id").cast("string").cast("binary").alias("value")).cache()
    assert df.count() == ID_WRITE_ROWS
    parallelism = df.rdd.getNumPartitions()
    config = {"bootstrap.servers": bootstrap}
    run = uuid.uuid4().hex[:12]
    prefix = f"bench-ids-{run}"
    start = time.perf_counter()
    for i in range(writes):
        write_kafka(df, config, topic=topic, delivery_guarantee="exactly_once",
                    transactional_id_prefix=prefix, write_id=f"bench-ids-{run}-{i}")
    elapsed = time.perf_counter() - start
    df.unpersist()
    written = len(read_committed(config, topic, timeout=300))
    assert written == writes * ID_WRITE_ROWS, \
        f"{topic}: {written} records, not {writes * ID_WRITE_ROWS}"
    count = len(transactional_ids(bootstrap, prefix))
    print(f"transactional ids with prefix {prefix}- after {writes} exactly_once writes of "
          f"parallelism {parallelism}: {count} ({elapsed:.1f}s for the writes)", flush=True)
    return {"transactional_ids_after_50_writes": count, "writes_for_transactional_ids": writes,
            "write_parallelism": parallelism, "id_writes_seconds": round(elapsed, 2)}


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, cost) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = ["write_kafka\nexactly_once", "write_kafka\nat_least_once", "Spark built-in\nKafka sink"]
    colors = ["#2a6", "#48c", "#999"]
    values = [result["records_per_s"][m] / 1000 for m in MODES]
    bars = speed.bar(labels, values, color=colors)
    speed.bar_label(bars, labels=[f"{v:,.0f}k" for v in values])
    speed.set_ylabel("records/s (thousands, median)")
    speed.set_title(f"exactly_once/spark = {result['ratio_exactly_once_vs_spark_kafka']:.2f}x, "
                    f"exactly_once/at_least_once = "
                    f"{result['ratio_exactly_once_vs_at_least_once']:.2f}x", fontsize=10)
    cpu_panel(cost, labels, colors, [result["cpu_s_per_million_spread"][m] for m in MODES],
              f"CPU exactly_once/spark = {result['ratio_cpu_exactly_once_vs_spark_kafka']:.2f}x")
    fig.suptitle(f"Write throughput: {result['records']:,} x {result['value_bytes']} B, "
                 f"{result['spark_master']}, {result['df_partitions']} partitions, "
                 f"{result['repeats']} interleaved rounds", fontsize=11)
    if result["writes_for_transactional_ids"]:
        fig.text(0.99, 0.01,
                 f"transactional ids after {result['writes_for_transactional_ids']} "
                 f"exactly_once writes of parallelism {result['write_parallelism']}: "
                 f"{result['transactional_ids_after_50_writes']}",
                 ha="right", va="bottom", fontsize=8, color="#444")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=4, help="DataFrame partitions")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap", help="bootstrap.servers of a running broker")
    parser.add_argument("--out", type=Path, default=RESULTS / "write_throughput.json")
    parser.add_argument("--id-writes", type=int, default=50,
                        help="exactly_once writes whose transactional ids are counted after "
                             "the timed rounds (default 50; 0 skips)")
    args = parser.parse_args()
    if args.repeats < 1 or args.id_writes < 0:
        parser.error("--repeats must be >= 1 and --id-writes >= 0")

    jars = fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                                  ROOT / ".cache" / "spark-kafka" / "jars")
    with local_broker(args.bootstrap) as bootstrap:
        config = {"bootstrap.servers": bootstrap}
        admin = AdminClient(config)
        spark = spark_session(args.master, app_name="write-throughput", jars=jars, conf={
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
        from pyspark.sql import functions as F

        pad = "x" * args.value_bytes
        df = spark.range(0, args.records, numPartitions=args.partitions).select(
            F.col("id").cast("string").cast("binary").alias("key"),
            F.substring(F.concat(F.col("id").cast("string"), F.lit(pad)), 1,
                        args.value_bytes).cast("binary").alias("value"),
        ).cache()
        assert df.count() == args.records

        def writer(mode: str, topic: str) -> Callable[[], Any]:
            if mode == "spark_kafka":
                return lambda: (df.write.format("kafka")
                                .option("kafka.bootstrap.servers", bootstrap)
                                .option("topic", topic).save())
            return lambda: write_kafka(df, config, topic=topic, delivery_guarantee=mode,
                                       transactional_id_prefix="bench-write-throughput",
                                       write_id=f"bench-{uuid.uuid4().hex}")

        seconds: dict[str, list[float]] = {m: [] for m in MODES}
        cpu: dict[str, list[float]] = {m: [] for m in MODES}
        ids: dict[str, Any] = {"transactional_ids_after_50_writes": None,
                               "writes_for_transactional_ids": args.id_writes,
                               "write_parallelism": None, "id_writes_seconds": None}
        topics: list[str] = []  # every topic of the run, deleted at the end only
        try:
            for round_ in range(args.repeats + 1):  # round 0 warms up every path, not counted
                for mode in MODES:
                    topic = f"bench-write-{mode}-{uuid.uuid4().hex[:8]}"
                    topics.append(topic)
                    create_topic(admin, topic)
                    with ProcessTree() as tree:
                        start = time.perf_counter()
                        writer(mode, topic)()
                        elapsed = time.perf_counter() - start
                    written = committed_count(config, admin, topic, mode)
                    assert written == args.records, \
                        f"{mode}: {written} records, not {args.records}"
                    print(f"round {round_} {mode:<14} {elapsed:7.2f}s "
                          f"{args.records / elapsed:>12,.0f} records/s, CPU s {tree.cpu_s}",
                          flush=True)
                    if round_:
                        seconds[mode].append(elapsed)
                        cpu[mode].append(tree.total_cpu_s / args.records * 1e6)
            if args.id_writes:
                topic = f"bench-write-ids-{uuid.uuid4().hex[:8]}"
                topics.append(topic)
                create_topic(admin, topic)
                ids.update(count_transactional_ids(spark, bootstrap, topic, args.id_writes))
        finally:
            delete_topics(admin, topics)
            spark.stop()

    median = {m: statistics.median(s) for m, s in seconds.items()}
    per_s = {m: args.records / median[m] for m in MODES}
    cpu_spread = {m: spread(cpu[m]) for m in MODES}
    per_million = {m: cpu_spread[m]["median"] for m in MODES}
    result = {
        "records": args.records,
        "value_bytes": args.value_bytes,
        "repeats": args.repeats,
        "df_partitions": args.partitions,
        "topic_partitions": TOPIC_PARTITIONS,
        "spark_master": args.master,
        "median_seconds": median,
        "seconds": seconds,
        "records_per_s": per_s,
        "ratio_exactly_once_vs_at_least_once": per_s["exactly_once"] / per_s["at_least_once"],
        "ratio_exactly_once_vs_spark_kafka": per_s["exactly_once"] / per_s["spark_kafka"],
        "records_per_s_spread": {m: spread([args.records / x for x in seconds[m]], 0)
                                 for m in MODES},
        "cpu_s_per_million": per_million,
        "cpu_s_per_million_spread": cpu_spread,
        "ratio_cpu_exactly_once_vs_spark_kafka": round(
            per_million["exactly_once"] / per_million["spark_kafka"], 3),
        **ids,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "pyspark": pyspark.__version__, "load_avg_1m_at_end": os.getloadavg()[0],
                    "librdkafka_native": librdkafka_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    chart(result, args.out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("records_per_s", "cpu_s_per_million",
                                             "ratio_exactly_once_vs_at_least_once",
                                             "ratio_exactly_once_vs_spark_kafka",
                                             "ratio_cpu_exactly_once_vs_spark_kafka",
                                             "transactional_ids_after_50_writes",
                                             "writes_for_transactional_ids",
                                             "write_parallelism")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
