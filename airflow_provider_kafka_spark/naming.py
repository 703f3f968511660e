"""How an output or a topic is named: as an OpenLineage dataset ``(namespace, name)`` and as an
Airflow asset URI. No Airflow, no Spark, no OpenLineage import: each sink names its own output
with these (:meth:`~airflow_provider_kafka_spark.sinks.Sink.dataset`), and the operators name
their topics.

Naming follows the OpenLineage naming spec: a topic is namespace ``kafka://<host:port>`` (the
first of ``bootstrap.servers``), name ``<topic>``; a local folder is namespace ``file``, name
``<absolute path>``; ``s3://``/``s3a://`` and ``gs://`` folders are namespace
``<scheme>://<bucket>``, name ``<key>``; other URLs (``hdfs://``, ``abfss://``...) are namespace
``<scheme>://<authority>``, name ``<path>``. Assets use the same locations as URIs:
``kafka://<host:port>/<topic>``, ``file://<absolute path>``, ``s3://<bucket>/<key>``...
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Dataset", "asset_uri", "dataset_of_path", "dataset_of_topic", "kafka_authority"]

Dataset = tuple[str, str]
"""An OpenLineage dataset: ``(namespace, name)``."""

OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs"}
"""URL schemes whose OpenLineage name is the object key (no leading slash), with the
namespace scheme they map to."""


def kafka_authority(kafka_config: Mapping[str, Any]) -> str:
    """``host:port`` of the first of ``bootstrap.servers`` (a ``PROTOCOL://`` prefix dropped)."""
    first = str(kafka_config.get("bootstrap.servers", "")).split(",")[0].strip()
    return first.split("://", 1)[-1]


def dataset_of_topic(kafka_config: Mapping[str, Any], topic: str) -> Dataset:
    """The dataset of ``topic`` on the cluster of ``kafka_config``."""
    return f"kafka://{kafka_authority(kafka_config)}", topic


def dataset_of_path(path: str) -> Dataset:
    """The dataset of a folder given as a local path or a URL."""
    parts = urlsplit(path)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a local path (or a Windows drive letter)
        local = parts.path if scheme == "file" else path
        return "file", os.path.normpath(os.path.abspath(local))
    if scheme in OBJECT_STORES:
        return f"{OBJECT_STORES[scheme]}://{parts.netloc}", parts.path.lstrip("/")
    return f"{scheme}://{parts.netloc}", parts.path or "/"


def asset_uri(dataset: Dataset) -> str:
    """The Airflow asset URI of ``dataset``: ``file:///abs/path``, ``s3://bucket/key`` (also for
    ``s3a://``), ``kafka://host:port/topic`` (the Kafka provider's form), ``hdfs://nn/path``."""
    namespace, name = dataset
    if namespace == "file":
        return f"file://{name}"
    if namespace.split("://", 1)[0] in (*OBJECT_STORES.values(), "kafka"):
        return f"{namespace}/{name}"
    return f"{namespace}{name}"
