"""librdkafka settings as the settings of Kafka's Java client, for ``engine="spark-kafka"``.

The Kafka connection's extra is a librdkafka config. Spark's own ``kafka`` source runs the Java
client, which ignores librdkafka's security keys ("supplied but not used"): this module
translates them, and refuses what it cannot translate before anything is read.

========================================  ===================================================
librdkafka                                Java client
========================================  ===================================================
``security.protocol``                     ``security.protocol``
``sasl.mechanism(s)`` PLAIN / SCRAM-*     ``sasl.mechanism`` + ``sasl.jaas.config`` with
 + ``sasl.username``, ``sasl.password``    ``PlainLoginModule`` / ``ScramLoginModule``
``ssl.ca.location``                       ``ssl.truststore.type=PEM``, ``ssl.truststore.location``
``ssl.ca.pem``                            ``ssl.truststore.type=PEM``, ``ssl.truststore.certificates``
``ssl.certificate.location`` +            ``ssl.keystore.type=PEM``, ``ssl.keystore.certificate.chain``
 ``ssl.key.location`` (files read here)    and ``ssl.keystore.key`` (inline PEM, PKCS#8 key)
``ssl.certificate.pem``, ``ssl.key.pem``  the same, inline
``ssl.key.password``                      ``ssl.key.password``
``ssl.keystore.location``/``.password``   ``ssl.keystore.type=PKCS12``, the same keys
``ssl.endpoint.identification.algorithm`` the same (``none`` becomes ``""``)
``fetch.wait.max.ms``                     ``fetch.max.wait.ms`` (the same setting, renamed)
========================================  ===================================================

Settings both clients know by the same name (``fetch.min.bytes``, ``fetch.max.bytes``,
``max.partition.fetch.bytes``, ``client.id``...) are kept as they are.

OAUTHBEARER, GSSAPI and librdkafka-only security settings (``sasl.oauthbearer.*``,
``sasl.kerberos.*``, ``ssl.crl.location``...) are a :class:`ConfigurationError`: use the
default ``engine="python"``, which passes the connection to librdkafka unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_provider_kafka_spark.errors import ConfigurationError

__all__ = ["java_client_settings"]

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka keys handled below; every other sasl.* / ssl.* key cannot be translated.
_TRANSLATED = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location",
    "ssl.certificate.pem", "ssl.key.pem", "ssl.key.password", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.endpoint.identification.algorithm",
})
# librdkafka names of settings the Java client calls otherwise.
_RENAMED = {"fetch.wait.max.ms": "fetch.max.wait.ms"}
_PYTHON_ENGINE = "use engine='python' (the default), which gives the settings to librdkafka as they are"


def java_client_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (librdkafka) with its security settings in the Java client's terms; other
    settings are kept as they are.

    Raises:
        ConfigurationError: a security setting the Java client has no equivalent for, a SASL
            mechanism other than PLAIN / SCRAM, or a certificate file that cannot be read;
            never showing a secret value.
    """
    untranslatable = sorted(k for k in config if k.startswith(("sasl.", "ssl."))
                            and k not in _TRANSLATED)
    if untranslatable:
        raise ConfigurationError(
            f"engine='spark-kafka' cannot give {', '.join(untranslatable)} to Spark's Java Kafka "
            f"client (no equivalent is translated); {_PYTHON_ENGINE}.")
    java = {_RENAMED.get(k, k): v for k, v in config.items() if k not in _TRANSLATED}
    if "security.protocol" in config:
        java["security.protocol"] = str(config["security.protocol"]).upper()
    java.update(_sasl(config))
    java.update(_tls(config))
    return java


def _sasl(config: Mapping[str, Any]) -> dict[str, str]:
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if mechanism is None and "sasl.username" not in config:
        return {}
    mechanism = str(mechanism or "GSSAPI").upper()
    if mechanism not in _LOGIN_MODULES:
        raise ConfigurationError(
            f"engine='spark-kafka' cannot translate sasl.mechanism={mechanism} for Spark's Java "
            f"Kafka client (only PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512); {_PYTHON_ENGINE}.")
    if "sasl.username" not in config or "sasl.password" not in config:
        raise ConfigurationError(
            f"sasl.mechanism={mechanism} needs sasl.username and sasl.password in the Kafka "
            "connection's extra.")
    username, password = (_quoted(config[k]) for k in ("sasl.username", "sasl.password"))
    return {"sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{_LOGIN_MODULES[mechanism]} required username="{username}" '
                                f'password="{password}";'}


def _quoted(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def _tls(config: Mapping[str, Any]) -> dict[str, str]:
    java: dict[str, str] = {}
    if "ssl.ca.location" in config:
        java.update({"ssl.truststore.type": "PEM",
                     "ssl.truststore.location": str(config["ssl.ca.location"])})
    if "ssl.ca.pem" in config:
        java.update({"ssl.truststore.type": "PEM",
                     "ssl.truststore.certificates": str(config["ssl.ca.pem"])})
    certificate = (_read_pem(config, "ssl.certificate.location")
                   or config.get("ssl.certificate.pem"))
    key = _read_pem(config, "ssl.key.location") or config.get("ssl.key.pem")
    if (certificate is None) != (key is None):
        raise ConfigurationError(
            "a client certificate needs both its certificate (ssl.certificate.location or "
            "ssl.certificate.pem) and its key (ssl.key.location or ssl.key.pem).")
    if certificate is not None:
        java.update({"ssl.keystore.type": "PEM",
                     "ssl.keystore.certificate.chain": str(certificate),
                     "ssl.keystore.key": str(key)})
    if "ssl.keystore.location" in config:
        java.update({"ssl.keystore.type": "PKCS12",
                     "ssl.keystore.location": str(config["ssl.keystore.location"])})
        if "ssl.keystore.password" in config:
            java["ssl.keystore.password"] = str(config["ssl.keystore.password"])
    if "ssl.key.password" in config:
        java["ssl.key.password"] = str(config["ssl.key.password"])
    if "ssl.endpoint.identification.algorithm" in config:
        value = str(config["ssl.endpoint.identification.algorithm"])
        java["ssl.endpoint.identification.algorithm"] = "" if value.lower() == "none" else value
    return java


def _read_pem(config: Mapping[str, Any], key: str) -> str | None:
    """The PEM text of the file ``config[key]`` names (read on the driver: the Java client
    takes the client certificate and key inline, so executors need no copy of the files)."""
    if key not in config:
        return None
    try:
        return Path(str(config[key])).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not PEM text"
        raise ConfigurationError(
            f"engine='spark-kafka' reads {key}={str(config[key])!r} on the driver to give it to "
            f"Spark's Java Kafka client, and could not: {reason}. Fix the path."
        ) from None
