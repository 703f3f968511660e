"""The whole test suite in two lanes at once (what ``make test`` runs after ``make setup``).

    .venv/bin/python tools/test_lanes.py

Run as one, the suite waits much of its time on brokers, JVM starts, Airflow's scheduler and
the timeouts its failure tests wait out. The suite is cut into :data:`JOBS`, each one pytest
run (its own session: broker, Spark session, temporary folders) or a few steps in a row; the
lanes take them from one queue, in the order that ends both lanes soonest by the jobs' measured
lengths (:func:`queue`), and a lane that is free takes the next job, so a job that runs longer
on the day delays only its own lane's rest. Every job's output goes to
``.cache/test-lanes/<job>.log``, printed here when the job ends; a line says when each job
starts and how it ended.

Why two lanes on the 2-core CI machine (measured with each job in a cgroup of its own,
2026-11-29): the jobs keep 0.6-1.1 of a core busy each (``main`` and ``kills`` less: they
wait out timeouts and kills), and two lanes kept the machine 86% busy (71 CPU minutes in 41.7
minutes). Three lanes kept it 97% busy and took longer: each job needed 20-40% more CPU
for the same tests (load 9-12 on 2 cores), and the jobs ran 1.5-1.6 times as long.

Every job runs even when an earlier one failed; the exit code is 0 only when all passed. The
jars more than one job needs are fetched once before the lanes start (no two Maven runs into
one folder). Ctrl-C or SIGTERM sends SIGINT to every running job's process group (pytest then
runs its fixtures' teardown, which stops every broker, Spark and Airflow process by pid),
SIGKILL after :data:`STOP_GRACE_S`, then prints the end of each interrupted job's log.
Standard library only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
TABLES_BIN = ROOT / ".venv-tables" / "bin"
LOGS = ROOT / ".cache" / "test-lanes"
STOP_GRACE_S = 120.0
LANES = 2
TAIL_LINES = 150


@dataclass(frozen=True)
class Job:
    """Steps that run one after the other in one lane.

    :param name: names its log, ``.cache/test-lanes/<name>.log``.
    :param steps: the commands; each runs whatever the ones before did.
    :param minutes: about how long it takes on the quiet 2-core CI machine beside other jobs
        (it only orders the queue); measured in two lanes, the clean-clone run of
        2026-11-29 at 495fb32.
    """

    name: str
    steps: tuple[tuple[str, ...], ...]
    minutes: float


def _pytest(bin_dir: Path, *args: str) -> tuple[str, ...]:
    return (str(bin_dir / "pytest"), *args)


TABLES_SETUP = (os.environ.get("MAKE", "make"), "--no-print-directory", "tables-setup")
# The tables tier's tests that run its own Airflow (scheduler, backfills): a job of their own.
TABLES_AIRFLOW = ("tests/tables/test_backfill_into_tables.py", "tests/tables/test_iceberg_dag.py")
# The tables tier's kill points (child drivers SIGKILLed at the table commit): a job of their
# own, so that the lanes end close together.
TABLES_KILL = ("tests/tables/test_table_killpoints.py",)
# Tiers of .venv's suite that start clusters of their own (a standalone Spark and Connect, a
# 3-broker cluster, secured brokers, a broker behind the fault proxy: tests/faults/network) or
# clean venvs (the wheel): a job beside the rest.
CLUSTERS = ("tests/cluster", "tests/faults", "tests/secured", "tests/wheel")
# .venv's tests that kill drivers, tasks and servers or wait out timeouts (about half of the
# rest's time, a third of its CPU): a job of their own, beside the rest.
KILLS_AND_TIMEOUTS = ("tests/integration/test_s3_faults.py",
                      "tests/integration/test_s3_answers.py",
                      "tests/integration/test_write_kafka_killpoints.py",
                      "tests/integration/test_unreachable_cluster.py",
                      "tests/integration/test_write_kafka_inputs.py",
                      "tests/integration/test_write_kafka_pool.py",
                      "tests/integration/test_model_exactness.py")

JOBS: tuple[Job, ...] = (
    # Everything of .venv but the deployed Airflow, the cluster tiers, the kills and timeouts:
    # new test folders land here by themselves. The minutes: each job in the clean-clone run
    # at a1ed799 (2026-12-04; the whole run 55 minutes).
    Job("main", (_pytest(VENV_BIN, "--ignore=tests/deployed",
                         *(f"--ignore={d}" for d in (*CLUSTERS, *KILLS_AND_TIMEOUTS))),), 14.5),
    # 14.8 in the clean-clone run at ae62dfd, with test_s3_answers.py (2026-12-04).
    Job("kills", (_pytest(VENV_BIN, *KILLS_AND_TIMEOUTS),), 14.8),
    Job("deployed", (_pytest(VENV_BIN, "tests/deployed"),), 15.2),
    Job("clusters", (_pytest(VENV_BIN, *CLUSTERS),), 19.4),
    Job("tables", (TABLES_SETUP, _pytest(TABLES_BIN, "tests/tables", *(
        f"--ignore={f}" for f in (*TABLES_AIRFLOW, *TABLES_KILL)))), 11.4),
    Job("tables-kill", (TABLES_SETUP, _pytest(TABLES_BIN, *TABLES_KILL)), 6.3),
    Job("tables-airflow", (TABLES_SETUP, _pytest(TABLES_BIN, *TABLES_AIRFLOW)), 7.8),
)

def _q(args: Sequence[str]) -> str:
    return shlex.join(str(a) for a in args)


def job_script(steps: Sequence[Sequence[str]]) -> str:
    """A bash script that runs ``steps`` in order, each whatever the ones before did, and
    exits non-zero when any failed. Interrupted (SIGINT/SIGTERM), it ends when the step that
    runs has ended (pytest has torn its fixtures down) and starts no other."""
    lines = ["trap 'exit 130' INT TERM", "status=0"]
    for step in steps:
        lines.append(f"echo {shlex.quote('>>> ' + _q(step))}")
        lines.append(f"{_q(step)} || status=$?")
    lines.append("exit $status")
    return "\n".join(lines)


def lanes_end(order: Sequence[Job], lanes: int = LANES) -> float:
    """When the last lane ends, by the jobs' minutes, when free lanes take ``order`` in turn."""
    ends = [0.0] * lanes
    for job in order:
        ends[ends.index(min(ends))] += job.minutes
    return max(ends)


def queue(jobs: Sequence[Job], lanes: int = LANES) -> list[Job]:
    """The order the lanes take ``jobs`` in: of all orders, the first that ends the lanes
    soonest by :func:`lanes_end`, counting from the longest job first (so that order wins a tie).

    The longest first alone can leave one lane long at the end (the run at 495fb32: its jobs'
    minutes end the lanes at 41.5 and 46.0 that way, at 44.0 and 43.5 in the best order). Every
    order is tried: 5,040 for the suite's 7 jobs."""
    longest_first = sorted(jobs, key=lambda job: -job.minutes)
    return list(min(itertools.permutations(longest_first),
                    key=lambda order: lanes_end(order, lanes)))


def prefetch() -> None:
    """The jars more than one job needs, fetched once before the lanes start (this runs
    under ``.venv``'s python, which has the package)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from airflow_provider_kafka_spark.spark import fetch_spark_kafka_jars
    from tools.kafka_broker import ensure_jars

    ensure_jars()
    fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                           ROOT / ".cache" / "spark-kafka" / "jars")


@dataclass
class _Running:
    job: Job
    process: subprocess.Popen[bytes]
    began: float

    @property
    def log(self) -> Path:
        return LOGS / f"{self.job.name}.log"


def start(job: Job) -> _Running:
    """``job`` in a process group of its own, its output to its log."""
    log = LOGS / f"{job.name}.log"
    with open(log, "wb") as out:  # the child has its own copy of the file
        process = subprocess.Popen(["bash", "-c", job_script(job.steps)], cwd=ROOT,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    print(f"===== {job.name} started: {' ; '.join(_q(s) for s in job.steps)} > {log}",
          flush=True)
    return _Running(job, process, time.monotonic())


def stop(running: Sequence[_Running]) -> None:
    """SIGINT to every running job's process group, SIGKILL to what is left after the grace."""
    alive = [r for r in running if r.process.poll() is None]
    for r in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(r.process.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for r in alive:
        try:
            r.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(r.process.pid, signal.SIGKILL)
            r.process.wait()


class _Interrupted(Exception):
    """SIGINT or SIGTERM arrived."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    # Only raise: the waits it interrupts release their locks as it unwinds them, and the
    # jobs are stopped outside the handler (a Popen.wait inside it would wait for the lock the
    # interrupted wait holds).
    raise _Interrupted(signum)


def _ended(r: _Running, status: int) -> str:
    minutes = (time.monotonic() - r.began) / 60
    print(f"\n===== {r.job.name} ({r.log}) =====", flush=True)
    sys.stdout.write(r.log.read_text(errors="replace"))
    line = f"{r.job.name} {'passed' if status == 0 else 'FAILED'} in {minutes:.1f} min"
    print(f"===== {line} =====", flush=True)
    return line


def run(jobs: Sequence[Job], lanes: int = LANES) -> int:
    """Run ``jobs`` in ``lanes`` lanes from one queue; 0 when every job passed."""
    LOGS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    waiting = queue(jobs)
    running: list[_Running] = []
    results: list[tuple[str, int]] = []
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        while waiting or running:
            while waiting and len(running) < lanes:
                running.append(start(waiting.pop(0)))
            time.sleep(1.0)
            for r in [r for r in running if r.process.poll() is not None]:
                running.remove(r)
                results.append((_ended(r, r.process.returncode), r.process.returncode))
    except _Interrupted as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"\n{exc}: stopping the test lanes", flush=True)
        stop(running)
        for r in running:
            lines = r.log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
            print(f"\n===== {r.job.name}, interrupted: the last {len(lines)} lines of {r.log} "
                  "=====", flush=True)
            print("\n".join(lines), flush=True)
        return 128 + exc.signum
    print(f"\n===== {'; '.join(line for line, _ in results)}; "
          f"{(time.monotonic() - began) / 60:.1f} min in all =====", flush=True)
    return 1 if any(status for _, status in results) else 0


def main() -> int:
    prefetch()
    return run(JOBS)


if __name__ == "__main__":
    sys.exit(main())
