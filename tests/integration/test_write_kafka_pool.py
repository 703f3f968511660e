"""The pool of transactional ids (spark/write/pool.py) and the bounded ledger check, on a real
broker: an application's ids stay few whatever the number of writes, concurrent writes of one
application never share a slot, a killed write's slot is reused by another write (its open
transaction aborted, its rows never visible) and its re-run completes exactly once, and the
driver's ledger check reads only what was written since the write began.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer

from airflow_provider_kafka_spark.offsets.cluster import admin_client
from airflow_provider_kafka_spark.spark.write.ledger import (
    LedgerEntry,
    ledger_partition,
)
from airflow_provider_kafka_spark.spark.write.plan import ExactlyOnce, ExactlyOnceWrite
from airflow_provider_kafka_spark.spark.write.task import write_partition
from tools.killpoint_harness import (
    Workload,
    child_command,
    committed_tasks,
    start_child,
    write_plain,
)
from tools.transactions import transactional_ids
from tools.write_kafka_rows import expected_keys, read_committed

LEDGER = "_kafka_spark_ledger"


def _batches(tag: str, index: int, rows: int, pause_s: float = 0.0) -> list[pa.RecordBatch]:
    if pause_s:
        time.sleep(pause_s)
    return [pa.RecordBatch.from_pydict({
        "key": pa.array([f"{tag}/{index}/{r}".encode() for r in range(rows)], pa.binary()),
        "value": pa.array([b"v"] * rows, pa.binary()),
    })]


def _options(prefix: str, write_id: str, ledger: str = LEDGER, **kwargs: Any) -> ExactlyOnce:
    return ExactlyOnce(prefix, write_id, ledger_topic=ledger, transaction_timeout_ms=30000,
                       **kwargs)


def _write(kafka_config: dict[str, Any], topic: str, prefix: str, write_id: str,
           partitions: int, rows: int, *, pause_s: float = 0.0, ledger: str = LEDGER,
           held: list[float] | None = None, **kwargs: Any) -> Any:
    """One exactly-once write without Spark (the driver half, then each task); its plan.
    ``held`` gets the monotonic times between which the write held its pool slot (within)."""
    with ExactlyOnceWrite(kafka_config, topic, _options(prefix, write_id, ledger,
                                                        **kwargs)) as write:
        plan = replace(write.prepare(admin_client(kafka_config), partitions),
                       expected_rows=(rows,) * partitions)
        if held is not None:
            held.append(time.monotonic())
        try:
            for index in range(partitions):
                write_partition(plan, index, _batches(write_id, index, rows, pause_s))
        finally:
            if held is not None:
                held.append(time.monotonic())
    return plan


def test_many_writes_of_one_application_use_one_slot_of_transactional_ids(
        kafka_config: dict[str, Any], kafka_bootstrap: str, new_topic: Any) -> None:
    topic, prefix, partitions = new_topic(partitions=3), f"pool-{uuid.uuid4().hex[:8]}", 3
    plans = [_write(kafka_config, topic, prefix, f"w{n}", partitions, 10) for n in range(5)]

    assert {p.slot for p in plans} == {0}
    assert transactional_ids(kafka_bootstrap, prefix) == \
        sorted(f"{prefix}-p0-{i}" for i in range(partitions))
    keys = Counter(r.key for r in read_committed(kafka_config, topic))
    assert keys == Counter(f"w{n}/{i}/{r}".encode() for n in range(5) for i in range(partitions)
                           for r in range(10))


def test_interleaved_and_concurrent_writes_of_two_applications_land_every_key_once(
        kafka_config: dict[str, Any], kafka_bootstrap: str, new_topic: Any) -> None:
    """20 writes, 10 of each of two applications, 4 at a time: writes of one application that
    overlap in time hold different slots, none fails, every key is there exactly once, and each
    application used at most (writes at once) x partitions ids."""
    topic, partitions, rows = new_topic(partitions=3), 3, 20
    run = uuid.uuid4().hex[:8]
    apps = [f"{run}-a", f"{run}-b"]  # one listing of the ids prefixed run- finds both
    spans: list[tuple[str, int, float, float]] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        prefix, held = apps[n % 2], []
        plan = _write(kafka_config, topic, prefix, f"{prefix}/w{n}", partitions, rows,
                      pause_s=0.1, held=held)
        with lock:
            spans.append((prefix, plan.slot, held[0], held[1]))

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(20)))  # re-raises the first failure

    keys = Counter(r.key for r in read_committed(kafka_config, topic))
    assert keys == Counter(f"{apps[n % 2]}/w{n}/{i}/{r}".encode() for n in range(20)
                           for i in range(partitions) for r in range(rows))
    overlapping = [(a, b) for a in spans for b in spans
                   if a < b and a[0] == b[0] and a[2] < b[3] and b[2] < a[3]]
    assert overlapping, "no two writes of one application ran at the same time"
    assert all(a[1] != b[1] for a, b in overlapping), overlapping
    ids = set(transactional_ids(kafka_bootstrap, run))
    assert ids <= {f"{prefix}-p{s}-{i}" for prefix in apps for s in range(4)
                   for i in range(partitions)}, sorted(ids)
    assert {f"{prefix}-p0-{i}" for prefix in apps for i in range(partitions)} <= ids


def test_a_killed_writes_slot_is_reused_by_another_write_and_its_rerun_completes_once(
        kafka_config: dict[str, Any], kafka_bootstrap: str, new_topic: Any) -> None:
    """A write SIGKILLed between task commits keeps its slot until its lease expires; another
    write of the application then takes the slot, aborting the killed write's open transaction
    (its rows never become visible); the killed write's re-run uses its slot again and every
    row is there once."""
    killed_topic, other_topic = new_topic(partitions=3), new_topic(partitions=3)
    prefix, write_id = f"pool-kill-{uuid.uuid4().hex[:8]}", f"kill-{uuid.uuid4().hex}"
    workload = Workload(partitions=6, rows=400, batch_rows=50, pause_s=0.1)
    ttl = 4.0
    proc = start_child(child_command(kafka_bootstrap, killed_topic, write_id, "python", workload,
                                     prefix=prefix, lease_ttl_s=ttl))
    try:
        deadline = time.monotonic() + 120
        while committed_tasks(kafka_config, write_id, prefix) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "the child ended early"
            time.sleep(0.05)
        time.sleep(0.3)  # inside the next task's transaction
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = committed_tasks(kafka_config, write_id, prefix)
    assert 2 <= done < workload.partitions

    time.sleep(ttl + 1)  # the killed write's lease expires
    other = write_plain(kafka_config, other_topic, f"other-{uuid.uuid4().hex}", workload,
                        prefix=prefix)
    assert other.slot == 0  # the killed write's slot, reused
    assert Counter(r.key for r in read_committed(kafka_config, other_topic)) == \
        expected_keys(workload.partitions, workload.rows)
    # The killed write's open transaction was aborted: only its committed tasks are visible.
    visible = Counter(r.key for r in read_committed(kafka_config, killed_topic, timeout=10))
    assert visible == expected_keys(done, workload.rows)

    rerun = write_plain(kafka_config, killed_topic, write_id, workload, prefix=prefix)
    assert rerun.slot == 0 and rerun.committed == frozenset(range(done))
    assert Counter(r.key for r in read_committed(kafka_config, killed_topic)) == \
        expected_keys(workload.partitions, workload.rows)
    assert transactional_ids(kafka_bootstrap, prefix) == \
        sorted(f"{prefix}-p0-{i}" for i in range(workload.partitions))


def test_the_ledger_check_reads_only_what_was_written_since_the_write_began(
        kafka_config: dict[str, Any], new_topic: Any) -> None:
    """100,000 entries of other writes, two days old, in the write's ledger partition: with
    ``ledger_since`` the driver's check goes through a handful of records, without it through
    all of them; either way the write's own committed tasks are found."""
    ledger = new_topic(partitions=1, **{"cleanup.policy": "compact"})
    topic, prefix, write_id = new_topic(partitions=2), "bounded", f"w-{uuid.uuid4().hex}"
    assert ledger_partition(write_id, 1) == 0
    old = int((datetime.now(UTC) - timedelta(days=2)).timestamp() * 1000)
    producer = Producer({**kafka_config, "linger.ms": 50})
    for n in range(100_000):
        entry = LedgerEntry(prefix, f"old-{n}", 0, 1, 10, (topic,), "0" * 16)
        producer.produce(ledger, entry.value(), entry.key().encode(), 0, timestamp=old + n)
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    began = datetime.now(UTC)
    first = _write(kafka_config, topic, prefix, write_id, 2, 10, ledger=ledger,
                   ledger_since=began)
    assert first.ledger_records_read < 10

    with ExactlyOnceWrite(kafka_config, topic, _options(prefix, write_id, ledger,
                                                        ledger_since=began)) as write:
        bounded = write.prepare(admin_client(kafka_config), 2)
    with ExactlyOnceWrite(kafka_config, topic, _options(prefix, write_id, ledger)) as write:
        unbounded = write.prepare(admin_client(kafka_config), 2)
    assert bounded.committed == unbounded.committed == frozenset({0, 1})
    assert bounded.ledger_records_read <= 10
    assert unbounded.ledger_records_read >= 100_000
    assert Counter(r.key for r in read_committed(kafka_config, topic)) == \
        Counter(f"{write_id}/{i}/{r}".encode() for i in range(2) for r in range(10))
