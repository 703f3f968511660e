"""Exact records in the real test broker, and read back: ``tools/kafka_records.py`` (the tools
use it too)."""

from __future__ import annotations

from tools.kafka_records import (
    MINUTE_MS,
    Record,
    consume_all,
    high_watermarks,
    produce,
    read_committed,
    transactional_producer,
    wait_for_markers,
)

__all__ = ["MINUTE_MS", "Record", "consume_all", "high_watermarks", "produce", "read_committed",
           "transactional_producer", "wait_for_markers"]
