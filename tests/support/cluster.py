"""Helpers of the cluster tests (``tests/cluster``): transactional input with a known committed
record set, and running ``cluster_jobs.py`` on the cluster (to completion, or in the background
under a gate)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from airflow_provider_kafka_spark.offsets import OffsetRanges, Subscription, resolve_offsets
from tools.kafka_records import produce, transactional_producer, wait_for_markers
from tools.processes import end_group, free_port
from tools.spark_cluster import Cluster

JOBS = Path(__file__).resolve().parent / "cluster_jobs.py"
CONNECT_MODE_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")
"""What creating a Spark Connect session sets in this process (every later ``SparkSession``
builder and ``pyspark.sql.functions`` call then goes to Connect)."""
Record = tuple[int, int, str | None, str]
"""(partition, offset, key, value) of a record read back."""


@contextmanager
def restored_env(*keys: str) -> Iterator[None]:
    """Put the environment variables ``keys`` back as they were (set or unset) on exit."""
    saved = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def transactional_input(kafka_config: dict[str, Any], kafka_admin: Any, topic: str,
                        partitions: int) -> set[tuple[int, str, str]]:
    """Per partition: a committed transaction of 100 records, an aborted one of 50, a committed
    one of 100, then 20 plain (non-transactional) records. Returns the (partition, key, value)
    a read_committed read must give: 220 per partition, keys unique."""
    producer = transactional_producer(kafka_config)
    expected: set[tuple[int, str, str]] = set()
    for txn, (count, commit) in enumerate(((100, True), (50, False), (100, True))):
        producer.begin_transaction()
        for p in range(partitions):
            for i in range(count):
                key, value = f"p{p}-t{txn}-{i}", f"v-p{p}-t{txn}-{i}"
                producer.produce(topic, key=key.encode(), value=value.encode(), partition=p)
                if commit:
                    expected.add((p, key, value))
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    plain = [(p, f"p{p}-plain-{i}".encode(), f"v-p{p}-plain-{i}".encode(), 0)
             for p in range(partitions) for i in range(20)]
    produce(kafka_config, topic, [(p, k, v, int(time.time() * 1000)) for p, k, v, _ in plain])
    expected |= {(p, k.decode(), v.decode()) for p, k, v, _ in plain}
    wait_for_markers(kafka_admin, topic, partitions)
    return expected


def all_ranges(kafka_config: dict[str, Any], topic: str) -> OffsetRanges:
    return resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")


def job_conf(jars: Sequence[Path] = ()) -> dict[str, str]:
    """Settings of a submitted test job: its own UI port (for the REST report), extra jars,
    and small Arrow batches and stream buffers between the JVM and Python workers (default
    64 KiB, flushed when full), so the rows a gate passed on reach the next step (the sink)
    while it waits."""
    conf = {"spark.ui.port": str(free_port()),
            "spark.sql.execution.arrow.maxRecordsPerBatch": "10",
            "spark.buffer.size": "1024"}
    if jars:
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    return conf


def run_job(cluster: Cluster, job: str, spec: dict[str, Any], folder: Path,
            jars: Sequence[Path] = (), timeout: float = 240.0,
            conf: Mapping[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``cluster_jobs.py <job>`` with ``spark-submit`` on the cluster to completion; its
    result. ``conf``: more settings (over :func:`job_conf`'s and the cluster's); ``cwd``: the
    driver's working folder (default: this process's)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec_file, result_file = folder / f"{job}.spec.json", folder / f"{job}.result.json"
    spec_file.write_text(json.dumps(spec))
    result_file.unlink(missing_ok=True)
    log = folder / f"{job}.log"
    done = cluster.submit(JOBS, job, str(spec_file), str(result_file),
                          conf={**job_conf(jars), **(conf or {})}, log=log, timeout=timeout,
                          cwd=cwd)
    # the driver's Python traceback is on stdout (spark-submit merges its streams there)
    out = done.stdout[max(done.stdout.find("Traceback"), 0):][-6000:]
    assert done.returncode == 0, f"{job} failed ({done.returncode}):\n{_tail(log)}\n{out}"
    return dict(json.loads(result_file.read_text()))


class Running:
    """A job submitted in the background (see :func:`running_job`)."""

    def __init__(self, proc: subprocess.Popen[bytes], folder: Path, job: str) -> None:
        self.proc, self.folder, self.job = proc, folder, job
        self.log = folder / f"{job}.log"
        self.result_file = folder / f"{job}.result.json"

    def result(self, timeout: float = 240.0) -> dict[str, Any]:
        self.proc.wait(timeout)
        assert self.proc.returncode == 0, f"{self.job} failed:\n{_tail(self.log)}"
        return dict(json.loads(self.result_file.read_text()))


@contextmanager
def running_job(cluster: Cluster, job: str, spec: dict[str, Any],
                folder: Path) -> Iterator[Running]:
    """``cluster_jobs.py <job>`` submitted in the background, in its own process group, ended on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    spec_file = folder / f"{job}.spec.json"
    spec_file.write_text(json.dumps(spec))
    with open(folder / f"{job}.log", "wb") as log:
        proc = subprocess.Popen(
            cluster.submit_command(JOBS, job, str(spec_file), str(folder / f"{job}.result.json"),
                                   conf=job_conf()),
            env=cluster.env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    try:
        yield Running(proc, folder, job)
    finally:
        end_group(proc.pid, grace=5.0)


def wait_for(predicate: Any, what: str, timeout: float = 120.0, job: Running | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` (and the job's
    log tail) after ``timeout`` seconds or once the job exited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if job is not None and job.proc.poll() is not None:
            raise AssertionError(f"{job.job} exited ({job.proc.returncode}) before {what}:\n"
                                 f"{_tail(job.log)}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def executor_of(cluster: Cluster, python_pid: int, app_id: str) -> tuple[str, int]:
    """(worker name, executor JVM pid) whose process tree holds the Python worker ``python_pid``."""
    executors = {pid: worker for worker, pids in cluster.executor_pids(app_id).items()
                 for pid in pids}
    ancestors = {p.pid for p in psutil.Process(python_pid).parents()}
    (pid,) = ancestors & executors.keys()
    return executors[pid], pid


def processes_of(run_dir: Path) -> list[int]:
    """Live processes whose command line names ``run_dir`` (the cluster's JVMs: their
    classpath starts with ``run_dir/conf``), to check that nothing is left; never to kill."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(str(run_dir) in a for a in cmdline):
            found.append(proc.info["pid"])
    return sorted(found)


def _tail(log: Path, lines: int = 40) -> str:
    text = log.read_text(errors="replace") if log.exists() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])
