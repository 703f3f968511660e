"""A Kafka broker for a test run, benchmark or tool: the given one, or a fresh local one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        out = _start([sys.executable, str(BROKER_SCRIPT), "start", "--dir", folder,
                      "--port", str(free_port())])
        try:
            yield out.strip().split("=", 1)[1]
        finally:
            subprocess.run([sys.executable, str(BROKER_SCRIPT), "stop", "--dir", folder],
                           check=True)


@dataclass(frozen=True)
class SecuredBroker:
    """A broker started with ``scripts/kafka-broker start --security ...``: its run folder
    (certificates in ``tls/``) and the librdkafka settings of each listener's clients."""

    run_dir: Path
    clients: dict[str, dict[str, str]]

    def client_config(self, mode: str, **changes: Any) -> dict[str, Any]:
        """The librdkafka config of a client of the ``mode`` listener (right credentials:
        the SCRAM-SHA-512 user on SASL listeners, the client certificate on ``ssl``), with
        ``changes`` (a key whose value is None is removed)."""
        config = {**self.clients[mode], **changes}
        return {k: v for k, v in config.items() if v is not None}

    def tls_file(self, name: str) -> str:
        """A PEM file of the broker's throwaway TLS material: ``ca.pem``, ``other-ca.pem``
        (an unrelated CA), ``client.pem``, ``client.key``, ``client-encrypted.key``."""
        return str(self.run_dir / "tls" / name)


PLAIN_USER = ("bob", "bob-secret")
"""The PLAIN user of the secured broker's SASL listeners (``scripts/kafka-broker``)."""
CLIENT_KEY_PASSWORD = "client-key-secret"
"""The password of ``client-encrypted.key``."""


@contextmanager
def secured_broker(run_dir: Path, modes: tuple[str, ...] = ("sasl_plaintext", "ssl", "sasl_ssl")
                   ) -> Iterator[SecuredBroker]:
    """A new broker with one listener per security mode in ``run_dir``, stopped on exit."""
    _start([sys.executable, str(BROKER_SCRIPT), "start", "--dir", str(run_dir),
            "--port", str(free_port()), "--security", ",".join(modes)])
    try:
        yield SecuredBroker(run_dir, json.loads((run_dir / "clients.json").read_text()))
    finally:
        subprocess.run([sys.executable, str(BROKER_SCRIPT), "stop", "--dir", str(run_dir)],
                       check=True)


def _start(command: list[str]) -> str:
    """Run ``scripts/kafka-broker start``; its output, or an error quoting what it said."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")
    return done.stdout


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
