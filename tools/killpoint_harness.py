"""Kill-point harness: SIGKILL an exactly-once write at a random moment, re-run it, check output.

A child process (``python -m tools.killpoint_harness child ...``) runs one exactly-once
write of a deterministic data set (keys ``k<partition>-<row>``) in one of two ways:

``spark``
    its own local Spark application calling ``write_kafka`` (driver, JVM and Python workers
    all die with the kill);
``python``
    a plain process running the same driver and per-task code path (``ExactlyOnceWrite`` +
    ``write_partition`` for each partition index in turn), without Spark's start-up time.

The harness waits for the child's ``READY`` line, waits for the chosen moment, kills the child's
whole process group with SIGKILL, counts the tasks the ledger shows committed (the kill's
phase), runs the same write again in this process, and compares a read_committed read of the
output with the expected multiset, key by key. Used by
``tests/integration/test_write_kafka_killpoints.py``
and ``tools/killpoints.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_kafka_spark.offsets.cluster import admin_client
from airflow_provider_kafka_spark.spark.write.ledger import (
    LedgerKey,
    ensure_ledger_topic,
    ledger_end_offset,
    ledger_partition,
    ledger_start_offset,
    read_ledger,
)
from airflow_provider_kafka_spark.spark.write.plan import ExactlyOnce, ExactlyOnceWrite
from airflow_provider_kafka_spark.spark.write.pool import LEASE_TTL_S
from airflow_provider_kafka_spark.spark.write.task import write_partition
from airflow_provider_kafka_spark.spark.write.writer import write_kafka
from tools.write_kafka_rows import (
    expected_keys,
    partition_batches,
    read_committed,
    row_value,
)

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "killpoint"
LEDGER = "_kafka_spark_ledger"
TRANSACTION_TIMEOUT_MS = 10000


@dataclass(frozen=True)
class Workload:
    """The data set of one kill point and how slowly the child writes it."""

    partitions: int = 6
    rows: int = 400
    batch_rows: int = 100
    pause_s: float = 0.05


def unpaused(workload: Workload) -> Workload:
    """The same rows, written without pauses (a re-run: nothing is killed during it)."""
    return replace(workload, pause_s=0.0)


@dataclass(frozen=True)
class KillPoint:
    """The outcome of one kill point."""

    mode: str
    seconds: float  # from the child's READY to the kill (or to its DONE if not killed)
    first_commit_s: float | None  # from READY to the first task commit (if not killed)
    phase: str
    committed_before_rerun: int
    duplicates: int
    missing: int
    wrong_values: int

    @property
    def ok(self) -> bool:
        return self.duplicates == self.missing == self.wrong_values == 0


def killpoint_df(spark: Any, workload: Workload, *,
                 fail_once: tuple[int, dict[str, Any], str, str] | None = None) -> Any:
    """The workload as a DataFrame: partition ``i`` of ``spark.range`` holds rows ``k<i>-*``.

    With ``pause_s`` each Arrow batch is delayed. With
    ``fail_once=(i, kafka_config, topic, folder)`` the first attempt of partition ``i``'s task
    in the write (its second evaluation: ``write_kafka``'s row-count pass is the first, noted
    by a file in ``folder``), five batches before its end, waits until records of partition
    ``i`` show up in ``topic`` (read_uncommitted: the writer is inside its transaction) and
    then raises - an upstream failure in the middle of the writer's transaction. (Should
    nothing show up, it goes on after 10 s, and the test finds no aborted records.)
    """
    from pyspark.sql import functions as F

    w = workload
    df = spark.range(0, w.partitions * w.rows, numPartitions=w.partitions)
    if w.pause_s or fail_once is not None:
        pause = w.pause_s
        failing, config, topic, folder = (fail_once if fail_once is not None
                                          else (-1, {}, "", ""))
        fail_at = max(0, w.rows // w.batch_rows - 5)
        # In fail-once mode a 1 KB pad column (dropped below) fills the Python workers' 64 KiB
        # output buffers each batch, so the writer gets rows while this task waits.
        pad = "p" * 1000 if fail_once is not None else ""

        def slow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            context = TaskContext.get()
            assert context is not None
            for n, batch in enumerate(batches):
                time.sleep(pause)
                if (n == fail_at and context.partitionId() == failing
                        and context.attemptNumber() == 0
                        and not _first_evaluation(folder, failing)
                        and _wait_for_key_prefix(config, topic, f"k{failing}-", 10.0)):
                    raise RuntimeError("injected failure of the first attempt")
                yield pa.RecordBatch.from_arrays(
                    [batch.column(0), pa.array([pad] * batch.num_rows, pa.string())],
                    names=["id", "pad"])

        df = df.mapInArrow(slow, "id long, pad string")
    index, row = (F.col("id") / w.rows).cast("long"), F.col("id") % w.rows
    return df.select(
        F.concat(F.lit("k"), index, F.lit("-"), row).cast("binary").alias("key"),
        F.concat(F.lit("v"), index, F.lit("-"), row).cast("binary").alias("value"),
    )


def _first_evaluation(folder: str, partition: int) -> bool:
    """Whether this is the first task to get here for ``partition`` (it leaves a file in
    ``folder`` that later ones find)."""
    try:
        os.close(os.open(os.path.join(folder, f"evaluated-{partition}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _wait_for_key_prefix(config: dict[str, Any], topic: str, prefix: str,
                         timeout: float) -> bool:
    """Whether a record whose key starts with ``prefix`` appears in ``topic`` (read_uncommitted)
    within ``timeout`` seconds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": "killpoint-failure", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and (msg.key() or b"").startswith(
                    prefix.encode()):
                return True
        return False
    finally:
        consumer.close()


def write_plain(kafka_config: dict[str, Any], topic: str, write_id: str,
                workload: Workload, *, prefix: str = PREFIX,
                lease_ttl_s: float = LEASE_TTL_S) -> Any:
    """The exactly-once write without Spark: the driver half, then each task in turn; returns
    its plan."""
    options = ExactlyOnce(prefix, write_id, ledger_topic=LEDGER,
                          transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, lease_ttl_s=lease_ttl_s)
    with ExactlyOnceWrite(kafka_config, topic, options) as write:
        plan = replace(write.prepare(admin_client(kafka_config), workload.partitions),
                       expected_rows=(workload.rows,) * workload.partitions)
        for index in range(workload.partitions):
            write_partition(plan, index, partition_batches(
                index, workload.rows, workload.batch_rows, workload.pause_s))
    return plan


def write_spark(spark: Any, kafka_config: dict[str, Any], topic: str, write_id: str,
                workload: Workload, *, fail_once_partition: int | None = None) -> Any:
    with tempfile.TemporaryDirectory(prefix="killpoint-evaluations-") as folder:
        fail_once = None if fail_once_partition is None else (fail_once_partition,
                                                               kafka_config, topic, folder)
        df = killpoint_df(spark, workload, fail_once=fail_once)
        return write_kafka(df, kafka_config, topic=topic, transactional_id_prefix=PREFIX,
                           write_id=write_id, ledger_topic=LEDGER,
                           transaction_timeout_ms=TRANSACTION_TIMEOUT_MS)


def child_command(bootstrap: str, topic: str, write_id: str, mode: str, workload: Workload,
                  *, master: str = "local[2]", fail_once_partition: int | None = None,
                  prefix: str = PREFIX, lease_ttl_s: float = LEASE_TTL_S) -> list[str]:
    command = [sys.executable, "-m", "tools.killpoint_harness", "child",
               "--bootstrap", bootstrap, "--topic", topic, "--write-id", write_id,
               "--mode", mode, "--master", master,
               "--workload", json.dumps(workload.__dict__), "--prefix", prefix,
               "--lease-ttl", str(lease_ttl_s)]
    if fail_once_partition is not None:
        command += ["--fail-once-partition", str(fail_once_partition)]
    return command


def start_child(command: list[str], *, ready_timeout: float = 120.0) -> subprocess.Popen[str]:
    """Start the child in its own process group; return once it printed ``READY``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + ready_timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TimeoutError(f"kill-point child did not get ready in {ready_timeout}s")
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"kill-point child exited early with code {proc.wait()}")
        if line.strip() == "READY":
            return proc


def committed_tasks(kafka_config: dict[str, Any], write_id: str, prefix: str = PREFIX) -> int:
    """Tasks of ``write_id`` the ledger shows committed (read_committed, up to the LSO)."""
    admin = admin_client(kafka_config)
    partition = ledger_partition(write_id, ensure_ledger_topic(admin, LEDGER))
    stable = ledger_end_offset(admin, LEDGER, partition, committed=True)
    return len(read_ledger(kafka_config, LEDGER, partition, transactional_id_prefix=prefix,
                           write_id=write_id, start_offset=ledger_start_offset(admin, LEDGER, partition),
                           until_offset=stable, timeout=60).entries)


def run_kill_point(
    kafka_config: dict[str, Any],
    topic: str,
    mode: str,
    moment: KillMoment | None,
    *,
    workload: Workload,
    rerun: Callable[[str], None],
) -> KillPoint:
    """Write to the empty ``topic`` in a child, SIGKILL it at ``moment`` (with ``None``: let
    it finish), ``rerun(write_id)`` here, then check the topic holds every expected row
    exactly once."""
    write_id = f"kill-{uuid.uuid4().hex}"
    proc = start_child(child_command(kafka_config["bootstrap.servers"], topic, write_id, mode,
                                     workload))
    start, ready_at = time.monotonic(), time.time()
    if moment is None:
        assert proc.stdout is not None
        for line in proc.stdout:  # until DONE: Spark's shutdown afterwards does not count
            if line.startswith("DONE"):
                break
        else:
            raise RuntimeError(f"kill-point child failed with code {proc.wait()}")
    else:
        if moment.after_first_commit:
            while proc.poll() is None and committed_tasks(kafka_config, write_id) == 0:
                time.sleep(0.05)
        time.sleep(moment.delay_s)
    seconds = time.monotonic() - start
    # Not killed: the write returned (DONE); the child's exit after it (a Spark driver stops
    # its JVM) is not waited for, the kill below ends it.
    finished = moment is None or proc.poll() is not None
    with contextlib.suppress(ProcessLookupError):  # the child had finished, nothing is left
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = committed_tasks(kafka_config, write_id)
    if finished:
        phase = "after the child returned"
    elif done == 0:
        phase = "before any commit"
    elif done < workload.partitions:
        phase = "between task commits"
    else:
        phase = "after the last commit"
    rerun(write_id)
    records = read_committed(kafka_config, topic)
    keys = Counter(r.key for r in records)
    expected = expected_keys(workload.partitions, workload.rows)
    wrong = sum(1 for r in records if r.key is None or r.value != _value_of(r.key))
    first_commit = None
    if moment is None:
        first_commit = round(min(_ledger_timestamps(kafka_config, write_id)) - ready_at, 3)
    return KillPoint(
        mode=mode, seconds=round(seconds, 3), first_commit_s=first_commit, phase=phase,
        committed_before_rerun=done,
        duplicates=sum((keys - expected).values()), missing=sum((expected - keys).values()),
        wrong_values=wrong,
    )


def _ledger_timestamps(kafka_config: dict[str, Any], write_id: str) -> list[float]:
    """The CreateTime (epoch seconds) of every committed ledger record of ``write_id``."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    admin = admin_client(kafka_config)
    partition = ledger_partition(write_id, ensure_ledger_topic(admin, LEDGER))
    stable = ledger_end_offset(admin, LEDGER, partition, committed=True)
    consumer = Consumer({**kafka_config, "group.id": "killpoint-ledger",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(LEDGER, partition,
                                    ledger_start_offset(admin, LEDGER, partition))])
    stamps: list[float] = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "ledger not readable"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() >= stable:
                    return stamps
                continue
            key = LedgerKey.decode(msg.key() or b"")
            if key is not None and (key.transactional_id_prefix, key.write_id) == (PREFIX,
                                                                                   write_id):
                stamps.append(msg.timestamp()[1] / 1000)
    finally:
        consumer.close()


@dataclass(frozen=True)
class KillMoment:
    """When to SIGKILL the child: ``delay_s`` after its ``READY`` line, or - with
    ``after_first_commit`` - after the ledger shows its first committed task."""

    delay_s: float
    after_first_commit: bool = False


def kill_moments(rng: Any, count: int, reference: KillPoint) -> list[KillMoment]:
    """``count`` random kill moments from the uninterrupted ``reference`` write's timing.

    Even ones fall in equal slices of ``[first commit / 2, done]`` after ``READY`` (some
    land before the first commit); odd ones a random time, up to the reference's commit span,
    after the first commit is seen (start-up times vary too much from run to run for a delay
    from ``READY`` alone to land reliably between commits).
    """
    assert reference.first_commit_s is not None
    low, high = reference.first_commit_s / 2, reference.seconds
    span = reference.seconds - reference.first_commit_s
    return [
        KillMoment(low + (k + rng.random()) * (high - low) / count) if k % 2 == 0
        else KillMoment(rng.random() * span, after_first_commit=True)
        for k in range(count)
    ]


def _value_of(key: bytes) -> bytes:
    index, row = key.decode()[1:].split("-")
    return row_value(int(index), int(row))


def _child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--write-id", "--mode", "--master", "--workload"):
        parser.add_argument(name, required=True)
    parser.add_argument("--fail-once-partition", type=int)
    parser.add_argument("--prefix", default=PREFIX)
    parser.add_argument("--lease-ttl", type=float, default=LEASE_TTL_S)
    args = parser.parse_args(argv)
    config = {"bootstrap.servers": args.bootstrap}
    workload = Workload(**json.loads(args.workload))
    if args.mode == "python":
        print("READY", flush=True)
        write_plain(config, args.topic, args.write_id, workload, prefix=args.prefix,
                    lease_ttl_s=args.lease_ttl)
        print("DONE", flush=True)
        return
    from airflow_provider_kafka_spark.spark import spark_session

    spark = spark_session(args.master, app_name="killpoint-child", conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(workload.batch_rows),
    })
    spark.range(1).collect()  # the JVM and a Python worker are up before READY
    print("READY", flush=True)
    result = write_spark(spark, config, args.topic, args.write_id, workload,
                         fail_once_partition=args.fail_once_partition)
    print("DONE " + json.dumps({"records_per_task": result.records_per_task,
                                "skipped_tasks": result.skipped_tasks}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["child"]:
        sys.exit("usage: python -m tools.killpoint_harness child --bootstrap ... "
                 "(the harness is run by tools/killpoints.py)")
    _child(sys.argv[2:])
