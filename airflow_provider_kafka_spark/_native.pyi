"""The native Kafka <-> Arrow module (Rust, ``native/``): librdkafka built from source.

Private: imported only by ``spark/native.py``; ``spark/read/datasource.py`` reads with
:class:`SliceReader`, ``spark/write/transactions.py``
writes with :class:`BatchProducer`, ``spark/formats/fast.py`` decodes values with
:class:`AvroDecoder`. Configs are librdkafka settings as strings
(:func:`~airflow_provider_kafka_spark.offsets.config.native_settings`). librdkafka errors are
raised as ``confluent_kafka.KafkaException(KafkaError(...))``; a setting librdkafka does not
know or refuses is ``KafkaError._INVALID_ARG`` naming it.
"""

import pyarrow as pa

def librdkafka_version() -> str:
    """The version of the librdkafka built into this module, e.g. ``"2.10.0"``."""

class SliceReader:
    """One ``assign()``-ed consumer of the ``(topic, partition, start, stop)`` ranges (of
    distinct partitions), fetched together, each into a queue of its own; yields Arrow batches
    of ``schema`` (the ``kafka_bounded`` schema), each of one range, and never returns a record
    of a range at an offset ``>= stop``."""

    def __init__(self, config: dict[str, str], ranges: list[tuple[str, int, int, int]],
                 schema: pa.Schema) -> None: ...
    def __len__(self) -> int:
        """How many ranges the reader reads."""
    def fill(self, index: int, max_records: int, timeout_s: float
             ) -> tuple[pa.RecordBatch | None, int, tuple[int, str, int] | None]:
        """Up to ``max_records`` records of range ``index`` below its ``stop``, waiting at most
        ``timeout_s`` for the first: ``(batch or None, next offset or -1, event)``. The next
        offset is ``stop`` once a record at or beyond ``stop`` arrived; an event (end of
        partition, an error of the partition or of the consumer) ends the fill as
        ``(librdkafka error code, reason, offset)``."""
    def pause(self, index: int) -> None:
        """Stop fetching the partition of range ``index``."""
    def watermarks(self, index: int, timeout_s: float) -> tuple[int, int]:
        """The ``(low, high)`` watermarks of range ``index``'s partition, asked of its
        leader."""
    def take_errors(self) -> list[tuple[int, str]]:
        """``(code, reason)`` of the errors librdkafka reported through ``error_cb`` since
        the last call."""
    def close(self) -> None:
        """Leave the partitions and destroy the consumer."""

class BatchProducer:
    """A librdkafka producer fed with Arrow batches whose columns are ``value`` (binary) and
    optionally ``key`` (binary), ``topic`` (string), ``partition`` (int32; null: the
    partitioner chooses), ``timestamp`` (int64 epoch microseconds; null or 0: now) and
    ``headers`` (list of struct<key: string, value: binary>)."""

    def __init__(self, config: dict[str, str], delivery_reports: bool) -> None: ...
    def produce_batch(self, batch: pa.RecordBatch, topic: str | None) -> int:
        """Produce every row (to ``topic``, else each row's ``topic``); returns the row count.
        A full local queue is waited out; any other error raises
        ``KafkaException(KafkaError, row index)``."""
    def produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                partition: int = -1) -> None:
        """Produce one record."""
    def poll(self, timeout_s: float) -> int:
        """Serve delivery reports for up to ``timeout_s``."""
    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every record's acknowledgement; the number still
        queued."""
    def delivery_failures(self) -> tuple[int, tuple[int, str, str, int] | None]:
        """``(failed records, (code, reason, topic, partition) of the first failure)``."""
    def take_errors(self) -> list[tuple[int, str]]:
        """``(code, reason)`` of ``error_cb`` reports since the last call."""
    def init_transactions(self, timeout_s: float) -> None: ...
    def begin_transaction(self) -> None: ...
    def commit_transaction(self, timeout_s: float) -> None: ...
    def abort_transaction(self, timeout_s: float) -> None: ...

class AvroDecoder:
    """Avro values in the Schema Registry wire format (magic byte 0, a 4-byte big-endian
    schema id, the Avro body) decoded into a struct column of the reader schema, each writer
    schema (registered by id) resolved against it (added fields with defaults, removed fields,
    promotions). Bytes after a record's body are ignored, as confluent-kafka does."""

    def __init__(self, reader_schema: str) -> None:
        """``reader_schema``: the Avro reader schema's JSON text (a record); ``ValueError``
        when arrow-avro cannot read it."""
    @property
    def arrow_type(self) -> pa.DataType:
        """The decoded column's Arrow type (arrow-avro's: enums as dictionaries, timestamps
        in their Avro unit, ``time-*`` as time32/time64, ``fixed`` as fixed-size binary)."""
    def add_writer_schema(self, id: int, schema: str) -> str | None:
        """Register the writer schema of ``id``: None, or why it cannot be resolved against
        the reader schema (its records are then reported as ``unsupported``)."""
    def known_ids(self) -> list[int]:
        """The registered schema ids, sorted."""
    def decode(self, values: pa.Array
               ) -> tuple[pa.StructArray, list[tuple[int, str]], list[tuple[int, int]],
                          list[int]]:
        """``values`` (binary) decoded: ``(column, corrupt, unknown, unsupported)``, the
        column null where a value is null or in a list; ``corrupt`` ``(row, reason)`` (not
        wire format, truncated, not of its writer schema); ``unknown`` ``(row, schema id)``
        for ids never registered; ``unsupported`` the rows of ids registered as
        unsupported. A null value is in no list."""
