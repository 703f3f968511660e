"""The Schema Registry hook: an Airflow connection turned into confluent-kafka's
``SchemaRegistryClient`` config (the ``schema_registry`` argument of ``decode_kafka`` and
``write_kafka``)::

    AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT='{"conn_type": "http", "host": "registry",
                                           "port": 8081, "schema": "https",
                                           "login": "user", "password": "secret"}'

``host`` (with or without ``http://``/``https://``), ``port`` and ``schema`` (the URL scheme,
default ``http``) make ``url``; ``login``/``password`` make ``basic.auth.user.info``; the
``extra`` JSON holds any other client setting (``bearer.auth.token``,
``bearer.auth.credentials.source``, ``ssl.ca.location``, ``timeout``...). The password and every
secret-looking extra value are masked in Airflow's logs; none of them reaches an error message.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from airflow_provider_kafka_spark.arguments import check_conn_id
from airflow_provider_kafka_spark.errors import ConfigurationError

_SECRET_PARTS = ("password", "token", "secret", "user.info", "key.password")


class SchemaRegistryHook(BaseHook):
    """Turns the connection ``schema_registry_conn_id`` into a ``SchemaRegistryClient``
    config dict."""

    conn_name_attr = "schema_registry_conn_id"
    default_conn_name = "schema_registry_default"
    hook_name = "Schema Registry"

    def __init__(self, schema_registry_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.schema_registry_conn_id = schema_registry_conn_id

    def get_config(self) -> dict[str, Any]:
        """The client config of the connection.

        Raises:
            ConfigurationError: the connection does not exist, has no host, or its extra is
                not a JSON object.
        """
        conn_id = self.schema_registry_conn_id
        try:
            conn = self.get_connection(conn_id)
        except AirflowNotFoundException:
            raise ConfigurationError(
                f"the Schema Registry connection {conn_id!r} does not exist; create it (host, "
                "port, schema http/https, login/password or an extra with bearer.auth.*), e.g. "
                "AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT='{\"conn_type\": \"http\", \"host\": "
                "\"registry\", \"port\": 8081}'.") from None
        if not conn.host:
            raise ConfigurationError(f"the Schema Registry connection {conn_id!r} has no host; "
                                     "set its host (and port) to the registry's.")
        try:
            extra = conn.extra_dejson
        except Exception:  # Airflow's own JSON errors
            extra = None
        if not isinstance(extra, dict):
            raise ConfigurationError(f"the extra of the Schema Registry connection {conn_id!r} "
                                     "is not a JSON object of SchemaRegistryClient settings.")
        host = str(conn.host)
        if "://" not in host:
            host = f"{conn.schema or 'http'}://{host}"
        config: dict[str, Any] = {"url": f"{host}:{conn.port}" if conn.port else host, **extra}
        if conn.login:
            config["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
        for key, value in config.items():
            if any(part in key for part in _SECRET_PARTS) and value:
                mask_secret(str(value))
        if conn.password:
            mask_secret(conn.password)
        return config


class SchemaRegistryConnection:
    """The ``SchemaRegistryClient`` config of an Airflow connection, read when first called
    (in the running task, never when the DAG file is parsed), then kept: what a
    :class:`~airflow_provider_kafka_spark.decoding.Decoding` of a DAG takes as its
    ``schema_registry``.

    :param schema_registry_conn_id: the Airflow connection (see :class:`SchemaRegistryHook`).
    """

    def __init__(self, schema_registry_conn_id: str = SchemaRegistryHook.default_conn_name,
                 ) -> None:
        self.schema_registry_conn_id = check_conn_id(
            "SchemaRegistryConnection", "schema_registry_conn_id", schema_registry_conn_id)
        self._config: dict[str, Any] | None = None

    def __call__(self) -> dict[str, Any]:
        """The connection's client config (:meth:`SchemaRegistryHook.get_config`), a copy."""
        if self._config is None:
            self._config = SchemaRegistryHook(self.schema_registry_conn_id).get_config()
        return dict(self._config)

    def __repr__(self) -> str:
        return f"SchemaRegistryConnection({self.schema_registry_conn_id!r})"
