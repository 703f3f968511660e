"""A Kafka broker for a test run, benchmark or tool: the given one, or a fresh local one."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BROKER_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "kafka-broker"


@contextmanager
def local_broker(bootstrap: str | None = None, *, run_dir: Path | None = None) -> Iterator[str]:
    """Yield ``bootstrap.servers``: ``bootstrap`` itself when given (an external broker, left
    alone), else a new broker started by ``scripts/kafka-broker`` on a free loopback port in
    ``run_dir`` (default: a temporary folder) and stopped on exit."""
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="kafka-broker-") as scratch:
        folder = str(run_dir or scratch)
        out = subprocess.run(
            [sys.executable, str(BROKER_SCRIPT), "start", "--dir", folder,
             "--port", str(free_port())],
            check=True, capture_output=True, text=True,
        ).stdout
        try:
            yield out.strip().split("=", 1)[1]
        finally:
            subprocess.run([sys.executable, str(BROKER_SCRIPT), "stop", "--dir", folder],
                           check=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
