"""A Kafka broker for a test run, benchmark or tool: the given one, or a fresh local one."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.processes import free_port

BROKER_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "kafka-broker"


@contextmanager
def local_broker(bootstrap: str | None = None, *, run_dir: Path | None = None,
                 brokers: int = 1) -> Iterator[str]:
    """Yield ``bootstrap.servers``: ``bootstrap`` itself when given (an external broker, left
    alone), else a new broker (or, with ``brokers`` > 1, a new cluster: see
    :func:`local_cluster`) started by ``scripts/kafka-broker`` on a free loopback port in
    ``run_dir`` (default: a temporary folder) and stopped on exit."""
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="kafka-broker-") as scratch:
        if brokers > 1:
            with local_cluster(Path(run_dir or scratch), brokers) as cluster:
                yield cluster.bootstrap
            return
        folder = str(run_dir or scratch)
        out = _start([sys.executable, str(BROKER_SCRIPT), "start", "--dir", folder,
                      "--port", str(free_port())])
        try:
            yield out.strip().split("=", 1)[1]
        finally:
            _stop(Path(folder))


@dataclass(frozen=True)
class LocalCluster:
    """A cluster started with ``scripts/kafka-broker start --brokers N``: a KRaft controller
    and brokers 1..N with replication factor 3 and ``min.insync.replicas=2`` by default."""

    run_dir: Path
    bootstrap: str
    brokers: tuple[int, ...]

    def kill(self, broker: int) -> None:
        """SIGKILL broker ``broker`` (no controlled shutdown); returns once it is gone."""
        self._verb("kill", broker)

    def restart(self, broker: int) -> None:
        """Stop ``broker`` if it runs (controlled shutdown), start it again on the same port
        and log directory; returns once it answers (its replicas may still be catching up)."""
        self._verb("restart", broker)

    def settle(self, timeout: float = 180.0) -> float:
        """Start every broker that is down, then wait until each partition (internal topics
        too) has a leader and all its replicas in sync; the seconds it took."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        started = time.monotonic()
        for broker in set(self.brokers) - set(admin.list_topics(timeout=10).brokers):
            self.restart(broker)
        while True:
            metadata = admin.list_topics(timeout=10)
            lagging = [f"{t}/{p}" for t, topic in metadata.topics.items()
                       for p, part in topic.partitions.items()
                       if set(part.isrs) != set(part.replicas) or part.leader < 0]
            if not lagging and set(metadata.brokers) == set(self.brokers):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"replicas not in sync after {timeout:.0f}s: {lagging[:10]}")
            time.sleep(0.3)

    def _verb(self, verb: str, broker: int) -> None:
        done = subprocess.run([sys.executable, str(BROKER_SCRIPT), verb, str(broker),
                               "--dir", str(self.run_dir)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-broker {verb} {broker}: {done.stderr.strip()}")


@contextmanager
def local_cluster(run_dir: Path, brokers: int = 3) -> Iterator[LocalCluster]:
    """A new cluster of ``brokers`` brokers and one controller in ``run_dir``; every node is
    stopped on exit (also the ones a test killed and restarted)."""
    try:
        out = _start([sys.executable, str(BROKER_SCRIPT), "start", "--dir", str(run_dir),
                      "--port", str(free_port()), "--brokers", str(brokers)])
        yield LocalCluster(run_dir, out.strip().split("=", 1)[1],
                           tuple(range(1, brokers + 1)))
    finally:
        _stop(run_dir)


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
        _stop(run_dir)


def _start(command: list[str]) -> str:
    """Run ``scripts/kafka-broker start``; its output, or an error quoting what it said."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")
    return done.stdout


def _stop(run_dir: Path) -> None:
    subprocess.run([sys.executable, str(BROKER_SCRIPT), "stop", "--dir", str(run_dir)],
                   check=True)


