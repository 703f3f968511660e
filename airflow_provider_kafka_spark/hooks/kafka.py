"""The Kafka hook: an Airflow connection whose ``extra`` JSON is the librdkafka config.

The format is the one of the official ``apache-airflow-providers-apache-kafka`` ``kafka``
connection, so an existing connection works unchanged::

    AIRFLOW_CONN_KAFKA_DEFAULT='{"conn_type": "kafka",
                                 "extra": {"bootstrap.servers": "broker:9092",
                                           "security.protocol": "SASL_SSL", ...}}'

This package does not register the ``kafka`` connection type itself (that would clash with
the official provider); it only reads the ``extra`` JSON of whatever connection it is given.
The offset core (``offsets.config``) turns that dict into client configs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import amask_secret, mask_secret
from confluent_kafka import KafkaException

from airflow_provider_kafka_spark.arguments import DEFAULT_KAFKA_CONN_ID, check_conn_id
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    KafkaSparkError,
    OffsetResolutionError,
)
from airflow_provider_kafka_spark.offsets.cluster import admin_client, cluster_failure
from airflow_provider_kafka_spark.offsets.config import (
    KafkaConfig,
    is_secret_key,
)

if TYPE_CHECKING:
    from airflow.sdk import Connection
    from confluent_kafka.admin import AdminClient

_EXTRA_HELP = ('The extra must be a JSON object of librdkafka settings, e.g. '
               '{"bootstrap.servers": "broker:9092", "security.protocol": "SASL_SSL"}.')
# Seconds test_connection waits for the cluster's metadata.
_TEST_TIMEOUT = 10.0
T = TypeVar("T")


class KafkaHook(BaseHook):
    """Turns the connection ``kafka_conn_id`` into a librdkafka config dict.

    :param kafka_conn_id: an Airflow connection (type ``kafka``) whose extra JSON is the
        librdkafka config; ``bootstrap.servers`` is required. Other connection fields
        (host, login, password) are not used, exactly as in the official Kafka provider.
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = DEFAULT_KAFKA_CONN_ID
    conn_type = "kafka"
    hook_name = "Apache Kafka"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def get_kafka_config(self) -> KafkaConfig:
        """The connection's librdkafka config, checked once (a :class:`KafkaConfig`: what
        every function of the package takes); its secrets are masked in logs.

        Raises:
            ConfigurationError: the connection is not defined, its extra is not a JSON object,
                or the config in it is refused (the message names the connection and the key,
                never a secret).
        """
        try:
            connection = self.get_connection(self.kafka_conn_id)
        except AirflowNotFoundException:
            raise self._not_defined() from None
        extra = self._extra(connection)
        mask_secret(extra)
        for value in _secret_values(extra):
            mask_secret(value)
        return self._checked(extra)

    async def aget_kafka_config(self) -> KafkaConfig:
        """:meth:`get_kafka_config` for async code (triggers): never blocks the event loop."""
        try:
            connection = await self.aget_connection(self.kafka_conn_id)
        except AirflowNotFoundException:
            raise self._not_defined() from None
        extra = self._extra(connection)
        await amask_secret(extra)
        for value in _secret_values(extra):
            await amask_secret(value)
        return self._checked(extra)

    def get_conn(self) -> AdminClient:
        """An admin client for the cluster.

        Raises:
            ConfigurationError: as :meth:`get_kafka_config`, or librdkafka refused the config.
        """
        return self._connection_error(lambda: admin_client(self.get_kafka_config()))

    def test_connection(self) -> tuple[bool, str]:
        """Ask the cluster for its metadata: ``(True, message)`` when it answers, else
        ``(False, what went wrong and what to do)``. Never raises for a bad connection or an
        unreachable cluster; secrets never appear in the message."""
        try:
            config = self.get_kafka_config()
            admin = self._connection_error(lambda: admin_client(config))
            try:
                metadata = admin.list_topics(timeout=_TEST_TIMEOUT)
            except KafkaException as exc:
                raise cluster_failure(exc.args[0], "reading the cluster's metadata",
                                      config.cluster, "Check the connection's extra.",
                                      OffsetResolutionError) from None
        except KafkaSparkError as exc:
            return False, f"Kafka connection {self.kafka_conn_id!r} failed: {exc}"
        return True, (
            f"Connected to Kafka cluster {metadata.cluster_id} "
            f"({len(metadata.brokers)} broker(s), {len(metadata.topics)} topic(s))."
        )

    def _not_defined(self) -> ConfigurationError:
        return ConfigurationError(
            f"Airflow connection {self.kafka_conn_id!r} is not defined. Create it (type kafka; "
            f"the extra holds the librdkafka config) or pass another kafka_conn_id. "
            f"{_EXTRA_HELP}"
        )

    def _extra(self, connection: Connection) -> dict[str, Any]:
        """The extra as a dict; not JSON or not an object is a :class:`ConfigurationError`
        (Airflow's ``extra_dejson`` would log and return ``{}``, or return a list as is). The
        extra's text is never shown: it may hold secrets."""
        if not connection.extra:
            return {}
        try:
            extra = json.loads(connection.extra)
        except json.JSONDecodeError as exc:
            raise self._bad_extra(f"its extra is not JSON ({exc.msg} at line {exc.lineno}, "
                                  f"column {exc.colno}).") from None
        except (RecursionError, ValueError):  # deep nesting, numbers of 4300+ digits
            raise self._bad_extra("its extra is not JSON this package can read.") from None
        if not isinstance(extra, dict):
            kind = "null" if extra is None else type(extra).__name__
            raise self._bad_extra(f"its extra is a JSON {kind}, not an object.")
        return extra

    def _bad_extra(self, problem: str) -> ConfigurationError:
        return ConfigurationError(
            f"Airflow connection {self.kafka_conn_id!r}: {problem} {_EXTRA_HELP}")

    def _checked(self, extra: Mapping[str, Any]) -> KafkaConfig:
        return self._connection_error(lambda: KafkaConfig(extra))

    def _connection_error(self, build: Callable[[], T]) -> T:
        """``build()``, its ConfigurationError prefixed with the connection."""
        try:
            return build()
        except ConfigurationError as exc:
            if str(exc).startswith(f"Airflow connection {self.kafka_conn_id!r}"):
                raise
            raise ConfigurationError(
                f"Airflow connection {self.kafka_conn_id!r}: {exc} {_EXTRA_HELP}"
            ) from None


class KafkaConnection:
    """The librdkafka config of an Airflow connection, read when first called (in the running
    task, never when the DAG file is parsed), then kept: what a sink value of a DAG takes as
    its ``kafka_config``, e.g. ``KafkaSink("orders-out", kafka_config=KafkaConnection("other"))``.

    :param kafka_conn_id: the Airflow connection (see :class:`KafkaHook`).
    """

    def __init__(self, kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID) -> None:
        self.kafka_conn_id = check_conn_id("KafkaConnection", "kafka_conn_id", kafka_conn_id)
        self._config: KafkaConfig | None = None

    def __call__(self) -> KafkaConfig:
        """The connection's config (:meth:`KafkaHook.get_kafka_config`)."""
        if self._config is None:
            self._config = KafkaHook(self.kafka_conn_id).get_kafka_config()
        return self._config

    def __repr__(self) -> str:
        return f"KafkaConnection({self.kafka_conn_id!r})"


class KafkaConnectionMixin:
    """The ``kafka_conn_id`` argument of an operator, sensor or trigger, and the
    :class:`KafkaHook` built from it."""

    kafka_conn_id: str

    @cached_property
    def kafka_hook(self) -> KafkaHook:
        """The hook for ``kafka_conn_id``; built on first use, inside the running task."""
        return KafkaHook(kafka_conn_id=self.kafka_conn_id)


def _secret_values(config: Mapping[str, Any]) -> list[Any]:
    return [value for key, value in config.items() if value and is_secret_key(str(key))]
