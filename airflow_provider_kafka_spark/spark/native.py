"""The one door to the native Kafka <-> Arrow module (``_native``, Rust, built from
``native/`` by maturin): the split reader, the batch producer and the value decoders (Avro
in the Schema Registry wire format, JSON).

Nothing else in the package imports ``_native``. A package imported from a source checkout
where the module was never built (``pip install -e .`` builds it in place) fails here, once,
with what to run instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

try:
    from airflow_provider_kafka_spark._native import (
        AvroDecoder,
        BatchProducer,
        SliceReader,
        librdkafka_version,
    )
except ModuleNotFoundError as exc:  # pragma: no cover - only without a build
    if exc.name != "airflow_provider_kafka_spark._native":
        raise
    raise ModuleNotFoundError(
        "airflow_provider_kafka_spark._native (the native Kafka reader and writer) is not "
        "built in this copy of the package: install it with pip (a wheel, or `pip install -e .` "
        "in a checkout, which builds native/ with Rust's cargo), and make sure the Python "
        "process (and Spark's Python workers) import that copy.", name=exc.name) from exc

__all__ = ["AvroDecoder", "BatchProducer", "SliceReader", "librdkafka_version"]
