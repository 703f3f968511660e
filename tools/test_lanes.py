"""The whole test suite in two lanes at once (what ``make test`` runs after ``make setup``).

    .venv/bin/python tools/test_lanes.py

Run as one, the suite waits much of its time on brokers, JVM starts and Airflow's scheduler
(about 0.6 of a CPU on average); two lanes of about equal length keep both cores of the 2-core
CI machine busy (measured: 1.9-2.0 cores for the whole run), so less CPU is what shortens it:

``main``
    ``.venv/bin/pytest --ignore=tests/deployed``: everything but the deployed Airflow (the
    wheel in a clean venv, ~2 min, too); its output streams here as it comes (about 37 min on
    the 2-core CI machine with both lanes running).
``second``
    ``.venv/bin/pytest tests/deployed`` (a real Airflow under ``.venv``, ~25 min), then
    ``make tables-setup`` (``.venv-tables``; ``make test`` installed it beside ``.venv``
    already, then this does nothing) and
    ``.venv-tables/bin/pytest tests/tables`` (Iceberg, Delta, PostgreSQL, and their own Airflow
    under ``.venv-tables``); its output goes to ``.cache/test-lanes/second.log``, printed here
    when the lane ends.

Each lane is a process group of its own with its own broker, Spark session and temporary
folders; the jars both lanes use are fetched once before they start (no two Maven runs into
one folder). Every step runs even when an earlier one failed; the exit code is 0 only when all
passed. Ctrl-C or SIGTERM sends SIGINT to both lanes (pytest then runs its fixtures'
teardown, which stops every broker, Spark and Airflow process by pid), then SIGKILL after
:data:`STOP_GRACE_S`. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
TABLES_BIN = ROOT / ".venv-tables" / "bin"
LOGS = ROOT / ".cache" / "test-lanes"
STOP_GRACE_S = 120.0


def _q(args: Sequence[str]) -> str:
    return shlex.join(str(a) for a in args)


def lane_script(steps: Sequence[Sequence[str]]) -> str:
    """A bash script that runs ``steps`` in order, each whatever the ones before did, and
    exits non-zero when any failed. Interrupted (SIGINT/SIGTERM), it ends when the step that
    runs has ended (pytest has torn its fixtures down) and starts no other."""
    lines = ["trap 'exit 130' INT TERM", "status=0"]
    for step in steps:
        lines.append(f"echo {shlex.quote('>>> ' + _q(step))}")
        lines.append(f"{_q(step)} || status=$?")
    lines.append("exit $status")
    return "\n".join(lines)


MAIN_STEPS: list[list[str]] = [[str(VENV_BIN / "pytest"), "--ignore=tests/deployed"]]
SECOND_STEPS: list[list[str]] = [
    [str(VENV_BIN / "pytest"), "tests/deployed"],
    [os.environ.get("MAKE", "make"), "--no-print-directory", "tables-setup"],
    [str(TABLES_BIN / "pytest"), "tests/tables"],
]


def prefetch() -> None:
    """The jars more than one lane needs, fetched once before the lanes start (this runs
    under ``.venv``'s python, which has the package)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from airflow_provider_kafka_spark.spark import fetch_spark_kafka_jars
    from tools.kafka_broker import ensure_jars

    ensure_jars()
    fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                           ROOT / ".cache" / "spark-kafka" / "jars")


def start(steps: Sequence[Sequence[str]], log: Path | None) -> subprocess.Popen[bytes]:
    """A lane in a process group of its own, its output to ``log`` (else to ours)."""
    command = ["bash", "-c", lane_script(steps)]
    if log is None:
        return subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    with open(log, "wb") as out:  # the child has its own copy of the file
        return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def stop(lanes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGINT to every running lane's process group, SIGKILL to what is left after the grace."""
    running = [lane for lane in lanes if lane.poll() is None]
    for lane in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(lane.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for lane in running:
        try:
            lane.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(lane.pid, signal.SIGKILL)
            lane.wait()


class _Interrupted(Exception):
    """SIGINT or SIGTERM arrived."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    # Only raise: the waits it interrupts release their locks as it unwinds them, and the
    # lanes are stopped outside the handler (a Popen.wait inside it would wait for the lock the
    # interrupted wait holds).
    raise _Interrupted(signum)


def main() -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    prefetch()
    second_log = LOGS / "second.log"
    lanes: list[subprocess.Popen[bytes]] = []
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        print(f"lane second: {' ; '.join(_q(s) for s in SECOND_STEPS)} > {second_log}",
              flush=True)
        lanes.append(start(SECOND_STEPS, second_log))
        lanes.append(start(MAIN_STEPS, None))
        second, main_lane = lanes
        main_status = main_lane.wait()
        main_minutes = (time.monotonic() - began) / 60
        second_status = second.wait()
    except _Interrupted as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"\n{exc}: stopping the test lanes", flush=True)
        stop(lanes)
        return 128 + exc.signum
    print(f"\n===== lane second ({second_log}) =====", flush=True)
    sys.stdout.write(second_log.read_text(errors="replace"))
    print(f"\n===== lanes: main {'passed' if main_status == 0 else 'FAILED'} "
          f"({main_minutes:.1f} min), second {'passed' if second_status == 0 else 'FAILED'}; "
          f"{(time.monotonic() - began) / 60:.1f} min in all =====", flush=True)
    return 1 if main_status or second_status else 0


if __name__ == "__main__":
    sys.exit(main())
