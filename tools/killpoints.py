"""Run N kill points of exactly-once writes and print the tally.

Each kill point starts an exactly-once write in a child process, SIGKILLs it at a random
moment, re-runs the same write and checks that a read_committed read holds every row exactly
once (see ``tools/killpoint_harness.py``). ``--spark`` of them kill a real Spark driver
(its own local Spark application); the others a plain Python process running the same per-task
code path.

    .venv/bin/python tools/killpoints.py --n 30 --spark 6
    .venv/bin/python tools/killpoints.py --n 30 --bootstrap 127.0.0.1:9092 --seed 7

Without ``--bootstrap`` a local broker is started with ``scripts/kafka-broker`` and stopped at
the end. Exits 1 if any kill point lost or duplicated a row.
"""

from __future__ import annotations

import argparse
import random
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tools.killpoint_harness import (  # noqa: E402
    KillMoment,
    KillPoint,
    Workload,
    kill_moments,
    run_kill_point,
    unpaused,
    write_plain,
    write_spark,
)
from tools.local_broker import local_broker  # noqa: E402

PYTHON_WORKLOAD = Workload(partitions=4, rows=300)
SPARK_WORKLOAD = Workload(partitions=4, rows=300, pause_s=0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=30, help="kill points in total (default 30)")
    parser.add_argument("--spark", type=int, default=6,
                        help="how many of them kill a Spark driver (default 6)")
    parser.add_argument("--bootstrap", help="bootstrap.servers of a running broker")
    parser.add_argument("--seed", type=int, default=random.randrange(10**6))
    args = parser.parse_args()
    spark_points = min(args.spark, args.n)
    with local_broker(args.bootstrap) as bootstrap:
        return _run({"bootstrap.servers": bootstrap}, args.n - spark_points, spark_points,
                    args.seed)


def _run(config: dict[str, Any], python_points: int, spark_points: int, seed: int) -> int:
    admin = AdminClient(config)
    rng = random.Random(seed)
    print(f"seed={seed}: {python_points} plain-Python and {spark_points} Spark kill points, "
          "each series after two writes that are not killed", flush=True)
    points: list[KillPoint] = []
    if python_points:
        points += _series(config, admin, "python", python_points, rng, PYTHON_WORKLOAD,
                          lambda write_id, topic: write_plain(config, topic, write_id,
                                                              unpaused(PYTHON_WORKLOAD)))
    if spark_points:
        from airflow_provider_kafka_spark.spark import spark_session

        spark = spark_session("local[2]", app_name="killpoints-rerun", conf={
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
        try:
            points += _series(config, admin, "spark", spark_points, rng, SPARK_WORKLOAD,
                              lambda write_id, topic: write_spark(spark, config, topic,
                                                                  write_id,
                                                                  unpaused(SPARK_WORKLOAD)))
        finally:
            spark.stop()
    tally = Counter((p.mode, p.phase, "ok" if p.ok else "FAILED") for p in points)
    print(f"\n{'mode':<8} {'phase':<26} {'result':<7} count")
    for (mode, phase, result), count in sorted(tally.items()):
        print(f"{mode:<8} {phase:<26} {result:<7} {count}")
    failed = sum(1 for p in points if not p.ok)
    references = 2 * (bool(python_points) + bool(spark_points))
    print(f"\n{len(points) - references} kill points + {references} uninterrupted writes: "
          f"{len(points) - failed} exactly-once, {failed} failed (seed={seed})")
    return 1 if failed else 0


def _series(config: dict[str, Any], admin: AdminClient, mode: str, count: int, rng: Any,
            workload: Workload, rerun: Callable[[str, str], None]) -> list[KillPoint]:
    """Two writes that are not killed (checked too; the second times the commits), then
    ``count`` kill points spread over its commit window. ``rerun`` writes the same rows again
    (without the child's pauses: they only spread the killed write's commits)."""
    def point(moment: KillMoment | None) -> KillPoint:
        topic = _topic(admin)
        result = run_kill_point(config, topic, mode, moment, workload=workload,
                                rerun=lambda write_id: rerun(write_id, topic))
        print(result, flush=True)
        admin.delete_topics([topic])
        return result

    warm_up = point(None)  # the first write may create the ledger, load coordinators...
    reference = point(None)
    return [warm_up, reference,
            *(point(moment) for moment in kill_moments(rng, count, reference))]


def _topic(admin: AdminClient) -> str:
    name = f"killpoint-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, num_partitions=3)])[name].result(30)
    return name


if __name__ == "__main__":
    sys.exit(main())
