"""A client whose security.protocol does not match the listener's: a plaintext client at the
SSL listener, an SSL client at a plaintext (SASL_PLAINTEXT) one. Every public entry point that
reaches a cluster (``tests/support/unreachable.py``) fails within the bound its docstring
states for its ``timeout``, with this package's error naming bootstrap.servers and what to
check (the other faults: ``tests/integration/test_unreachable_cluster.py``).

The plaintext client gets no answer it can read (the listener waits for a TLS handshake): the
entry point's error of no broker answering. The SSL client's handshake is refused, which
librdkafka reports: KafkaAuthenticationError, naming security.protocol and the listener's
kind. (The ingests, whose first contact waits a fixed 10 s, are timed in the other module.)"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import KafkaAuthenticationError
from tests.support.unreachable import (
    ENTRY_POINTS,
    REACH_CHECKS,
    EntryPoint,
    Setting,
    check_failure,
    fail,
)
from tools.local_broker import SecuredBroker

pytestmark = [pytest.mark.secured, pytest.mark.integration]

TIMEOUT = 1.0


PLAIN_AT_SSL = "plaintext client, SSL listener"
SSL_AT_PLAIN = "SSL client, plaintext listener"


def mismatched(secured: SecuredBroker, case: str) -> dict[str, Any]:
    """The config of ``case``: the SSL listener's address without TLS, or the SSL client's
    settings at the SASL_PLAINTEXT listener's address."""
    if case == PLAIN_AT_SSL:
        return {"bootstrap.servers": secured.client_config("ssl")["bootstrap.servers"]}
    plain = secured.client_config("sasl_plaintext")["bootstrap.servers"]
    return {**secured.client_config("ssl"), "bootstrap.servers": plain}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", [PLAIN_AT_SSL, SSL_AT_PLAIN])
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e.name for e in ENTRY_POINTS])
def test_every_entry_point_fails_within_its_stated_bound(
        secured: SecuredBroker, entry: EntryPoint, case: str,
        request: pytest.FixtureRequest) -> None:
    setting = Setting()
    if entry.spark:
        spark = request.getfixturevalue("spark")
        setting = Setting(spark, spark.createDataFrame([(b"k", b"v")], "key binary, value binary"))
    config = mismatched(secured, case)
    failure = fail(entry, config, TIMEOUT, setting)
    if case == PLAIN_AT_SSL:
        check_failure(entry, failure, config["bootstrap.servers"], TIMEOUT,
                      checks=REACH_CHECKS)
    else:
        check_failure(entry, failure, config["bootstrap.servers"], TIMEOUT,
                      error=KafkaAuthenticationError,
                      checks=("security.protocol=SSL", "PLAINTEXT broker listener",
                              "Check security.protocol: the listener at bootstrap.servers "
                              "does not speak TLS"))
