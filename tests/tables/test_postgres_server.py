"""scripts/postgres (tools/postgres_server.py): start, status, a restart on the same cluster, and a
stop by pid that leaves no server process behind (as root too: then it runs as another user)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.postgres_server import bindir
from tools.processes import alive, descendants

pytestmark = pytest.mark.tables

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres"


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def _query(connection: dict, sql: str) -> str:
    done = subprocess.run([str(bindir() / "psql"), "-h", connection["host"], "-p",
                           str(connection["port"]), "-U", connection["user"], "-d",
                           connection["database"], "-tAc", sql],
                          capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip()


def test_start_status_restart_stop(tmp_path: Path) -> None:
    run_dir = tmp_path / "pg"
    started = _script("start", str(run_dir), "--database", "probe")
    assert started.returncode == 0, started.stderr
    connection = json.loads(started.stdout)
    try:
        assert connection["jdbc_url"] == \
            f"jdbc:postgresql://127.0.0.1:{connection['port']}/probe"
        _query(connection, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
        status = _script("status", str(run_dir))
        assert status.returncode == 0 and json.loads(status.stdout) == connection
        assert _script("start", str(run_dir)).stdout == started.stdout  # already running
        server = [connection["pid"], *descendants(connection["pid"])]

        assert _script("stop", str(run_dir)).returncode == 0
        assert not any(alive(pid) for pid in server)
        assert _script("status", str(run_dir)).returncode == 3

        again = json.loads(_script("start", str(run_dir), "--database", "probe").stdout)
        assert again["pid"] != connection["pid"]
        assert _query(again, "SELECT v FROM kept") == "7"  # the same cluster
    finally:
        _script("stop", str(run_dir), "--discard")
    assert not (run_dir / "data").exists()
    assert not (run_dir / "postgres.pid").exists()
