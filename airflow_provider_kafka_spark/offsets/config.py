"""The one place that turns a user's librdkafka config into a client config.

The user config is the same dict as the ``extra`` JSON of Airflow's ``kafka`` connection.
Secrets in it never reach a log line or an exception message: errors only name keys, and the
only values logged are those of the settings a consumer overrides (none of them secret).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, Literal

from airflow_provider_kafka_spark.offsets.errors import ConfigurationError, OffsetSpecError
from airflow_provider_kafka_spark.offsets.specs import shown

log = logging.getLogger(__name__)

IsolationLevel = Literal["read_committed", "read_uncommitted"]
ISOLATION_LEVELS: tuple[str, ...] = ("read_committed", "read_uncommitted")
MAX_TIMEOUT = 3600.0
"""The longest timeout in seconds: librdkafka's admin requests take at most one hour."""

# Defaults under the user's settings. librdkafka's fetch.queue.backoff.ms (1 s) pauses
# fetching whenever the pre-fetch queue is full, which throttles a consumer that drains as
# fast as it can (measured here: ~2.5x slower on one 333k-record partition).
_CONSUMER_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 10}

# Keys a bounded reader must own: offsets move only through commit_offsets().
_CONSUMER_OVERRIDES: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
}
# (key, repr of the user's value) pairs already warned about in this process.
_warned_overrides: set[tuple[str, str]] = set()


def check_isolation_level(isolation_level: str) -> IsolationLevel:
    """Return ``isolation_level`` if valid, else raise :class:`OffsetSpecError`."""
    if isolation_level not in ISOLATION_LEVELS:
        raise OffsetSpecError(
            f"isolation_level={isolation_level!r} is not valid; use one of {ISOLATION_LEVELS}."
        )
    return isolation_level  # type: ignore[return-value]


def check_timeout(timeout: object, name: str = "timeout") -> float:
    """``timeout`` in seconds as a float, if it is a positive, finite number (not a bool) of at
    most :data:`MAX_TIMEOUT`; else :class:`ConfigurationError`. (librdkafka reads -1 as
    "forever", so a negative timeout would wait forever on an unreachable cluster.)"""
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


def client_config(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``kafka_config`` for an admin client; requires ``bootstrap.servers``."""
    if not isinstance(kafka_config, Mapping):
        raise OffsetSpecError(
            f"kafka_config must be a dict of librdkafka settings, got {type(kafka_config).__name__}."
        )
    config = {str(k): v for k, v in kafka_config.items()}
    if not config.get("bootstrap.servers"):
        raise OffsetSpecError(
            "kafka_config has no 'bootstrap.servers'; set it, e.g. {'bootstrap.servers': 'host:9092'}."
        )
    return config


def consumer_config(
    kafka_config: Mapping[str, Any], *, isolation_level: str, group_id: str | None = None
) -> dict[str, Any]:
    """Config for a bounded, ``assign()``-only consumer that never commits by itself.

    The keys of ``_CONSUMER_OVERRIDES`` and ``isolation.level`` (from ``isolation_level``)
    win over ``kafka_config``. A user value that differs is logged as a warning once per
    key and value in a process (only these keys' values are ever logged).
    """
    user = client_config(kafka_config)
    level = check_isolation_level(isolation_level)
    for key, ours in _CONSUMER_OVERRIDES.items():
        _warn_if_overridden(user, key, ours, "a bounded read uses {ours!r} (offsets move only "
                            "through commit_offsets()); the setting is ignored. Remove it from "
                            "the config (the Kafka connection's extra) to silence this warning.")
    _warn_if_overridden(user, "isolation.level", level, "this consumer uses {ours!r}, its "
                        "isolation_level argument; the setting is ignored. Choose the level with "
                        "isolation_level= (of resolve_offsets / the resolve operator; the ranges "
                        "carry it to the read) instead.")
    config = {**_CONSUMER_DEFAULTS, **user, **_CONSUMER_OVERRIDES}
    config["isolation.level"] = level
    # librdkafka requires a group.id for a consumer, even one that only uses assign().
    config["group.id"] = group_id or config.get("group.id") or "airflow-provider-kafka-spark"
    return config


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
