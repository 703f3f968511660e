"""Executor failure in the middle of a write, on the standalone cluster: a task is stopped
half-way by a gate (``jobs.gated``: its first rows already passed on to the sink), one
executor is SIGKILLed under it (found by pid in its worker's process tree), Spark runs the task
again elsewhere, and the output still holds every record exactly once. Each test also
re-runs the same write (idempotent re-run) in the same application.

The gate makes the timing deterministic, and each test asserts that the kill really cost a
task attempt (the driver's REST API lists the lost executor and the failed attempt, and the
gate saw the same partition's second attempt), so neither can pass without the kill.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import IsolationLevel

from tests.support import cluster_jobs as jobs
from tests.support.cluster import (
    Running,
    all_ranges,
    executor_of,
    running_job,
    transactional_input,
    wait_for,
)
from tools.kafka_records import consume_all, high_watermarks
from tools.spark_cluster import Cluster

PARTITIONS = 2
SPLIT = 150  # offsets per Spark partition: 2 per Kafka partition, 4 tasks for 2 executors
HOLD_AFTER = 40  # rows a gated exactly-once task passes to its producer before it is held


def held_tasks(gate: Path) -> list[tuple[int, int, int, int]]:
    """(stage, partition, attempt, python pid) of every task attempt waiting at the gate."""
    started = gate / jobs.STARTED
    if not started.exists():
        return []
    return sorted(tuple(int(x) for x in p.name.split(".")[:4])  # type: ignore[misc]
                  for p in started.iterdir() if p.name.endswith(".held"))


def attempts(gate: Path) -> list[tuple[int, int, int]]:
    """(stage, partition, attempt) of every task attempt that passed the gate's entry."""
    return sorted({tuple(int(x) for x in p.name.split(".")[:3])  # type: ignore[misc]
                   for p in (gate / jobs.STARTED).iterdir()})


def kill_an_executor_under_a_held_task(cluster: Cluster, job: Running, gate: Path,
                                       before_kill: Any = None) -> dict[str, Any]:
    """Wait until both executors hold a task at the gate, SIGKILL the executor JVM of one of
    them (worker-1's), wait until it is gone, then release the gate. What was killed."""
    app_id = wait_for(lambda: (gate / jobs.APP_FILE).exists() and json.loads(
        (gate / jobs.APP_FILE).read_text())["app_id"], "the application to start", job=job)
    held = wait_for(lambda: len(held_tasks(gate)) >= 2 and held_tasks(gate),
                    "two tasks held at the gate", timeout=180, job=job)
    where = {executor_of(cluster, pid, app_id): (stage, partition)
             for stage, partition, _, pid in held}
    assert {worker for worker, _ in where} == {"worker-1", "worker-2"}, where
    (worker, executor), (stage, partition) = next(
        (w, sp) for w, sp in where.items() if w[0] == "worker-1")
    if before_kill is not None:
        before_kill()
    os.kill(executor, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(executor) or
             psutil.Process(executor).status() == psutil.STATUS_ZOMBIE,
             "the killed executor to exit", timeout=30)
    (gate / jobs.RELEASE).touch()
    return {"app_id": app_id, "worker": worker, "executor": executor, "stage": stage,
            "partition": partition}


def assert_the_kill_cost_an_attempt(result: dict[str, Any], killed: dict[str, Any],
                                    gate: Path) -> None:
    assert result["app_id"] == killed["app_id"]
    assert len(result["removed_executors"]) == 1, result["removed_executors"]
    lost = result["removed_executors"][0]["id"]
    failed = [(t["stage"], t["index"], t["attempt"], t["executor"])
              for t in result["failed_tasks"]]
    assert (killed["stage"], killed["partition"], 0, lost) in failed, (failed, killed)
    # The same partition ran again (attempt 1) in the same stage, and finished.
    assert (killed["stage"], killed["partition"], 1) in attempts(gate)


def output_records(folder: Path) -> list[tuple[int, int, str, str]]:
    rows = []
    for part in sorted(folder.glob("part-*.json")):
        for line in part.read_text().splitlines():
            r = json.loads(line)
            rows.append((r["partition"], r["offset"], r["key"], r["value"]))
    return sorted(rows)


@pytest.mark.timeout(420)
def test_file_ingest_survives_an_executor_killed_mid_write(
        spark_cluster: Cluster, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any,
        tmp_path: Path) -> None:
    topic = new_topic(partitions=PARTITIONS)
    expected = transactional_input(kafka_config, kafka_admin, topic, PARTITIONS)
    ranges = all_ranges(kafka_config, topic)
    out, gate = tmp_path / "lake" / "out", tmp_path / "gate"
    spec = {"ranges": ranges.to_json(), "kafka_config": kafka_config,
            "max_records_per_split": SPLIT, "path": str(out), "repeat": 2,
            "manifest": {"ranges": ranges.to_dict()},
            "gate": {"dir": str(gate), "hold_run": 1, "hold_after": 40}}

    def writing() -> None:  # both held tasks have begun their part files in the staging folder
        staged = tmp_path / "lake"
        wait_for(lambda: len(list(staged.glob(".out._kafka_spark_staging-*/_temporary/**/part-*")))
                 >= 2, "two part files being written", timeout=60)

    with running_job(spark_cluster, "files", spec, tmp_path / "job") as job:
        killed = kill_an_executor_under_a_held_task(spark_cluster, job, gate, writing)
        result = job.result()

    assert_the_kill_cost_an_attempt(result, killed, gate)
    records = output_records(out)
    assert {(p, k, v) for p, _, k, v in records} == expected
    assert len(records) == len(expected) == 440
    manifest = json.loads((out / "_kafka_spark_manifest.json").read_text())
    assert manifest == {"ranges": ranges.to_dict(), "run": 2}
    assert result["runs"][0] == result["runs"][1]  # the re-run wrote the same output
    assert sorted(p.name for p in (tmp_path / "lake").iterdir()) == ["out"]  # nothing aside


@pytest.mark.timeout(420)
def test_exactly_once_write_survives_an_executor_killed_mid_transaction(
        spark_cluster: Cluster, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any,
        tmp_path: Path) -> None:
    source = new_topic(partitions=PARTITIONS)
    expected = transactional_input(kafka_config, kafka_admin, source, PARTITIONS)
    target = new_topic(partitions=3)
    gate = tmp_path / "gate"
    spec = {"ranges": all_ranges(kafka_config, source).to_json(), "kafka_config": kafka_config,
            "max_records_per_split": SPLIT, "topic": target, "repeat": 2,
            "transactional_id_prefix": f"cluster-{uuid.uuid4().hex[:8]}",
            "write_id": f"w-{uuid.uuid4().hex[:8]}",
            # evaluation 1 is write_kafka's pre-pass, 2 the write itself
            "gate": {"dir": str(gate), "hold_run": 2, "hold_after": HOLD_AFTER}}

    def mid_transaction() -> None:  # the held tasks' first rows are in open transactions
        # Some held task's rows; whether the killed task's own rows left Spark's buffers
        # before the kill varies, so the test does not count on them.
        wait_for(lambda: sum(high_watermarks(kafka_admin, target, 3, IsolationLevel.
                                             READ_UNCOMMITTED).values()) >= 20,
                 "the held tasks' first rows on the broker", timeout=60)
        assert sum(high_watermarks(kafka_admin, target, 3,
                                   IsolationLevel.READ_COMMITTED).values()) == 0

    with running_job(spark_cluster, "kafka", spec, tmp_path / "job") as job:
        killed = kill_an_executor_under_a_held_task(spark_cluster, job, gate, mid_transaction)
        result = job.result()

    assert_the_kill_cost_an_attempt(result, killed, gate)
    committed = consume_all(kafka_config, target, 3, isolation_level="read_committed")
    keys = Counter(k.decode() for _, _, k, _, _ in committed)
    assert set(keys) == {k for _, k, _ in expected}
    assert set(keys.values()) == {1}  # exactly one copy per key
    assert {(k.decode(), v.decode()) for _, _, k, v, _ in committed} == {
        (k, v) for _, k, v in expected}
    first, second = result["runs"]
    assert sum(first["records_per_task"].values()) == len(expected)
    # the re-run skips every task: each one's commit is in the ledger
    assert second == {"records_per_task": {},
                      "skipped_tasks": sorted(int(i) for i in first["records_per_task"])}
