"""The one place that turns a user's librdkafka config into a client config.

:class:`KafkaConfig` is the config as a value: checked once when built (from an Airflow
connection's extra, or a plain dict at the public API's edge), its secrets masked in its repr,
and it gives each client its config: any client's or an admin's (:meth:`KafkaConfig.client`),
a bounded consumer's (:meth:`KafkaConfig.consumer`), ``write_kafka``'s producer's
(:meth:`KafkaConfig.producer`), the native client's strings (:meth:`KafkaConfig.native`).
:func:`consumer_config` (public, for a dict) and :func:`producer_config` (which documents the
producer's settings) do the same for a dict. :func:`new_client` builds clients.

The user config is the same dict as the ``extra`` JSON of Airflow's ``kafka`` connection.
Secrets in it never reach a log line or an exception message: errors name keys, never the
value of a secret key (:func:`is_secret_key`), and the only values logged are those of the
settings a consumer overrides (none of them secret).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from airflow_provider_kafka_spark.causes import classify_text
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    KafkaAuthenticationError,
    WriteConfigError,
)
from airflow_provider_kafka_spark.naming import kafka_authority
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.options import (
    ISOLATION_LEVELS,
    DeliveryGuarantee,
    IsolationLevel,
)

log = logging.getLogger(__name__)

MAX_TIMEOUT = 3600.0
"""The longest timeout in seconds: librdkafka's admin requests take at most one hour."""

# Defaults under the user's settings. librdkafka's fetch.queue.backoff.ms (1 s) pauses
# fetching whenever the pre-fetch queue is full, which throttles a consumer that drains as
# fast as it can (measured here: ~2.5x slower on one 333k-record partition). Its
# fetch.wait.max.ms (500 ms) is how long the broker holds a fetch at the log's end, which a
# bounded read asks for to learn that a range ending there (after a commit marker, say) is
# complete: 10 ms (measured here: a slice of 600 partitions 5.6x faster); a fetch with data
# returns at once either way.
_CONSUMER_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 10}

# Keys a bounded reader must own: offsets move only through commit_offsets().
_CONSUMER_OVERRIDES: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
}
# (key, repr of the user's value) pairs already warned about in this process.
_warned_overrides: set[tuple[str, str]] = set()


def check_isolation_level(isolation_level: object) -> IsolationLevel:
    """Return ``isolation_level`` if valid, else raise :class:`ConfigurationError`."""
    if not isinstance(isolation_level, str) or isolation_level not in ISOLATION_LEVELS:
        raise ConfigurationError(
            f"isolation_level={shown(isolation_level)} is not valid; use one of "
            f"{ISOLATION_LEVELS}."
        )
    return isolation_level  # type: ignore[return-value]


def check_timeout(timeout: object, name: str = "timeout") -> float:
    """``timeout`` in seconds as a float, if it is a positive, finite number (not a bool) of at
    most :data:`MAX_TIMEOUT`; else :class:`ConfigurationError`. (librdkafka reads -1 as
    "forever", so a negative timeout would wait forever on an unreachable cluster.)

    The time limit of the core's own cluster calls (``resolve_offsets``, ``commit_offsets``,
    ``read_kafka``...): librdkafka bounds it, and the message names the argument only, as the
    caller named it. An Airflow task's or trigger's duration argument (any positive length,
    a ``timedelta`` too, the message naming the task) is
    :func:`airflow_provider_kafka_spark.options.check_seconds` instead."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
            or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        raise ConfigurationError(
            f"{name}={shown(timeout)} is not a timeout; pass a positive, finite number of "
            f"seconds (at most {MAX_TIMEOUT:.0f}), e.g. {name}=30."
        )
    return float(timeout)


def cluster_name(kafka_config: Mapping[str, Any]) -> str:
    """The cluster as error messages name it: ``bootstrap.servers='host:9092'``."""
    return f"bootstrap.servers={shown(kafka_config.get('bootstrap.servers'))}"


C = TypeVar("C")

LIBRDKAFKA_SETTINGS = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
"""librdkafka's list of settings, named in the errors about them."""

# Parts of config keys whose values are secrets (passwords, JAAS lines, tokens, private keys).
_SECRET_KEY_PARTS = ("password", "secret", "jaas", "token", "ssl.key.pem", "credentials",
                     "oauthbearer.config")

# Settings of the Java client that librdkafka does not have, and what to do instead.
_NOT_NEEDED = "not needed: this package reads and writes keys and values as bytes; remove it"
_JAVA_ONLY: dict[str, str] = {
    "sasl.jaas.config": "librdkafka has no JAAS: set sasl.username and sasl.password instead, "
                        "with sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, as in the "
                        "JAAS login module) and security.protocol SASL_SSL or SASL_PLAINTEXT",
    "key.deserializer": _NOT_NEEDED + " (decode them with decode_kafka)",
    "value.deserializer": _NOT_NEEDED + " (decode them with decode_kafka)",
    "key.serializer": _NOT_NEEDED,
    "value.serializer": _NOT_NEEDED,
    "ssl.truststore.location": "librdkafka has no Java TrustStores: give the CA certificates as "
                               "a PEM file in ssl.ca.location instead",
    "ssl.truststore.password": "not needed with ssl.ca.location (a PEM file); remove it",
    "ssl.truststore.type": "not needed with ssl.ca.location (a PEM file); remove it",
    "ssl.keystore.type": "librdkafka reads a PKCS#12 keystore (ssl.keystore.location and "
                         "ssl.keystore.password) or PEM files (ssl.certificate.location and "
                         "ssl.key.location); remove it (convert a JKS keystore first)",
    "interceptor.classes": "librdkafka has no Java interceptors; remove it",
    "sasl.login.callback.handler.class": "librdkafka has no Java callback handlers: use "
                                         "sasl.oauthbearer.method=oidc with the "
                                         "sasl.oauthbearer.* settings, or remove it",
    "schema.registry.url": "not a client setting (this package uses no schema registry); "
                           "remove it",
}

# Keys whose values confluent-kafka takes as Python objects rather than librdkafka strings.
_PYTHON_OBJECT_KEYS = frozenset({"error_cb", "throttle_cb", "stats_cb", "oauth_cb",
                                 "on_delivery", "on_commit", "logger"})

# What to set, for settings whose refusal librdkafka does not explain.
_ALLOWED_VALUES: dict[str, str] = {
    "security.protocol": "use one of PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    "sasl.mechanism": "use one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (or GSSAPI "
                      "where librdkafka is built with it)",
}
_ALLOWED_VALUES["sasl.mechanisms"] = _ALLOWED_VALUES["sasl.mechanism"]
# Refusals that name no key: the key they are about.
_UNNAMED_KEYS = {"SASL mechanism": "sasl.mechanism",
                 # a SCRAM-SHA-<digits> typo, e.g. SCRAM-SHA-999
                 "Unsupported hash function": "sasl.mechanism"}


def is_secret_key(key: str) -> bool:
    """True for config keys whose values are secrets; their values are never shown."""
    return any(part in key.lower() for part in _SECRET_KEY_PARTS)


@dataclass(frozen=True, eq=False, repr=False, init=False)
class KafkaConfig(Mapping[str, Any]):
    """A cluster's librdkafka config as a value (the ``extra`` JSON of Airflow's ``kafka``
    connection), checked once when built; read-only, compared as its settings.

    Checked without contacting anything: the keys are non-empty, no value is None, values are
    strings (UTF-8 text without NUL characters), numbers or booleans (Python objects only for
    confluent-kafka's callback keys such as ``error_cb``), ``bootstrap.servers`` is set, and no
    key is a Java client setting librdkafka lacks (the message says what to set instead).
    Everything else librdkafka checks when a client is built (:func:`new_client`). The values
    of secret keys (:func:`is_secret_key`) show as ``'***'`` in its repr and str.

    Raises:
        ConfigurationError: naming the key, never the value of a secret key.
    """

    _settings: dict[str, Any]

    def __init__(self, settings: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_settings", _checked(settings))

    @classmethod
    def of(cls, config: KafkaConfig | Mapping[str, Any]) -> KafkaConfig:
        """``config`` if it is a :class:`KafkaConfig`, else one built (and checked) from it:
        what the public entry functions call once on their ``kafka_config`` argument."""
        return config if isinstance(config, KafkaConfig) else cls(config)

    def __getitem__(self, key: str) -> Any:
        return self._settings[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def __repr__(self) -> str:
        shown_settings = {k: "***" if is_secret_key(k) else v for k, v in self._settings.items()}
        return f"KafkaConfig({shown_settings!r})"

    __str__ = __repr__

    @property
    def cluster(self) -> str:
        """The cluster as error messages name it: ``bootstrap.servers='host:9092'``."""
        return cluster_name(self._settings)

    @property
    def authority(self) -> str:
        """``host:port`` of the first bootstrap server, as OpenLineage names the cluster."""
        return kafka_authority(self._settings)

    def client(self) -> dict[str, Any]:
        """The settings, a copy: the config of an admin client (or any client)."""
        return dict(self._settings)

    def native(self) -> dict[str, str]:
        """The settings as the native client's strings (:func:`native_settings`)."""
        return native_settings(self._settings)

    def consumer(self, *, isolation_level: str, group_id: str | None = None) -> dict[str, Any]:
        """Config for a bounded, ``assign()``-only consumer that never commits by itself.

        The keys of ``_CONSUMER_OVERRIDES`` and ``isolation.level`` (from ``isolation_level``)
        win over the settings. A user value that differs is logged as a warning once per
        key and value in a process (only these keys' values are ever logged).
        """
        user = self._settings
        level = check_isolation_level(isolation_level)
        for key, ours in _CONSUMER_OVERRIDES.items():
            _warn_if_overridden(user, key, ours, "a bounded read uses {ours!r} (offsets move "
                                "only through commit_offsets()); the setting is ignored. Remove "
                                "it from the config (the Kafka connection's extra) to silence "
                                "this warning.")
        _warn_if_overridden(user, "isolation.level", level, "this consumer uses {ours!r}, its "
                            "isolation_level argument; the setting is ignored. Choose the level "
                            "with isolation_level= (of resolve_offsets / the resolve operator; "
                            "the ranges carry it to the read) instead.")
        config = {**_CONSUMER_DEFAULTS, **user, **_CONSUMER_OVERRIDES}
        config["isolation.level"] = level
        # librdkafka requires a group.id for a consumer, even one that only uses assign().
        config["group.id"] = group_id or config.get("group.id") or "airflow-provider-kafka-spark"
        return config

    def producer(self, guarantee: DeliveryGuarantee, *, transactional_id: str | None = None,
                 transaction_timeout_ms: int | None = None) -> dict[str, Any]:
        """The librdkafka producer config of one ``write_kafka`` task for ``guarantee``; see
        :func:`producer_config`."""
        return _producer(self.client(), guarantee, transactional_id, transaction_timeout_ms)

    @property
    def message_max_bytes(self) -> int | None:
        """The producer's ``message.max.bytes``; see :func:`message_max_bytes`."""
        return message_max_bytes(self._settings)


def _checked(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``kafka_config``; requires ``bootstrap.servers``.

    Checked without contacting anything: the keys are non-empty, no value is None, values are
    strings (UTF-8 text without NUL characters), numbers or booleans (Python objects only for
    confluent-kafka's callback keys such as ``error_cb``), and no key is a Java client setting
    librdkafka lacks (the message says what to set instead). Everything else librdkafka checks
    when a client is built (:func:`new_client`).

    Raises:
        ConfigurationError: naming the key, never the value of a secret key.
    """
    if not isinstance(kafka_config, Mapping):
        raise ConfigurationError(
            f"kafka_config must be a dict of librdkafka settings, got "
            f"{type(kafka_config).__name__}; pass e.g. {{'bootstrap.servers': 'host:9092'}}."
        )
    config = {str(k): v for k, v in kafka_config.items()}
    for key, value in config.items():
        _check_setting(key, value)
    if not config.get("bootstrap.servers"):
        raise ConfigurationError(
            "kafka_config has no 'bootstrap.servers'; set it, e.g. {'bootstrap.servers': "
            "'host:9092'}."
        )
    return config


def _check_setting(key: str, value: object) -> None:
    where = f"kafka_config[{key!r}]"
    if not key.strip():
        raise ConfigurationError(f"kafka_config has an empty key {key!r}; remove it.")
    if key in _JAVA_ONLY:
        raise ConfigurationError(f"kafka_config key {key!r} is a Java client setting that "
                                 f"librdkafka does not have: {_JAVA_ONLY[key]}.")
    if value is None:
        raise ConfigurationError(f"{where} is None; give it a value or remove the key.")
    if key in _PYTHON_OBJECT_KEYS:
        return
    if isinstance(value, list | tuple) and key == "bootstrap.servers":
        raise ConfigurationError(f"{where} is a {type(value).__name__}; give the brokers as one "
                                 "comma-separated string, e.g. 'host1:9092,host2:9092'.")
    if not isinstance(value, str | int | float | bool):
        raise ConfigurationError(f"{where} is a {type(value).__name__}; librdkafka settings are "
                                 "strings, numbers or booleans.")
    if isinstance(value, str):
        shown_value = "its value is a secret" if is_secret_key(key) else f"{shown(value)}"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigurationError(f"{where} is not UTF-8 text ({shown_value}): it holds a "
                                     "lone surrogate; fix the value.") from None
        if "\x00" in value:
            raise ConfigurationError(f"{where} holds a NUL character ({shown_value}), which "
                                     "would cut the value short; fix the value.")


def native_settings(config: Mapping[str, Any]) -> dict[str, str]:
    """``config`` (from :meth:`KafkaConfig.client` or :meth:`KafkaConfig.consumer`) as the string
    settings of the native client (``airflow_provider_kafka_spark._native``); booleans become
    ``"true"``/``"false"``.

    Raises:
        ConfigurationError: a callback or Python object (``error_cb``, ``oauth_cb``...): the
            native reader and writer, which run on Spark executors, take librdkafka's string
            settings only.
    """
    settings: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, bool):
            settings[str(key)] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            settings[str(key)] = str(value)
        else:
            raise ConfigurationError(
                f"kafka_config[{key!r}] is a {type(value).__name__}; Spark executors only receive "
                "string, number or boolean settings. Remove callbacks and objects from the "
                "config (for OAUTHBEARER use sasl.oauthbearer.* settings instead of oauth_cb)."
            )
    return settings


def new_client(factory: Callable[[dict[str, Any]], C], config: dict[str, Any]) -> C:
    """``factory(config)``: an ``AdminClient``, ``Consumer`` or ``Producer`` from a config made
    by :meth:`KafkaConfig.client` or :meth:`KafkaConfig.consumer`.

    Raises:
        ConfigurationError: librdkafka (or confluent-kafka) refused the config; the message
            names the key and what to do, never the value of a secret key.
    """
    try:
        return factory(config)
    except KafkaException as exc:
        raise _refused(exc.args[0].str(), config) from None
    except (TypeError, ValueError) as exc:  # confluent-kafka's checks of its callback keys
        raise _refused(str(exc), config) from None


def _refused(text: str, config: Mapping[str, Any]) -> ConfigurationError:
    """The error for librdkafka's refusal ``text`` of ``config``, secrets removed."""
    key = next((k for k in sorted(config, key=len, reverse=True)
                if re.search(rf"(?<![\w.-]){re.escape(k)}(?![\w.-])", text)), None)
    if key is None:
        key = next((k for fragment, k in _UNNAMED_KEYS.items() if fragment in text), None)
    if key is not None and is_secret_key(key):
        return ConfigurationError(
            f"librdkafka refused kafka_config[{key!r}] (the value is not shown: it is a "
            f"secret). Fix the value; librdkafka's settings: {LIBRDKAFKA_SETTINGS}."
        )
    text = _masked(text, config).strip().rstrip(".")
    if key is None:
        return ConfigurationError(
            f"librdkafka refused the client config: {text}. Fix the settings it names in "
            f"kafka_config (the Kafka connection's extra); librdkafka's settings: "
            f"{LIBRDKAFKA_SETTINGS}."
        )
    remedy = _ALLOWED_VALUES.get(key, "fix its name or value, or remove it")
    return ConfigurationError(
        f"librdkafka refused kafka_config[{key!r}]: {text}. In kafka_config (the Kafka "
        f"connection's extra), {remedy}; librdkafka's settings: {LIBRDKAFKA_SETTINGS}."
    )


def _masked(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with the value of every secret key of ``config`` replaced by ``***``."""
    for key, value in config.items():
        if is_secret_key(key) and isinstance(value, str) and len(value) >= 3:
            text = text.replace(value, "***")
    return text


def consumer_config(
    kafka_config: KafkaConfig | Mapping[str, Any], *, isolation_level: str,
    group_id: str | None = None
) -> dict[str, Any]:
    """Config for a bounded, ``assign()``-only consumer that never commits by itself
    (:meth:`KafkaConfig.consumer`); a dict is checked as :class:`KafkaConfig` checks it."""
    return KafkaConfig.of(kafka_config).consumer(isolation_level=isolation_level,
                                                 group_id=group_id)


def _warn_if_overridden(user: Mapping[str, Any], key: str, ours: Any, consequence: str) -> None:
    """Warn, once per ``(key, user value)``, that the user's ``key`` is replaced by ``ours``.

    Values compare as case-insensitive text: ``"false"`` equals ``False``.
    """
    if key not in user or str(user[key]).strip().lower() == str(ours).lower():
        return
    seen = (key, repr(user[key]))
    if seen in _warned_overrides:
        return
    _warned_overrides.add(seen)
    log.warning("kafka_config sets %s=%r, but %s", key, user[key], consequence.format(ours=ours))


# Keys write_kafka's producer owns; a user value for them would silently change the guarantee.
_PRODUCER_OWNED_KEYS = ("transactional.id", "enable.idempotence", "acks",
                        "transaction.timeout.ms")

DEFAULT_MESSAGE_TIMEOUT_MS = 120_000
"""``none`` / ``at_least_once``: how long a record may wait for its acknowledgement, unless
``kafka_config`` sets ``message.timeout.ms`` or ``delivery.timeout.ms``."""

DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
"""librdkafka's default ``message.max.bytes``: the largest record a producer sends."""

RECORD_OVERHEAD_BYTES = 36
"""What librdkafka adds to a record's key and value (no headers) before comparing it with
``message.max.bytes``: the most a v2 record's length, attributes, timestamp and offset deltas,
key and value lengths and header count take (``RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD``)."""


def producer_config(
    kafka_config: KafkaConfig | Mapping[str, Any],
    guarantee: DeliveryGuarantee,
    *,
    transactional_id: str | None = None,
    transaction_timeout_ms: int | None = None,
) -> dict[str, Any]:
    """The librdkafka producer config of one ``write_kafka`` task for ``guarantee``.

    ``none``: ``acks=1``, no idempotence. ``at_least_once``: idempotent, ``acks=all``.
    ``exactly_once``: additionally ``transactional.id`` and ``transaction.timeout.ms``.
    The local queue defaults to 500,000 messages / 256 MiB unless ``kafka_config`` sets
    ``queue.buffering.max.messages`` / ``queue.buffering.max.kbytes``. ``partitioner``
    defaults to ``murmur2_random`` for every guarantee: a keyed record goes to
    ``(murmur2(key) & 0x7fffffff) % partitions``, where Java producers and Spark's own Kafka
    sink put it (librdkafka's default, ``consistent_random``, hashes with CRC-32 instead);
    a record without a key goes to a random partition. A ``partitioner`` in ``kafka_config``
    wins. ``none`` and ``at_least_once`` give a record ``message.timeout.ms=120000`` (two
    minutes, as the Java producer's ``delivery.timeout.ms``; librdkafka's default is five) to
    be acknowledged, unless ``kafka_config`` sets ``message.timeout.ms`` or
    ``delivery.timeout.ms``; ``exactly_once`` leaves it to librdkafka, which caps it at
    ``transaction.timeout.ms``.

    Raises:
        WriteConfigError: ``kafka_config`` sets a key the sink owns (``transactional.id``,
            ``enable.idempotence``, ``acks``, ``transaction.timeout.ms``).
    """
    return KafkaConfig.of(kafka_config).producer(
        guarantee, transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms)


def _producer(config: dict[str, Any], guarantee: DeliveryGuarantee, transactional_id: str | None,
              transaction_timeout_ms: int | None) -> dict[str, Any]:
    owned = sorted(k for k in _PRODUCER_OWNED_KEYS if k in config)
    if owned:
        raise WriteConfigError(
            f"kafka_config sets {owned}, which write_kafka sets from delivery_guarantee / "
            "transactional_id_prefix / transaction_timeout_ms; remove them from kafka_config."
        )
    # A bulk sink: a deeper local queue than librdkafka's default (100k messages) keeps the
    # producing thread from stalling on a full queue (measured: about 30% more records/s),
    # while bounding the memory of one task's producer. Values in kafka_config win.
    config.setdefault("queue.buffering.max.messages", 500_000)
    config.setdefault("queue.buffering.max.kbytes", 256 * 1024)
    config.setdefault("partitioner", "murmur2_random")  # Java-compatible placement of keys
    if guarantee != "exactly_once" and "delivery.timeout.ms" not in config:
        config.setdefault("message.timeout.ms", DEFAULT_MESSAGE_TIMEOUT_MS)
    if guarantee == "none":
        config.update({"acks": "1", "enable.idempotence": False})
    else:
        config.update({"acks": "all", "enable.idempotence": True})
    if guarantee == "exactly_once":
        if not transactional_id or transaction_timeout_ms is None:
            raise WriteConfigError(
                "producer_config(guarantee='exactly_once') needs transactional_id= and "
                "transaction_timeout_ms=; pass both (write_kafka derives them from "
                "transactional_id_prefix, write_id and transaction_timeout_ms)."
            )
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = int(transaction_timeout_ms)
    return config


def message_max_bytes(kafka_config: Mapping[str, Any]) -> int | None:
    """The producer's ``message.max.bytes``: ``kafka_config``'s, else librdkafka's default;
    ``None`` if ``kafka_config``'s value is not a whole number (librdkafka refuses it when the
    producer is built)."""
    value = kafka_config.get("message.max.bytes")
    if value is None:
        return DEFAULT_MESSAGE_MAX_BYTES
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


_AUTHENTICATION_CODES = frozenset({KafkaError._AUTHENTICATION,
                                   KafkaError.SASL_AUTHENTICATION_FAILED})


def is_authentication_failure(error: KafkaError) -> bool:
    """True for librdkafka's SASL and TLS failures: a SASL refusal; a TLS handshake failure
    (``_SSL``) that is not a connection reset, lost or timed out; a TLS alert from the broker
    (such as a rejected client certificate), which comes as a transport error naming SSL.

    A transport error on a TLS connection is not one by itself: ``SSL transport error:
    Connection reset by peer`` (a broker restarting) is transient, and the client's own
    retries (then the call's timeout) deal with it (:func:`~airflow_provider_kafka_spark.
    causes.classify_text`)."""
    code = error.code()
    if code in _AUTHENTICATION_CODES:
        return True
    cause = classify_text(error.str())
    if code == KafkaError._SSL:  # a handshake failure, unless the connection itself failed
        return not (cause.known and cause.retryable)
    # a certificate not verified, a TLS alert, a plain listener
    return code == KafkaError._TRANSPORT and "SSL" in error.str() and cause.kind == "refused"


class AuthenticationWatch:
    """Catches the authentication failures librdkafka reports through ``error_cb``.

    Build the client from :attr:`config` (the user's config with an ``error_cb`` that records
    the first failure, then calls the user's own ``error_cb``, if any). The callback runs when
    the client is polled (``poll``, ``consume``, ``flush``); :meth:`check` then raises the
    failure as :class:`KafkaAuthenticationError`.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.failure: KafkaError | None = None
        self.settings: dict[str, Any] = {k: v for k, v in config.items() if k != "error_cb"}
        """The config without the watch's ``error_cb`` (for the native client, which reports
        its ``error_cb`` calls to :meth:`record`)."""
        self._user_callback = config.get("error_cb")
        self.config: dict[str, Any] = {**config, "error_cb": self.record}

    def record(self, error: KafkaError) -> None:
        """Note ``error`` (an ``error_cb`` report); call the user's ``error_cb``."""
        if self.failure is None and is_authentication_failure(error):
            self.failure = error
        if self._user_callback is not None:
            self._user_callback(error)

    def check(self, what: str) -> None:
        """Raise the recorded failure, if any, as the error of ``what`` (e.g. "resolving
        offsets")."""
        if self.failure is not None:
            raise authentication_error(self.failure, self.settings, what)


def authentication_error(error: KafkaError, config: Mapping[str, Any],
                         what: str) -> KafkaAuthenticationError:
    """The :class:`KafkaAuthenticationError` of librdkafka's ``error`` for a client of
    ``config``: the protocol and mechanism in use and what to check; no secret value."""
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI")
    text = _masked(error.str(), config)
    tls = error.code() == KafkaError._SSL or "SSL" in error.str()
    checks = []
    plain_listener = tls and "PLAINTEXT broker listener" in error.str()  # TLS at a plain one
    if plain_listener:
        checks.append("security.protocol: the listener at bootstrap.servers does not speak TLS "
                      "(a PLAINTEXT or SASL_PLAINTEXT listener); use its protocol, or the port "
                      "of the cluster's SSL listener")
    if protocol.startswith("SASL") and not tls:
        checks.append(f"sasl.username and sasl.password (the {mechanism} credentials), and that "
                      f"the broker's listener enables {mechanism} (sasl.mechanism)")
    if protocol.endswith("SSL") and tls and not plain_listener:
        checks.append("ssl.ca.location (the CA that signed the brokers' certificates), "
                      "ssl.certificate.location and ssl.key.location (+ ssl.key.password) when "
                      "the listener requires a client certificate, and that the brokers' "
                      "certificates name the hosts in bootstrap.servers "
                      "(ssl.endpoint.identification.algorithm)")
    if not checks:
        checks.append("security.protocol: the listener at bootstrap.servers expects SSL or SASL")
    using = f"security.protocol={protocol}" + (
        f", sasl.mechanism={mechanism}" if protocol.startswith("SASL") else "")
    return KafkaAuthenticationError(
        f"{what}: the Kafka cluster at {cluster_name(config)} refused this client's "
        f"authentication ({using}): {text.strip().rstrip('.')}. Check {'; '.join(checks)} in "
        "the Kafka connection's extra."
    )
