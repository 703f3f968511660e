"""Fixtures of the network fault tests (``tests/faults/network``): one Toxiproxy server
(``tools/fault_proxy.py``) and a proxy in front of each server the package talks to.

* ``proxied_kafka``: a broker of its own whose client listener advertises the proxy's address
  (``tools/kafka_broker.py``'s ``proxied_port``), so every client that bootstraps from the
  proxy (the admin clients of resolution, the readers, the producers) talks to it only through
  the proxy; ``direct`` is the broker's own listener, for the tests' set-up and checks.
* ``s3_proxy``: in front of the session's S3 server; ``proxied_s3`` the settings that reach it
  through the proxy (what a ``FileSink``, the readers' landing and the publish use).
* ``registry_proxy``: in front of the session's Schema Registry.
* ``postgres_proxy``: in front of the ``tables`` tier's PostgreSQL (Iceberg's JDBC catalog).

Every process is started and stopped by pid (the broker by ``scripts/kafka-broker``'s own
functions, Toxiproxy by ``tools/processes``). After each test every proxy is enabled again
and its faults removed (``clean_proxies``, autouse where the conftest imports it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.s3 import S3Settings
from tools import kafka_broker
from tools.fault_proxy import Proxy, Toxiproxy, local_toxiproxy
from tools.processes import free_port
from tools.s3_server import S3Endpoint


@dataclass(frozen=True)
class ProxiedKafka:
    """A broker reached through a proxy: ``config`` for the package (through the proxy),
    ``direct`` for the test's own set-up and checks (not through it)."""

    proxy: Proxy
    config: dict[str, Any]
    direct: dict[str, Any]


@pytest.fixture(scope="package")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toxiproxy]:
    with local_toxiproxy(tmp_path_factory.mktemp("toxiproxy")) as server:
        yield server


@pytest.fixture(scope="package")
def proxied_kafka(toxiproxy: Toxiproxy,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedKafka]:
    run_dir = tmp_path_factory.mktemp("proxied-broker")
    proxy_port = free_port()
    try:
        servers = kafka_broker.start(run_dir, free_port(), proxied_port=proxy_port)
        listener = int((run_dir / "proxied.port").read_text())
        proxy = toxiproxy.proxy("kafka", f"127.0.0.1:{listener}", port=proxy_port)
        yield ProxiedKafka(proxy, {"bootstrap.servers": proxy.address},
                           {"bootstrap.servers": servers["plaintext"]})
    finally:
        kafka_broker.stop(Path(run_dir))


@pytest.fixture(scope="package")
def s3_proxy(toxiproxy: Toxiproxy, s3_endpoint: S3Endpoint) -> Proxy:
    return toxiproxy.proxy("s3", s3_endpoint.url.split("://", 1)[1])


@pytest.fixture(scope="package")
def proxied_s3(s3_proxy: Proxy, s3_endpoint: S3Endpoint) -> S3Settings:
    return S3Settings(endpoint_url=f"http://{s3_proxy.address}", region=s3_endpoint.region,
                      access_key=s3_endpoint.access_key, secret_key=s3_endpoint.secret_key,
                      path_style=True, ssl=False)


@pytest.fixture(scope="package")
def registry_proxy(toxiproxy: Toxiproxy, schema_registry: dict[str, Any]) -> Proxy:
    return toxiproxy.proxy("registry", schema_registry["url"].split("://", 1)[1])


@pytest.fixture(scope="package")
def postgres_proxy(toxiproxy: Toxiproxy, postgres: Any) -> Proxy:
    """(``tests/tables`` only: ``postgres`` is its fixture.)"""
    return toxiproxy.proxy("postgres", f"{postgres.host}:{postgres.port}")


@pytest.fixture
def clean_proxies(toxiproxy: Toxiproxy) -> Iterator[None]:
    """Every proxy enabled and without faults after the test (also when it failed)."""
    yield
    toxiproxy.reset()
