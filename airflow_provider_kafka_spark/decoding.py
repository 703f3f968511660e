"""How an ingest decodes ``key`` and ``value`` (:class:`Decoding`): a value checked when it is
built, so a DAG file with a bad one fails to import. No Airflow and no Spark import: a DAG
file builds one without loading pyspark."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_kafka_spark.options import (
    DECODE_FORMATS,
    ON_CORRUPT,
    REGISTRY_FORMATS,
    bad_argument,
    check_choice,
)

__all__ = ["Decoding"]

RegistryConfig = Mapping[str, Any] | Callable[[], Mapping[str, Any]]
"""confluent-kafka's ``SchemaRegistryClient`` config, or a function returning it (called when
the ingest starts, e.g. ``SchemaRegistryConnection("schema_registry_default")``)."""


@dataclass(frozen=True)
class Decoding:
    """How ``ingest`` (and the ingest operator's ``decode=``) decodes ``key`` and ``value``
    before the transform: the options of
    :func:`~airflow_provider_kafka_spark.spark.decode_kafka` (see there), and what an
    undecodable record does.

    For a Schema Registry format (``avro``, ``protobuf``, ``json_schema``) the reader schema
    defaults to ``Subject('<topic>-key')`` / ``Subject('<topic>-value')`` when the ranges
    have one topic, and a subject's ``latest`` version is pinned when the ingest starts, so
    the check before the read and the read decode into the same schema.

    :param key_format: ``bytes`` (not decoded), ``string``, ``json``, ``avro``, ``protobuf``
        or ``json_schema``.
    :param value_format: likewise for ``value``.
    :param key_schema: ``json``: a DDL string or a ``StructType``; registry formats: the
        reader schema, a ``Subject(name, version)`` or the schema inline.
    :param value_schema: likewise for ``value``.
    :param schema_registry: the registry's client config, or a function returning it;
        required by the registry formats (and only used by them).
    :param on_corrupt: a record that cannot be decoded: ``fail`` (the ingest fails before
        anything is written, naming the first one's topic/partition/offset and the reason),
        ``skip`` (dropped, counted) or ``dead_letter`` (written, as read, with the reason, to
        the sink's dead-letter output: ``<path>/_dead_letter`` of a ``FileSink``, the
        ``dead_letter_topic`` of a ``KafkaSink``; a table has none).

    Raises:
        ConfigurationError: an unknown format or ``on_corrupt``, a registry format without a
            registry, a registry without a registry format, or nothing to decode.
    """

    key_format: str = "bytes"
    value_format: str = "bytes"
    key_schema: Any = None
    value_schema: Any = None
    schema_registry: RegistryConfig | None = None
    on_corrupt: str = "fail"

    def __post_init__(self) -> None:
        owner = "Decoding"
        check_choice(owner, "key_format", self.key_format, DECODE_FORMATS)
        check_choice(owner, "value_format", self.value_format, DECODE_FORMATS)
        check_choice(owner, "on_corrupt", self.on_corrupt, ON_CORRUPT)
        if not self.decodes:
            raise bad_argument(owner, "value_format", self.value_format,
                               "pass the format of the key or the value (e.g. "
                               "value_format='json'); to keep the bytes, pass no Decoding",
                               problem="decodes nothing")
        registry = [f for f in (self.key_format, self.value_format) if f in REGISTRY_FORMATS]
        given = self.schema_registry is not None
        if given and not (callable(self.schema_registry)
                          or isinstance(self.schema_registry, Mapping)):
            raise bad_argument(owner, "schema_registry", type(self.schema_registry).__name__,
                               "pass a SchemaRegistryClient config dict, a function returning "
                               "one (e.g. SchemaRegistryConnection('schema_registry_default'))")
        if registry and not given:
            raise bad_argument(owner, "schema_registry", None,
                               f"the format {registry[0]!r} needs a Schema Registry: pass its "
                               "client config, or SchemaRegistryConnection("
                               "'schema_registry_default') in a DAG", problem="is missing")
        if given and not registry:
            raise bad_argument(owner, "schema_registry", "...",
                               f"it is used only with key_format/value_format in "
                               f"{REGISTRY_FORMATS}; remove it", problem="is not used")

    def __repr__(self) -> str:  # never the registry's config: it may hold secrets
        shown = {"key_format": self.key_format, "value_format": self.value_format,
                 "key_schema": self.key_schema, "value_schema": self.value_schema,
                 "on_corrupt": self.on_corrupt}
        return "Decoding(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()
                                       if v is not None) + ")"

    @property
    def decodes(self) -> bool:
        """Whether anything is decoded (a format other than ``bytes``)."""
        return self.key_format != "bytes" or self.value_format != "bytes"

    def registry_config(self) -> Mapping[str, Any] | None:
        """The registry's client config (the function called, if one was given)."""
        registry = self.schema_registry
        return registry() if callable(registry) else registry
