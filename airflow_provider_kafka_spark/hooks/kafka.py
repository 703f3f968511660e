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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.log import amask_secret, mask_secret

from airflow_provider_kafka_spark.offsets.config import client_config
from airflow_provider_kafka_spark.offsets.errors import KafkaSparkError, OffsetSpecError

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

# Config keys whose values are secrets; Airflow's masker does not know all of them by name.
_SECRET_KEY_PARTS = ("password", "secret", "jaas", "token", "ssl.key.pem", "credentials")


class KafkaHook(BaseHook):
    """Turns the connection ``kafka_conn_id`` into a librdkafka config dict.

    :param kafka_conn_id: an Airflow connection (type ``kafka``) whose extra JSON is the
        librdkafka config; ``bootstrap.servers`` is required. Other connection fields
        (host, login, password) are not used, exactly as in the official Kafka provider.
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Apache Kafka"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def get_kafka_config(self) -> dict[str, Any]:
        """The connection's librdkafka config (a fresh copy); its secrets are masked in logs."""
        extra = self.get_connection(self.kafka_conn_id).extra_dejson
        for value in _secret_values(extra):
            mask_secret(value)
        return self._checked(extra)

    async def aget_kafka_config(self) -> dict[str, Any]:
        """:meth:`get_kafka_config` for async code (triggers): never blocks the event loop."""
        connection = await self.aget_connection(self.kafka_conn_id)
        extra = await connection.aextra_dejson()
        for value in _secret_values(extra):
            await amask_secret(value)
        return self._checked(extra)

    def get_conn(self) -> AdminClient:
        """An admin client for the cluster."""
        from airflow_provider_kafka_spark.offsets import admin_client

        return admin_client(self.get_kafka_config())

    def test_connection(self) -> tuple[bool, str]:
        """Ask the cluster for its metadata; ``(True, message)`` when it answers."""
        from confluent_kafka import KafkaException

        try:
            metadata = self.get_conn().list_topics(timeout=10)
        except (KafkaException, KafkaSparkError) as exc:
            return False, f"Kafka connection {self.kafka_conn_id!r} failed: {exc}"
        return True, (
            f"Connected to Kafka cluster {metadata.cluster_id} "
            f"({len(metadata.brokers)} broker(s), {len(metadata.topics)} topic(s))."
        )

    def _checked(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return client_config(extra)
        except OffsetSpecError as exc:
            raise OffsetSpecError(
                f"Airflow connection {self.kafka_conn_id!r}: {exc} The connection's extra JSON "
                "must be the librdkafka config."
            ) from None


def _secret_values(config: Mapping[str, Any]) -> list[Any]:
    return [value for key, value in config.items()
            if value and any(part in str(key).lower() for part in _SECRET_KEY_PARTS)]
