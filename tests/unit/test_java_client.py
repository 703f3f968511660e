"""librdkafka security settings translated for Spark's Java Kafka client (engine="spark-kafka")."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_kafka_spark.offsets import ConfigurationError
from airflow_provider_kafka_spark.spark.read.sources import java_client_settings

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_scram_and_plain_become_a_jaas_config_with_quotes_escaped() -> None:
    assert java_client_settings({
        "bootstrap.servers": "b:9093", "security.protocol": "sasl_ssl",
        "sasl.mechanisms": "scram-sha-512", "sasl.username": "al\\ice",
        "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem", "linger.ms": 5,
    }) == {
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "linger.ms": 5,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="al\\\\ice" password="p\\"w";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
    }
    plain = java_client_settings({"sasl.mechanism": "PLAIN", "sasl.username": "bob",
                                  "sasl.password": "pw"})
    assert plain["sasl.jaas.config"] == ("org.apache.kafka.common.security.plain.PlainLoginModule"
                                         ' required username="bob" password="pw";')


def test_fetch_settings_keep_their_meaning() -> None:
    assert java_client_settings({"fetch.wait.max.ms": 100, "fetch.min.bytes": 1000,
                                 "max.partition.fetch.bytes": 1}) == {
        "fetch.max.wait.ms": 100, "fetch.min.bytes": 1000, "max.partition.fetch.bytes": 1}


def test_a_client_certificate_travels_inline(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "c.key").write_text("KEY")
    assert java_client_settings({
        "security.protocol": "SSL", "ssl.certificate.location": str(tmp_path / "c.pem"),
        "ssl.key.location": str(tmp_path / "c.key"), "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "none",
    }) == {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
           "ssl.keystore.certificate.chain": "CERT", "ssl.keystore.key": "KEY",
           "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": ""}


@pytest.mark.parametrize(("config", "message"), [
    ({"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"},
     "cannot give sasl.oauthbearer.method"),
    ({"sasl.mechanism": "OAUTHBEARER"}, "cannot translate sasl.mechanism=OAUTHBEARER"),
    ({"sasl.mechanism": "GSSAPI"}, "cannot translate sasl.mechanism=GSSAPI"),
    ({"sasl.mechanism": "PLAIN"}, "needs sasl.username and sasl.password"),
    ({"ssl.certificate.location": "/nonexistent/c.pem", "ssl.key.location": "/k"},
     "could not: No such file or directory"),
    ({"ssl.certificate.pem": "CERT"}, "needs both its certificate"),
    ({"ssl.crl.location": "/crl.pem"}, "cannot give ssl.crl.location"),
])
def test_what_cannot_be_translated_is_refused(config: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as exc:
        java_client_settings({"sasl.password": "SECRET-VALUE", **config})
    assert "SECRET-VALUE" not in str(exc.value)
