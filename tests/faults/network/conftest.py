"""Network faults between the package and its servers, by a real TCP fault proxy (Toxiproxy,
``tools/fault_proxy.py``; the fixtures are in ``tests/support/network.py``): a broker of its own
whose clients all go through the proxy, and proxies in front of the session's S3 server and
Schema Registry. These tests need no 3-broker cluster: ``healthy`` (the folder's autouse
fixture that settles it) is nothing here, so the cluster is never started for them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.network import (  # noqa: F401  # fixtures
    clean_proxies,
    proxied_kafka,
    proxied_s3,
    registry_proxy,
    s3_proxy,
    toxiproxy,
)


@pytest.fixture(autouse=True)
def healthy(clean_proxies: None) -> Iterator[None]:  # noqa: F811
    """No cluster to settle; every proxy clean after the test."""
    yield
