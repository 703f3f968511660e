"""An Airflow ``aws`` connection as the :class:`~airflow_provider_kafka_spark.s3.S3Settings` the
file sink reaches S3 with, read the way Airflow's Amazon provider reads it, without depending
on that provider: the login is the access key id and the password its secret (or the extra's
``aws_access_key_id``/``aws_secret_access_key``), the extra's ``aws_session_token``,
``region_name`` and ``endpoint_url`` (or ``service_config: {"s3": {"endpoint_url": ...}}``),
and path-style addressing from ``config_kwargs: {"s3": {"addressing_style": "path"}}``. A
connection with neither keys leaves them to the AWS SDKs' default chain (an instance role)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from airflow_provider_kafka_spark.arguments import check_conn_id
from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.s3 import S3Settings

DEFAULT_AWS_CONN_ID = "aws_default"


def s3_settings_of(login: str | None, password: str | None,
                   extra: Mapping[str, Any]) -> S3Settings:
    """The settings of a connection's fields (see the module docs)."""
    access = login or extra.get("aws_access_key_id") or None
    secret = password or extra.get("aws_secret_access_key") or None
    s3_service = (extra.get("service_config") or {}).get("s3") or {}
    endpoint = s3_service.get("endpoint_url") or extra.get("endpoint_url") or None
    addressing = ((extra.get("config_kwargs") or {}).get("s3") or {}).get("addressing_style")
    return S3Settings(endpoint_url=endpoint, region=extra.get("region_name") or None,
                      access_key=access, secret_key=secret,
                      session_token=extra.get("aws_session_token") or None,
                      path_style=addressing == "path")


class AwsConnection:
    """The S3 settings of an Airflow ``aws`` connection, read when first called (in the running
    task, never when the DAG file is parsed), then kept: what a file sink of a DAG takes as
    ``s3=``, e.g. ``FileSink("s3a://lake/orders/{{ ds }}", s3=AwsConnection("aws_default"))``.
    Its secrets are masked in the task's log.

    :param aws_conn_id: the Airflow connection.
    """

    def __init__(self, aws_conn_id: str = DEFAULT_AWS_CONN_ID) -> None:
        self.aws_conn_id = check_conn_id("AwsConnection", "aws_conn_id", aws_conn_id)
        self._settings: S3Settings | None = None

    def __call__(self) -> S3Settings:
        """The connection's settings.

        Raises:
            ConfigurationError: no such connection, or its fields are not valid.
        """
        if self._settings is None:
            try:
                connection = BaseHook.get_connection(self.aws_conn_id)
            except AirflowNotFoundException as exc:
                raise ConfigurationError(
                    f"the Airflow connection {self.aws_conn_id!r} does not exist; create an "
                    "'aws' connection (login: access key id, password: secret, extra: "
                    '{"endpoint_url": ..., "region_name": ...}), or pass another '
                    "aws_conn_id.") from exc
            extra = connection.extra_dejson
            for secret in (connection.password, extra.get("aws_secret_access_key"),
                           extra.get("aws_session_token")):
                if secret:
                    mask_secret(secret)
            self._settings = s3_settings_of(connection.login, connection.password, extra)
        return self._settings

    def __repr__(self) -> str:
        return f"AwsConnection({self.aws_conn_id!r})"
