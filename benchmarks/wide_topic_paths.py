#!/usr/bin/env python3
"""The driver-side paths over a topic of many partitions (issue 54): how long a resolution, the
interval sensor's completeness check and a pin's write and read take at 6, 100 and 1,000
partitions, on one local broker.

    .venv/bin/python benchmarks/wide_topic_paths.py [--partitions 6,100,1000] [--repeats 5]

Starts a broker (``tools/local_broker``, stopped by its pid) and, per count, a topic with 10
records per partition over the last 10 minutes (recent timestamps); then times each path
``--repeats`` times after one warm-up, each call a new client as in an Airflow task:

* ``resolve_latest``: ``resolve_offsets(earliest, latest)``;
* ``resolve_timestamps``: ``resolve_offsets(timestamp:T-5min, timestamp:T)``;
* ``interval_complete``: ``check_interval_complete(end=T-5min)`` (the sensor's and the
  watcher's check);
* ``pin``: ``pin_ranges`` then ``pinned_ranges`` of the latest ranges (the resolve operator's
  pins).

Writes median seconds per path and count, and the 1,000 / 6 ratio of each, to
benchmarks/results/wide_topic_paths.json and .png.
"""

from __future__ import annotations

import argparse
import json
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

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets  # noqa: E402
from airflow_provider_kafka_spark.offsets.completeness import (  # noqa: E402
    check_interval_complete,
)
from airflow_provider_kafka_spark.offsets.pins import RunKey, pin_ranges, pinned_ranges  # noqa: E402
from tools.kafka_records import produce  # noqa: E402
from tools.local_broker import local_broker  # noqa: E402

PER_PARTITION = 10


def _topic(config: dict[str, Any], partitions: int, now_ms: int) -> str:
    name = f"wide-{partitions}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(60)
    time.sleep(1.0)
    produce(config, name, [(p, None, f"{p}-{i}".encode(), now_ms - 600_000 + i * 60_000)
                           for p in range(partitions) for i in range(PER_PARTITION)])
    return name


def _timed(call: Callable[[], Any], repeats: int) -> dict[str, Any]:
    call()  # warm-up
    runs = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        runs.append(time.perf_counter() - began)
    return {"median_s": round(statistics.median(runs), 4), "runs_s": [round(r, 4) for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="6,100,1000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS / "wide_topic_paths.json"))
    args = parser.parse_args()
    counts = [int(c) for c in args.partitions.split(",")]
    results: dict[str, Any] = {"per_partition_records": PER_PARTITION, "counts": {}}
    with local_broker() as bootstrap:
        config = {"bootstrap.servers": bootstrap}
        for count in counts:
            now = int(time.time() * 1000)
            topic = _topic(config, count, now)
            subscription = Subscription.topics([topic])
            ranges = resolve_offsets(config, subscription, "earliest", "latest")
            assert len(ranges.ranges) == count and ranges.total() == count * PER_PARTITION
            run = RunKey("wide", "resolve", f"run-{count}")
            request = {"subscription": f"topics:{topic}", "start": "earliest", "stop": "latest"}

            def pin(run: RunKey = run, ranges: Any = ranges, request: Any = request) -> None:
                pin_ranges(config, run, ranges, request)
                assert pinned_ranges(config, run, request) == ranges

            paths = {
                "resolve_latest": lambda s=subscription: resolve_offsets(
                    config, s, "earliest", "latest"),
                "resolve_timestamps": lambda s=subscription, n=now: resolve_offsets(
                    config, s, f"timestamp:{n - 300_000}", f"timestamp:{n}"),
                "interval_complete": lambda s=subscription, n=now: check_interval_complete(
                    config, s, n - 300_000, None),
                "pin": pin,
            }
            results["counts"][str(count)] = {
                name: _timed(call, args.repeats) for name, call in paths.items()}
            print(count, {k: v["median_s"] for k, v in results["counts"][str(count)].items()},
                  flush=True)
    low, high = str(min(counts)), str(max(counts))
    results["ratio_high_vs_low"] = {
        name: round(results["counts"][high][name]["median_s"]
                    / results["counts"][low][name]["median_s"], 2)
        for name in results["counts"][low]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    _plot(results, counts, out.with_suffix(".png"))
    print(json.dumps(results["ratio_high_vs_low"]))


def _plot(results: dict[str, Any], counts: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for name in results["counts"][str(counts[0])]:
        axis.plot(counts, [results["counts"][str(c)][name]["median_s"] for c in counts],
                  marker="o", label=name)
    axis.set_xscale("log")
    axis.set_xlabel("partitions of the topic")
    axis.set_ylabel("seconds (median)")
    axis.set_title("driver-side paths over a wide topic (one local broker)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
