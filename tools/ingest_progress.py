#!/usr/bin/env python3
"""Do the progress lines of a long ingest move? (issue 44: "the progress line moving at least
every 30 s on a 2 M record ingest".) A measurement, not a test: no threshold fails it.

    .venv/bin/python tools/ingest_progress.py                        # 2,000,000 x ~200 B, every 30 s
    .venv/bin/python tools/ingest_progress.py --run 30 --run 5:2000000   # also long splits, every 5 s
    .venv/bin/python tools/ingest_progress.py --bootstrap 127.0.0.1:9092  # a running broker
    .venv/bin/python tools/ingest_progress.py --slow 0.8   # a write longer than 30 s (see below)

Starts a broker (``tools/local_broker``: ``scripts/kafka-broker``, stopped by its pid) unless
``--bootstrap`` is given, produces ``--records`` records (12 B keys, ``--value-bytes`` ASCII
values) round-robin over 6 partitions of a fresh topic with the native batch producer,
resolves ``earliest``..``latest`` and runs, per ``--run EVERY[:MAX_RECORDS_PER_SPLIT]``,
``ingest(spark_session(master="local[2]"), ranges, config, FileSink(<fresh folder>),
progress_every=EVERY, max_records_per_split=...)`` with the package's logger at INFO. On a quiet
machine that ingest takes a few seconds, shorter than 30 s; ``--slow S`` makes it longer, with a
``transform`` that sleeps ``S`` seconds per Arrow batch (``mapInArrow``, 10,000 records a batch):
then the records go through Spark rows (``sink.write``), not the readers' own Parquet.

Prints each progress line with its wall-clock time and its seconds since the ingest began, and
per run: the records landed, the ingest's seconds, the gaps between lines (the first from the
call: the progress block starts after the pre-read checks), whether each line's count is above
the one before, and the longest span between two lines showing the same count
(``longest_repeat_s``). ``--out`` writes it all
as JSON too. The 1-minute load average before and after each run says how busy the machine
was (a shared 2-core box: times vary widely).

Measured at issue 44 (2 vCPUs shared with other workers, 1-minute load 4-8): 2,000,000
records (6 splits of 333,334) land in 16-25 s in a fresh session and in 3.5-4.4 s after it,
so ``progress_every=30`` logs no line; every 5, 1 and 0.5 s the counts grow, within splits
too (e.g. 207,838 and 313,512), the same count at most on two lines 0.5 s apart. With
``--slow 0.8`` (104 s): lines 30.0 s apart at 29%, 64%, 99%, the first 35 s after the call
(30 s after the progress block began; the pre-read checks take the rest). In a fresh session
the count stays 0 for the first 5-10 s of the block while Spark starts its Python workers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARTITIONS = 6
PROGRESS_LOGGER = "airflow_provider_kafka_spark.spark.ingest"
COUNT = re.compile(r": ([\d,]+) of at most [\d,]+ records read")


@dataclass
class Line:
    at: str  # wall clock, UTC
    since_start_s: float
    records: int | None  # None: a line without a count ("still writing after ...")
    text: str


@dataclass
class Run:
    every_s: float
    max_records_per_split: int | None
    records: int = 0
    ingest_s: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0
    lines: list[Line] = field(default_factory=list)
    gaps_s: list[float] = field(default_factory=list)
    counts_grow: bool = False
    longest_repeat_s: float = 0.0


class Collect(logging.Handler):
    """Keeps the progress lines, stamped, as they are logged."""

    def __init__(self, began: float) -> None:
        super().__init__(logging.INFO)
        self.began = began
        self.lines: list[Line] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if " records read (" not in text and "still writing after" not in text:
            return
        found = COUNT.search(text)
        self.lines.append(Line(
            datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            round(time.monotonic() - self.began, 2),
            int(found.group(1).replace(",", "")) if found else None, text))


def value(i: int, size: int) -> bytes:
    return (b"%012d-" % i + b"abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 1))[:size]


def produce(config: dict[str, Any], topic: str, records: int, value_bytes: int) -> None:
    """``records`` records round-robin over the topic's partitions (native batch producer)."""
    import pyarrow as pa

    from airflow_provider_kafka_spark.offsets.config import native_settings
    from airflow_provider_kafka_spark.spark.native import BatchProducer

    producer = BatchProducer(native_settings({
        **config, "linger.ms": 50, "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000, "compression.type": "none"}), True)
    for start in range(0, records, 100_000):
        ids = range(start, min(records, start + 100_000))
        producer.produce_batch(pa.RecordBatch.from_pydict({
            "key": pa.array([b"%012d" % i for i in ids], pa.binary()),
            "value": pa.array([value(i, value_bytes) for i in ids], pa.binary()),
            "partition": pa.array([i % PARTITIONS for i in ids], pa.int32()),
        }), topic)
    assert producer.flush(300) == 0
    assert producer.delivery_failures()[0] == 0, producer.delivery_failures()


def slowly(seconds: float) -> Any:
    """A transform that sleeps ``seconds`` per Arrow batch and passes the batch on."""
    def sleepy(batches: Any) -> Any:
        for batch in batches:
            time.sleep(seconds)
            yield batch

    return lambda df: df.mapInArrow(sleepy, df.schema)


def summarize(run: Run) -> None:
    """The gaps between lines (the first: from the call), whether the counts grow from line to
    line, and the longest span from a line to a later one showing the same count."""
    times = [line.since_start_s for line in run.lines]
    run.gaps_s = [round(b - a, 2) for a, b in zip([0.0, *times], times, strict=False)]
    counted = [(line.since_start_s, line.records) for line in run.lines
               if line.records is not None]
    run.counts_grow = all(b[1] > a[1] for a, b in zip(counted, counted[1:], strict=False))
    run.longest_repeat_s = round(max((t2 - t1 for t1, c1 in counted for t2, c2 in counted
                                      if c1 == c2 and t2 > t1), default=0.0), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--run", action="append", default=[],
                        help="EVERY[:MAX_RECORDS_PER_SPLIT], repeatable (default: 30)")
    parser.add_argument("--bootstrap", help="a running broker's bootstrap.servers")
    parser.add_argument("--slow", type=float, default=0.0,
                        help="seconds a transform sleeps per Arrow batch (default: none)")
    parser.add_argument("--out", type=Path, help="also write the runs as JSON here")
    args = parser.parse_args()
    runs = []
    for spec in args.run or ["30"]:
        every, _, split = spec.partition(":")
        runs.append(Run(float(every), int(split) if split else None))

    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
    from airflow_provider_kafka_spark.sinks import FileSink
    from airflow_provider_kafka_spark.spark import ingest, spark_session
    from tools.local_broker import local_broker

    logging.basicConfig(level=logging.WARNING, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger(PROGRESS_LOGGER).setLevel(logging.INFO)
    with local_broker(args.bootstrap) as bootstrap, \
            tempfile.TemporaryDirectory(prefix="ingest-progress-") as scratch:
        config: dict[str, Any] = {"bootstrap.servers": bootstrap}
        topic = f"progress-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(config)
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
        began = time.monotonic()
        produce(config, topic, args.records, args.value_bytes)
        print(f"produced {args.records:,} records in {time.monotonic() - began:.1f}s",
              flush=True)
        ranges = resolve_offsets(config, Subscription.topics([topic]), "earliest", "latest")
        spark = spark_session(master="local[2]")
        for index, run in enumerate(runs):
            run.load_before = os.getloadavg()[0]
            collect = Collect(time.monotonic())
            logging.getLogger(PROGRESS_LOGGER).addHandler(collect)
            try:
                result = ingest(spark, ranges, config, FileSink(f"{scratch}/run-{index}"),
                                progress_every=run.every_s,
                                max_records_per_split=run.max_records_per_split,
                                transform=slowly(args.slow) if args.slow else None)
            finally:
                logging.getLogger(PROGRESS_LOGGER).removeHandler(collect)
            run.ingest_s = round(time.monotonic() - collect.began, 2)
            run.load_after = os.getloadavg()[0]
            run.records, run.lines = result.records, collect.lines
            summarize(run)
            print(f"\nrun {index}: progress_every={run.every_s:g}s, max_records_per_split="
                  f"{run.max_records_per_split}: {run.records:,} records in {run.ingest_s}s "
                  f"(load {run.load_before:.1f} -> {run.load_after:.1f})")
            for line in run.lines:
                print(f"  {line.at}  +{line.since_start_s:7.2f}s  {line.text}")
            print(f"  gaps between lines: {run.gaps_s}; counts grow: {run.counts_grow}; "
                  f"longest repeat of a count: {run.longest_repeat_s}s", flush=True)
        spark.stop()
        for future in admin.delete_topics([topic]).values():
            future.result(60)
    if args.out:
        args.out.write_text(json.dumps({"records": args.records, "value_bytes": args.value_bytes,
                                        "partitions": PARTITIONS, "slow": args.slow,
                                        "runs": [asdict(r) for r in runs]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
