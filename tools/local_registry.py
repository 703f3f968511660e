"""A local Schema Registry (tools/schema_registry_server.py) for the tests, the demo and
``scripts/schema-registry``: started by pid in a run folder, stopped by pid."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tools.processes import free_port, launch, read_pid, stop_service

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".cache" / "schema-registry"
SERVER = ROOT / "tools" / "schema_registry_server.py"
NAME = "schema-registry"
READY_TIMEOUT_S = 30.0


def start(run_dir: Path, *, port: int = 0, user: str | None = None) -> str:
    """Start the registry on ``port`` (0: a free one) unless it runs from ``run_dir``; its URL
    once it answers."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    url_file = run_dir / "url"
    if read_pid(run_dir, NAME) is not None and url_file.exists():
        return url_file.read_text().strip()
    port = port or free_port()
    command = [sys.executable, str(SERVER), "--port", str(port)]
    if user:
        command += ["--user", user]
    pid = launch(run_dir, NAME, command, os.environ)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"{url}/schemas/types", timeout=2) as answer:
                json.load(answer)
            break
        except urllib.error.HTTPError:
            break  # it answers (401 with basic auth on)
        except OSError:
            if read_pid(run_dir, NAME) != pid or time.monotonic() > deadline:
                stop(run_dir)
                log = (run_dir / f"{NAME}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the schema registry did not start on {url}:\n{log}") \
                    from None
            time.sleep(0.1)
    url_file.write_text(url)
    return url


def stop(run_dir: Path) -> None:
    """Stop the registry started from ``run_dir`` (by pid), if it runs."""
    stop_service(Path(run_dir), NAME, grace=5)
    (Path(run_dir) / "url").unlink(missing_ok=True)


@contextmanager
def local_registry(run_dir: Path, *, user: str | None = None) -> Iterator[str]:
    """Yield the URL of a registry started in ``run_dir``; stopped on exit, also on failure."""
    url = start(run_dir, user=user)
    try:
        yield url
    finally:
        stop(run_dir)
