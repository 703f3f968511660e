"""What the operators read and write, as OpenLineage datasets and Airflow assets name it,
free of OpenLineage's classes (:class:`Lineage`); the OpenLineage provider's side is
:mod:`~airflow_provider_kafka_spark.operators.lineage_facets`.

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
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_kafka_spark.offsets import OffsetRanges

__all__ = ["OFFSET_RANGES_FACET", "Lineage", "dataset_of_path", "kafka_authority",
           "output_asset_uri"]

OFFSET_RANGES_FACET = "kafkaOffsetRanges"
"""The key of the input facet carrying a topic's resolved offset ranges."""
OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs"}
"""URL schemes whose OpenLineage name is the object key (no leading slash), with the
namespace scheme they map to."""


def kafka_authority(kafka_config: Mapping[str, Any]) -> str:
    """``host:port`` of the first of ``bootstrap.servers`` (a ``PROTOCOL://`` prefix dropped)."""
    first = str(kafka_config.get("bootstrap.servers", "")).split(",")[0].strip()
    return first.split("://", 1)[-1]


def dataset_of_path(path: str) -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a folder given as a local path or a URL."""
    parts = urlsplit(path)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a local path (or a Windows drive letter)
        local = parts.path if scheme == "file" else path
        return "file", os.path.normpath(os.path.abspath(local))
    if scheme in OBJECT_STORES:
        return f"{OBJECT_STORES[scheme]}://{parts.netloc}", parts.path.lstrip("/")
    return f"{scheme}://{parts.netloc}", parts.path or "/"


def output_asset_uri(*, output_path: str | None = None, output_topic: str | None = None,
                     kafka_config: Mapping[str, Any] | None = None) -> str:
    """The Airflow asset URI of an ingest's output: ``file:///abs/path``, ``s3://bucket/key``
    (also for ``s3a://``)... for files; ``kafka://host:port/topic`` (the Kafka provider's form)
    for a topic, the host from ``kafka_config``."""
    if output_topic is not None:
        return f"kafka://{kafka_authority(kafka_config or {})}/{output_topic}"
    assert output_path is not None
    namespace, name = dataset_of_path(output_path)
    if namespace == "file":
        return f"file://{name}"
    return f"{namespace}/{name}" if namespace.split("://", 1)[0] in OBJECT_STORES.values() \
        else f"{namespace}{name}"


@dataclass(frozen=True)
class Lineage:
    """What an operator reads and writes, in OpenLineage's terms but free of its classes.

    :param kafka_authority: ``host:port`` of the input cluster (the inputs' namespace).
    :param topics: the input topics, when the ranges are not known yet.
    :param ranges: the resolved ranges, when known: the input topics, each with its
        ``kafkaOffsetRanges`` facet.
    :param records: records read per topic, when the task completed (``inputStatistics``).
    :param output: the output ``(namespace, name)``, if the operator writes one.
    :param output_records: records written, when the task completed (``outputStatistics``).
    """

    kafka_authority: str
    topics: tuple[str, ...] = ()
    ranges: OffsetRanges | None = None
    records: Mapping[str, int] | None = None
    output: tuple[str, str] | None = None
    output_records: int | None = None
