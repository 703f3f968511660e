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
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from tools.killpoint_harness import (
    KillMoment,
    KillPoint,
    Workload,
    child_command,
    kill_moments,
    run_kill_point,
    start_child,
    unpaused,
    write_plain,
    write_spark,
)
from tools.write_kafka_rows import expected_keys, read_committed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SEED = int(os.environ.get("KILLPOINT_SEED", random.randrange(10**6)))
PYTHON_KILL_POINTS = 10
SPARK_KILL_POINTS = 3


def _report(points: list[KillPoint]) -> str:
    tally = Counter((p.phase, "ok" if p.ok else "FAILED") for p in points)
    return f"seed={SEED} tally={dict(tally)} points={points}"


def _kill_series(kafka_config: dict[str, Any], new_topic: Any, mode: str, count: int,
                 workload: Workload, rerun: Callable[[str, str], Any]) -> list[KillPoint]:
    """Uninterrupted writes (checked too; the last one times the commits), then ``count``
    kill points spread over its commit window. ``rerun(topic, write_id)`` writes the same
    rows again (without the child's pauses: they only spread the killed write's commits)."""
    def point(moment: KillMoment | None) -> KillPoint:
        topic = new_topic(partitions=3)
        return run_kill_point(kafka_config, topic, mode, moment, workload=workload,
                              rerun=partial(rerun, topic))

    # A first write may create the ledger and load coordinators: cheap to warm up for the
    # plain-Python child, too slow (a Spark start) for the Spark one.
    warm_up = [point(None)] if mode == "python" else []
    reference = point(None)
    moments = kill_moments(random.Random(f"{SEED}-{mode}"), count, reference)
    return [*warm_up, reference, *(point(moment) for moment in moments)]


def test_sigkilled_plain_writer_rerun_leaves_each_row_exactly_once(
    kafka_config: dict[str, Any], new_topic: Any
) -> None:
    workload = Workload(partitions=4, rows=300)
    points = _kill_series(kafka_config, new_topic, "python", PYTHON_KILL_POINTS, workload,
                          lambda topic, write_id: write_plain(kafka_config, topic, write_id,
                                                              unpaused(workload)))
    print(_report(points))
    assert all(p.ok for p in points), _report(points)
    assert "between task commits" in {p.phase for p in points}, _report(points)


# Four Spark driver processes (an uninterrupted write, then SPARK_KILL_POINTS killed ones), each
# followed by a rerun in this session: it ran past pytest's 300 s once at load 10-13 (the
# plain-writer series, without Spark drivers, took 150 s there). The timeout is for that work,
# never a retry.
@pytest.mark.timeout(600)
def test_sigkilled_spark_driver_rerun_leaves_each_row_exactly_once(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    workload = Workload(partitions=4, rows=300, pause_s=0.3)
    points = _kill_series(kafka_config, new_topic, "spark", SPARK_KILL_POINTS, workload,
                          lambda topic, write_id: write_spark(spark, kafka_config, topic,
                                                              write_id, unpaused(workload)))
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
