"""A TCP fault proxy for the tests (Toxiproxy, Shopify's, MIT): between the package and a
server it talks to (a Kafka broker, the S3 server, the Schema Registry, PostgreSQL), adding
latency, cutting connections (reset mid-stream, after N bytes), holding them without an
answer, or refusing them for a while.

    python3 tools/fault_proxy.py build    # build toxiproxy-server into .cache/toxiproxy/bin

``make test`` builds it beside the S3 server; :func:`server_binary` builds it on first use
otherwise (``go install ...@VERSION`` with the machine's Go, about 10 CPU seconds).
:func:`local_toxiproxy` starts one server in a run folder (pid in ``DIR/toxiproxy.pid``, log
in ``DIR/toxiproxy.log``, its HTTP API on a free loopback port) and stops it by pid on exit;
:meth:`Toxiproxy.proxy` opens a proxy (a listening port of its own, forwarding to one
upstream ``host:port``), on which a test adds and removes faults (:class:`Proxy`).

Toxiproxy works on TCP, not on HTTP: it can reset, hold, slow or refuse an S3 request, but
cannot make the server answer ``503 SlowDown`` (the causes' unit tests feed those texts).

Standard library only (it runs with the system python3 and under every venv).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: tools.* from the project's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.go_install import go_installed  # noqa: E402
from tools.processes import alive, free_port, launch, stop_service  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAME = "toxiproxy"
VERSION = "v2.12.0"
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
BIN_DIR = ROOT / ".cache" / "toxiproxy" / "bin"
BINARY = "toxiproxy-server"
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


class FaultProxyError(RuntimeError):
    """Toxiproxy could not be built, started or told what to do."""


def server_binary() -> Path:
    """``toxiproxy-server`` of :data:`VERSION`, built with ``go install`` into :data:`BIN_DIR`
    the first time (then a check of a stamp file). Safe from several processes at once: one
    builds, the others wait for it."""
    return go_installed(MODULE, VERSION, BIN_DIR, BINARY, go_needed="1.22",
                        error=FaultProxyError)


def _call(url: str, method: str = "GET", body: Any = None) -> Any:
    """One call of the HTTP API; its JSON answer (None when empty)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
    except urllib.error.HTTPError as exc:
        raise FaultProxyError(f"{method} {url}: {exc.code} {exc.read().decode(errors='replace')}"
                              ) from None
    return json.loads(text) if text.strip() else None


@dataclass(frozen=True)
class Proxy:
    """One proxy: clients connect to :attr:`address`, the proxy forwards to :attr:`upstream`.

    ``downstream`` faults act on what the server sends, ``upstream`` ones on what the client
    sends. Every fault applies to the connections open now and to new ones, until removed.
    """

    api: str
    name: str
    address: str  # "127.0.0.1:PORT", where clients connect
    upstream: str  # "127.0.0.1:PORT", the server

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def add(self, kind: str, *, stream: str = "downstream", name: str | None = None,
            toxicity: float = 1.0, **attributes: int) -> str:
        """Add a fault (a toxic of type ``kind``: ``latency`` (latency, jitter: ms),
        ``bandwidth`` (rate: KB/s), ``timeout`` (timeout: ms, 0 = hold forever: data is
        dropped, the connection stays open), ``reset_peer`` (timeout: ms before a TCP reset),
        ``limit_data`` (bytes: the connection is closed after that many), ``slicer``,
        ``slow_close``); its name."""
        name = name or f"{kind}_{stream}"
        _call(f"{self.api}/proxies/{self.name}/toxics", "POST",
              {"name": name, "type": kind, "stream": stream, "toxicity": toxicity,
               "attributes": attributes})
        return name

    def remove(self, name: str) -> None:
        _call(f"{self.api}/proxies/{self.name}/toxics/{name}", "DELETE")

    def clear(self) -> None:
        """Remove every fault and let connections in again."""
        for toxic in _call(f"{self.api}/proxies/{self.name}/toxics") or ():
            self.remove(toxic["name"])
        self.enable()

    @contextmanager
    def fault(self, kind: str, **options: Any) -> Iterator[str]:
        """:meth:`add` for the ``with`` block; removed after it, also on failure."""
        name = self.add(kind, **options)
        try:
            yield name
        finally:
            self.remove(name)

    def disable(self) -> None:
        """Close every connection and refuse new ones (the port no longer listens)."""
        _call(f"{self.api}/proxies/{self.name}", "POST", {"enabled": False})

    def enable(self) -> None:
        _call(f"{self.api}/proxies/{self.name}", "POST", {"enabled": True})

    @contextmanager
    def refused(self) -> Iterator[None]:
        """:meth:`disable` for the ``with`` block, :meth:`enable` after it."""
        self.disable()
        try:
            yield
        finally:
            self.enable()


@dataclass(frozen=True)
class Toxiproxy:
    """A running server's HTTP API."""

    api: str  # "http://127.0.0.1:PORT"
    pid: int

    def proxy(self, name: str, upstream: str, *, port: int = 0) -> Proxy:
        """A new proxy named ``name`` on ``127.0.0.1:port`` (0: a free port), forwarding to
        ``upstream`` (``host:port``)."""
        address = f"127.0.0.1:{port or free_port()}"
        _call(f"{self.api}/proxies", "POST",
              {"name": name, "listen": address, "upstream": upstream, "enabled": True})
        return Proxy(self.api, name, address, upstream)

    def reset(self) -> None:
        """Every proxy enabled, every fault removed."""
        _call(f"{self.api}/reset", "POST", {})


def start(run_dir: Path) -> Toxiproxy:
    """Start a server in ``run_dir`` (its API on a free loopback port); returns once it
    answers."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    pid = launch(run_dir, NAME, [str(server_binary()), "-host", "127.0.0.1", "-port", str(port)],
                 os.environ)
    api = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            _call(f"{api}/version")
            return Toxiproxy(api, pid)
        except (OSError, FaultProxyError):
            if not alive(pid) or time.monotonic() > deadline:
                stop(run_dir)
                log = (run_dir / f"{NAME}.log").read_text(errors="replace")[-3000:]
                raise FaultProxyError(f"toxiproxy did not start on 127.0.0.1:{port}:\n{log}"
                                      ) from None
            time.sleep(0.02)


def stop(run_dir: Path) -> None:
    """Stop the server of ``run_dir`` by its pid (if it runs)."""
    stop_service(Path(run_dir).resolve(), NAME, STOP_GRACE_S)


@contextmanager
def local_toxiproxy(run_dir: Path) -> Iterator[Toxiproxy]:
    """A Toxiproxy server for the ``with`` block, stopped by pid after it (also on failure)."""
    server = start(run_dir)
    try:
        yield server
    finally:
        stop(run_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build"])
    parser.parse_args()
    try:
        print(server_binary())
    except FaultProxyError as exc:
        print(f"fault_proxy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
