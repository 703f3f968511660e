"""The write_kafka tests' deterministic input rows and read_committed reader:
``tools/write_kafka_rows.py`` (the kill points, the fault soak and the benchmark use it too)."""

from __future__ import annotations

from tools.write_kafka_rows import (
    Record,
    expected_keys,
    partition_batches,
    read_committed,
    row_key,
    row_value,
)

__all__ = ["Record", "expected_keys", "partition_batches", "read_committed", "row_key",
           "row_value"]
