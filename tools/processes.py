"""Background services by pid: one implementation for the local launchers
(``tools/spark_cluster.py``, ``tools/airflow_stack.py``) and the tests that start processes.

A service named ``name`` runs from a run folder ``DIR`` in its own process group, its pid in
``DIR/<name>.pid`` and its output in ``DIR/<name>.log``. Stopping it ends its process group and
every descendant noted before (Airflow's task processes and Spark's executors put themselves in
groups of their own). Nothing is ever found or killed by name. Standard library only (Linux
``/proc``).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

STOP_GRACE_S = 15.0


LOWEST_PORT = 10000
"""The lowest port :func:`free_port` picks (above the well-known and common service ports)."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free right now, for a server started next.

    Picked at random **outside the kernel's ephemeral range**: a port the kernel hands out for
    ``bind(0)`` comes from that range, from which every other process's ``bind(0)`` (a Spark
    UI on port 0, a test's listener) and outgoing connection draws too, so such a port could be
    taken by another process before the server binds it. Below the range only a server given
    that port number binds it.
    """
    low, high = _ephemeral_range()
    spans = [(LOWEST_PORT, low - 1), (high + 1, 65535)]
    spans = [(a, b) for a, b in spans if b - a >= 1000] or [(LOWEST_PORT, 65535)]
    for _ in range(200):
        first, last = random.choice(spans)
        port = random.randint(first, last)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port on {host} in {spans} after 200 tries")


def launch(run_dir: Path, name: str, command: Sequence[str], env: Mapping[str, str]) -> int:
    """Start ``command`` in a new process group with ``run_dir`` as its working folder, output
    appended to ``DIR/<name>.log``, pid written to ``DIR/<name>.pid``; its pid."""
    with open(run_dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(list(command), env=dict(env), cwd=run_dir, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    (run_dir / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def read_pid(run_dir: Path, name: str) -> int | None:
    """The pid in ``DIR/<name>.pid`` if that process still runs."""
    pid_file = run_dir / f"{name}.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text().strip())
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    """False once ``pid`` is gone (or a zombie); reaps it when it is this process's child."""
    with suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def end_group(pid: int, grace: float = STOP_GRACE_S) -> None:
    """End the process group led by ``pid``: SIGTERM, up to ``grace`` seconds, then SIGKILL to
    the group and to every descendant noted before; returns once they are gone (10 s at most)."""
    family = descendants(pid)
    if grace > 0:
        with suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    for target in (pid, *family):
        for kill in (os.killpg, os.kill):
            with suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in (pid, *family)) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_service(run_dir: Path, name: str, grace: float = STOP_GRACE_S) -> None:
    """End the service ``name`` started from ``run_dir`` (if it runs) and forget its pid."""
    pid = read_pid(run_dir, name)
    if pid is not None:
        end_group(pid, grace)
    (run_dir / f"{name}.pid").unlink(missing_ok=True)
