"""The batches a write task hands the native producer: a batch in which no row has a header,
as Spark 4.1 sends it, is produced (issue 43; on a real Spark:
``tests/support/kafka_sink_ingest.py``)."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_kafka_spark.spark.write.producer import new_producer, produce_batches

# Bytes a reader past an empty buffer would take for an offset (1: past the empty values).
_PAST_THE_END = pa.py_buffer(b"\x01\x00\x00\x00" * 2)


def _without_offsets(type_: pa.DataType) -> pa.Array:
    """A zero-length string or binary array with an empty offsets buffer, as Spark 4.1's Arrow
    (Java 18) sends one (pyarrow takes it; the C Data Interface wants one offset)."""
    empty = _PAST_THE_END.slice(0, 0)
    return pa.Array.from_buffers(type_, 0, [None, empty, empty])


def test_a_batch_whose_rows_have_no_header_is_produced_without_reading_past_a_buffer() -> None:
    entries = pa.StructArray.from_arrays(
        [_without_offsets(pa.string()), _without_offsets(pa.binary())], names=["key", "value"])
    headers = pa.ListArray.from_arrays(pa.array([0, 0, 0], pa.int32()), entries,
                                       mask=pa.array([False, True]))  # empty, null
    headers.validate(full=True)
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"a", b"b"]), "headers": headers})
    # No broker: the records wait in the producer's queue.
    producer = new_producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0}, "none")

    assert produce_batches(producer, [batch], "out", 0) == (2, {"out"})
