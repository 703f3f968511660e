"""The Spark hook: an optional Airflow connection -> the settings of a SparkSession.

* no connection (``spark_conn_id=None``): a local session, master ``local[*]`` (configurable);
* a ``spark`` connection: its host is the master URL (``spark://host``, ``yarn``,
  ``k8s://https://host``, ``local[4]``; the port, if set, is appended) and its extra JSON
  keys that start with ``spark.`` are Spark conf;
* a ``spark_connect`` connection (the fields of the Apache Spark provider's connection of
  that type): a Spark Connect remote session ``sc://host:port/;user_id=...;token=...;
  use_ssl=...`` (login -> ``user_id``, password -> ``token``, extra ``use_ssl``).

The session itself is built by ``airflow_provider_kafka_spark.spark.session`` (the one
place that builds a SparkSession); this hook only reads the connection. pyspark is imported
only when a session is asked for.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_provider_kafka_spark.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"


class SparkHook(BaseHook):
    """Gives the SparkSession a task runs on.

    :param spark_conn_id: a ``spark`` or ``spark_connect`` connection, or ``None`` for a local
        session.
    :param master: the master URL when there is no connection (default ``local[*]``).
    :param spark_conf: extra Spark conf; it wins over the connection's extra.
    :param app_name: the Spark application name.
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    hook_name = "Spark session"

    def __init__(self, spark_conn_id: str | None = None, *, master: str = DEFAULT_MASTER,
                 spark_conf: dict[str, Any] | None = None,
                 app_name: str = "airflow-provider-kafka-spark") -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.app_name = app_name

    def session_settings(self) -> dict[str, Any]:
        """``{"master": ..., "remote": ..., "conf": {...}}``: exactly one of master/remote set."""
        settings: dict[str, Any] = {"master": self.master, "remote": None, "conf": {}}
        if self.spark_conn_id is not None:
            conn = self.get_connection(self.spark_conn_id)
            if conn.conn_type == "spark_connect":
                settings.update(master=None, remote=_connect_url(self.spark_conn_id, conn))
            elif conn.conn_type == "spark":
                settings.update(master=_master_url(self.spark_conn_id, conn),
                                conf=_spark_conf(self.spark_conn_id, conn.extra_dejson))
            else:
                raise ConfigurationError(
                    f"Airflow connection {self.spark_conn_id!r} has type {conn.conn_type!r}; "
                    "use a 'spark' connection (master URL) or a 'spark_connect' one (sc://)."
                )
        settings["conf"].update({str(k): str(v) for k, v in self.spark_conf.items()})
        return settings

    def get_conn(self) -> SparkSession:
        """The SparkSession. As with ``getOrCreate()``, a session already running in this
        process is returned: a classic one as it is, and on Spark Connect the process's
        Connect session whatever its URL (one task process, one Connect server)."""
        from airflow_provider_kafka_spark.spark.session import spark_session

        settings = self.session_settings()
        if settings["remote"]:
            return spark_session(remote=settings["remote"], conf=settings["conf"],
                                 app_name=self.app_name)
        return spark_session(master=settings["master"], conf=settings["conf"],
                             app_name=self.app_name)


def _master_url(conn_id: str, conn: Any) -> str:
    host = (conn.host or "").strip()
    if not host:
        raise ConfigurationError(
            f"Spark connection {conn_id!r} has no host; set it to the master URL "
            "(spark://host, yarn, k8s://https://host or local[*])."
        )
    return f"{host}:{conn.port}" if conn.port else host


def _spark_conf(conn_id: str, extra: dict[str, Any]) -> dict[str, str]:
    ignored = sorted(k for k in extra if not str(k).startswith("spark."))
    if ignored:
        log.warning(
            "Spark connection %r: extra keys %s are not Spark conf (no 'spark.' prefix) and are "
            "ignored.", conn_id, ignored,
        )
    return {str(k): str(v) for k, v in extra.items() if str(k).startswith("spark.")}


def _connect_url(conn_id: str, conn: Any) -> str:
    """The Spark Connect URL of a ``spark_connect`` connection, with the fields of the Apache
    Spark provider's connection of that type: ``sc://<host>[:<port>]/;user_id=<login>;
    token=<password>;use_ssl=<extra use_ssl>`` (each parameter only when set; values
    percent-encoded, so a token may hold ``/``, ``;`` or ``=``; no port: the client's default,
    15002).

    A token is only ever sent over a secure channel: pyspark's client uses TLS when the URL
    has a token (gRPC local credentials when the host is literally ``localhost``), whatever
    ``use_ssl`` says. So ``use_ssl`` false with a token is refused here rather than failing in
    a TLS handshake later.

    Raises:
        ConfigurationError: no host, a host with a path, a ``use_ssl`` that is not a boolean,
            extra keys other than ``use_ssl``, or a token with ``use_ssl`` false on a host
            other than ``localhost``.
    """
    what = f"Spark Connect connection {conn_id!r}"
    host = (conn.host or "").strip()
    if "://" not in host:
        host = f"sc://{host}"
    parsed = urlsplit(host)
    if not parsed.hostname:
        raise ConfigurationError(f"{what} has no host; set it to the Connect server's host name "
                                 "(e.g. spark-connect.example.com, or sc://host).")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        raise ConfigurationError(f"{what} has a path in its host ({conn.host!r}); set only the "
                                 "host name, and the port in the port field.")
    unknown = sorted(str(k) for k in conn.extra_dejson if k != "use_ssl")
    if unknown:
        raise ConfigurationError(f"{what} has extra keys {unknown}; a spark_connect "
                                 "connection's extra takes only 'use_ssl' (true or false). Put "
                                 "Spark conf in the operator's spark_conf=.")
    use_ssl = _use_ssl(what, conn.extra_dejson.get("use_ssl"))
    if conn.password and use_ssl is False and parsed.hostname != "localhost":
        raise ConfigurationError(
            f"{what} has a password (the token) and use_ssl false: the Spark Connect client "
            "always uses TLS to send a token (gRPC local credentials only to the host "
            "'localhost'). Set use_ssl to true and serve Connect over TLS (e.g. behind a TLS "
            "proxy), or remove the token."
        )
    name = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    netloc = parsed.netloc if not conn.port else f"{name}:{conn.port}"
    params = []
    if conn.login:
        params.append(f"user_id={quote(conn.login, safe='')}")
    if conn.password:
        mask_secret(conn.password)
        params.append(f"token={quote(conn.password, safe='')}")
    if use_ssl is not None:
        params.append(f"use_ssl={str(use_ssl).lower()}")
    return f"sc://{netloc}/" + "".join(f";{p}" for p in params)


def _use_ssl(what: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigurationError(f"{what}: extra use_ssl={value!r} is not a boolean; pass true or "
                             "false.")
