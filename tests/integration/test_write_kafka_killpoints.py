"""Exactly-once under SIGKILL and Spark task retries: every row is visible exactly once.

Each kill point SIGKILLs a writing child process at a random moment, re-runs the same write
and compares a read_committed read with the expected rows key by key. ``tools/killpoints.py``
runs many more of them and prints the tally.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections import Counter
from functools import partial
from typing import Any

import pytest

from tests.integration.killpoints import (
    KillPoint,
    Workload,
    child_command,
    run_kill_point,
    start_child,
    stratified_delays,
    write_plain,
    write_spark,
)
from tests.integration.write_kafka_support import expected_keys, read_committed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SEED = int(os.environ.get("KILLPOINT_SEED", random.randrange(10**6)))
PYTHON_KILL_POINTS = 10
SPARK_KILL_POINTS = 3


def _report(points: list[KillPoint]) -> str:
    tally = Counter((p.phase, "ok" if p.ok else "FAILED") for p in points)
    return f"seed={SEED} tally={dict(tally)} points={points}"


def test_sigkilled_plain_writer_rerun_leaves_each_row_exactly_once(
    kafka_config: dict[str, Any], new_topic: Any
) -> None:
    workload = Workload(partitions=4, rows=300)
    points = []
    for delay in stratified_delays(random.Random(SEED), PYTHON_KILL_POINTS, window_s=3.0):
        topic = new_topic(partitions=3)
        rerun = partial(lambda t, w: write_plain(kafka_config, t, w, workload), topic)
        points.append(run_kill_point(kafka_config, topic, "python", delay, workload=workload,
                                     rerun=rerun))
    print(_report(points))
    assert all(p.ok for p in points), _report(points)
    assert len({p.phase for p in points}) >= 2, _report(points)


def test_sigkilled_spark_driver_rerun_leaves_each_row_exactly_once(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    workload = Workload(pause_s=0.1)
    points = []
    for delay in stratified_delays(random.Random(SEED + 1), SPARK_KILL_POINTS, window_s=6.0):
        topic = new_topic(partitions=3)
        rerun = partial(lambda t, w: write_spark(spark, kafka_config, t, w, workload), topic)
        points.append(run_kill_point(kafka_config, topic, "spark", delay, workload=workload,
                                     rerun=rerun))
    print(_report(points))
    assert all(p.ok for p in points), _report(points)


def test_a_task_failing_once_mid_transaction_is_retried_by_spark_without_duplicates(
    kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """``local[2,2]``: Spark retries a failed task once. The first attempt of task 1 fails
    after producing most of its rows inside its transaction; the retry writes the partition."""
    topic = new_topic(partitions=3)
    workload = Workload(partitions=4, rows=4000, pause_s=0.0)
    child = start_child(child_command(kafka_config["bootstrap.servers"], topic,
                                      f"retry-once-{uuid.uuid4().hex}",
                                      "spark", workload, master="local[2,2]",
                                      fail_once_partition=1))
    out, _ = child.communicate(timeout=240)
    assert child.returncode == 0, out
    result = json.loads(out.strip().splitlines()[-1].removeprefix("DONE "))

    assert result == {"records_per_task": {str(i): 4000 for i in range(4)}, "skipped_tasks": []}
    committed = Counter(r.key for r in read_committed(kafka_config, topic))
    assert committed == expected_keys(4, 4000)
    # The failed attempt really wrote inside its (aborted) transaction:
    everything = read_committed(kafka_config, topic, isolation_level="read_uncommitted")
    assert len(everything) > 4 * 4000
