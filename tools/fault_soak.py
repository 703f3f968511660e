"""Soak the package against broker failures: N rounds of a random broker SIGKILL during a
random read or exactly-once write on a local 3-broker cluster, then print the tally.

Each round picks a read (``read_kafka``, either engine, of a resolved range of a pre-filled
topic) or an exactly-once write (``write_kafka`` of slowly arriving rows to a fresh topic),
starts it, and SIGKILLs a random broker after a random delay. A round that fails is re-run
once (the documented remedy: a re-run of the same ranges or the same write id); its error
must be one of this package's exceptions (for reads with ``engine="spark-kafka"``, Spark's own
errors are accepted too). Then the
broker is restarted and the round's output is checked against what it must be: the exact
records of the range, or every written row exactly once for read_committed readers.

    .venv/bin/python tools/fault_soak.py --rounds 30
    .venv/bin/python tools/fault_soak.py --rounds 5 --seed 7

The cluster (``scripts/kafka-broker start --brokers 3``) and a local[2] Spark session are
started here and stopped at the end, also on failure. Exits 1 if any round lost or duplicated
a record, did not complete after its re-run, or failed with an error that is not ours. The
tally is also written to .cache/soak/fault_soak.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from airflow_provider_kafka_spark.offsets import (  # noqa: E402
    KafkaSparkError,
    Subscription,
    resolve_offsets,
)
from airflow_provider_kafka_spark.spark import (  # noqa: E402
    fetch_spark_kafka_jars,
    read_kafka,
    spark_session,
    write_kafka,
)
from tools.fault_workloads import SLOW_FETCH, fill, rows_of, slow_input  # noqa: E402
from tools.kafka_records import consume_all  # noqa: E402
from tools.local_broker import LocalCluster, local_cluster  # noqa: E402
from tools.write_kafka_rows import expected_keys, read_committed  # noqa: E402

SOURCE_PARTITIONS, SOURCE_RECORDS = 4, 2000
WRITE_PARTITIONS, WRITE_ROWS = 4, 600
RESULT = ROOT / ".cache" / "soak" / "fault_soak.json"


@dataclass
class Tally:
    runs: int = 0
    reads: int = 0
    writes: int = 0
    faults_injected: int = 0
    faults_mid_operation: int = 0
    failed_then_rerun: int = 0
    records_expected: int = 0
    records_seen: int = 0
    duplicates: int = 0
    missing: int = 0
    unrecovered: int = 0
    unclear_errors: int = 0
    errors: list[str] = field(default_factory=list)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=random.randrange(10**6))
    args = parser.parse_args()

    jars = fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                                  ROOT / ".cache" / "spark-kafka" / "jars")
    rng = random.Random(args.seed)
    tally = Tally()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fault-soak-") as scratch, \
            local_cluster(Path(scratch), brokers=3) as cluster:
        spark = spark_session("local[2]", app_name="fault-soak", jars=jars,
                              conf={"spark.ui.enabled": "false"})
        try:
            config = {"bootstrap.servers": cluster.bootstrap}
            source = _topic(config, SOURCE_PARTITIONS)
            fill(config, source, SOURCE_PARTITIONS, SOURCE_RECORDS)
            for n in range(1, args.rounds + 1):
                _round(n, rng, spark, cluster, config, source, tally)
        finally:
            spark.stop()
    report = {"seed": args.seed, "rounds": args.rounds,
              "seconds": round(time.monotonic() - started), **asdict(tally)}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "errors"}))
    print(f"written to {RESULT}")
    return 1 if tally.duplicates or tally.missing or tally.unrecovered or tally.unclear_errors \
        else 0


def _topic(config: dict[str, Any], partitions: int) -> str:
    admin = AdminClient(config)
    name = f"soak-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(name, timeout=10).topics[name].partitions
        if len(found) == partitions and all(p.leader >= 0 for p in found.values()):
            return name
        time.sleep(0.2)
    raise RuntimeError(f"{name} has no leaders after 30 s")


def _round(n: int, rng: random.Random, spark: Any, cluster: LocalCluster,
           config: dict[str, Any], source: str, tally: Tally) -> None:
    operation = rng.choice(["read", "write"])
    engine = rng.choice(["python", "spark-kafka"])
    victim = rng.choice(cluster.brokers)
    delay = rng.uniform(0.5, 6.0)
    running = threading.Event()
    running.set()

    def kill_later() -> None:
        time.sleep(delay)
        mid = running.is_set()
        cluster.kill(victim)
        tally.faults_injected += 1
        tally.faults_mid_operation += mid

    if operation == "read":
        ranges = resolve_offsets(config, Subscription.topics(source), "earliest", "latest")
        expected = [(p, o, v) for p, o, _, v, _ in
                    consume_all(config, source, SOURCE_PARTITIONS, "read_committed")]

        def attempt() -> list[Any]:
            return rows_of(read_kafka(spark, ranges, {**config, **SLOW_FETCH}, engine=engine,
                                      max_records_per_split=SOURCE_RECORDS))
    else:
        output = _topic(config, WRITE_PARTITIONS)
        write_id = f"soak-{n}-{uuid.uuid4().hex[:6]}"
        expected = sorted(expected_keys(WRITE_PARTITIONS, WRITE_ROWS).elements())

        def attempt() -> list[Any]:
            write_kafka(slow_input(spark, WRITE_PARTITIONS, WRITE_ROWS), config, topic=output,
                        write_id=write_id, transactional_id_prefix="soak",
                        transaction_timeout_ms=30_000)
            return []  # read back below, once the cluster is whole again

    killer = threading.Thread(target=kill_later, daemon=True)
    killer.start()
    outcome = "ok"
    try:
        got = attempt()
    except Exception as exc:  # the documented remedy: run the same work again
        outcome = f"failed ({type(exc).__name__}), re-run"
        tally.failed_then_rerun += 1
        tally.errors.append(f"round {n}: {_described(exc)}")
        # A read on engine="spark-kafka" fails with Spark's own (Java) errors; every other
        # failure must be one of this package's exceptions.
        if operation == "write" or engine == "python":
            tally.unclear_errors += not isinstance(exc, KafkaSparkError)
        try:
            got = attempt()
        except Exception as again:
            tally.unrecovered += 1
            tally.errors.append(f"round {n} re-run: {_described(again)}")
            got = None
            outcome = "failed twice"
    running.clear()
    killer.join()
    cluster.settle()
    if operation == "write" and got is not None:
        got = sorted(r.key for r in read_committed(config, output))
    got = got or []
    counts = Counter(got)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    missing = sum((Counter(expected) - counts).values())
    tally.runs += 1
    tally.reads += operation == "read"
    tally.writes += operation == "write"
    tally.records_expected += len(expected)
    tally.records_seen += len(got)
    tally.duplicates += duplicates
    tally.missing += missing if outcome != "failed twice" else 0
    print(f"round {n:2d}: {operation:5s} {engine if operation == 'read' else 'exactly_once':12s}"
          f" broker {victim} killed after {delay:.1f}s: {outcome}; {len(got)} of "
          f"{len(expected)} records, {duplicates} duplicates, {missing} missing", flush=True)


def _described(exc: BaseException) -> str:
    """``exc``'s class, text and where it was raised (file:line of the innermost frame in this
    package, else the innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "airflow_provider_kafka_spark" in f.filename] or frames
    where = f" at {Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""
    return f"{type(exc).__name__}{where}: {str(exc)[:300]}"


if __name__ == "__main__":
    sys.exit(main())
