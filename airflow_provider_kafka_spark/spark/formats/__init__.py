"""Schema Registry formats (Avro, Protobuf, JSON Schema) for ``decode_kafka`` and
``write_kafka``, with confluent-kafka's own serializers and deserializers.

The Spark type of each format's schema is documented in its module: :mod:`.avro`,
:mod:`.protobuf`, :mod:`.json_schema`.
"""

from airflow_provider_kafka_spark.spark.formats.codec import (
    FieldCodec,
    decode_batches,
    decoded_columns,
    encode_batches,
    spark_type_of,
)
from airflow_provider_kafka_spark.spark.formats.registry import (
    ResolvedSchema,
    Subject,
    frozen_config,
    resolve_schema,
)

__all__ = [
    "FieldCodec",
    "ResolvedSchema",
    "Subject",
    "decode_batches",
    "decoded_columns",
    "encode_batches",
    "frozen_config",
    "resolve_schema",
    "spark_type_of",
]
