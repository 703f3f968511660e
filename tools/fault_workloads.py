"""Reads and writes slow enough for a broker to fail in the middle of them (the fault tests,
through ``tests/support/faults.py``, and ``tools/fault_soak.py``)."""

from __future__ import annotations

import time
from typing import Any

from tools.kafka_records import produce
from tools.write_kafka_rows import partition_batches

# Each fetch returns about one producer batch (50 records) and waits 100 ms: a read of 3,000
# records per partition takes seconds, long enough to lose a leader in the middle of it.
SLOW_FETCH = {"fetch.wait.max.ms": 100, "fetch.min.bytes": 1_000_000,
              "max.partition.fetch.bytes": 1, "fetch.max.bytes": 1_000_000}


def fill(config: dict[str, Any], topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` records per partition, in producer batches of 50."""
    now = int(time.time() * 1000)
    produce({**config, "batch.num.messages": 50, "linger.ms": 50}, topic,
            [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), now)
             for p in range(partitions) for i in range(per_partition)])


def rows_of(df: Any) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())


def slow_input(spark: Any, partitions: int, rows: int) -> Any:
    """``partitions`` Spark partitions of ``rows`` rows each (keys ``k<index>-<row>``), arriving
    in batches of 100 every 0.2 s, so that a write's transactions stay open for seconds."""
    import pyarrow as pa

    def rows_of_partition(batches: Any) -> Any:
        for batch in batches:
            for index in pa.Table.from_batches([batch]).column("id").to_pylist():
                yield from partition_batches(index, rows, batch_rows=100, pause_s=0.2)

    return (spark.range(partitions, numPartitions=partitions)
            .mapInArrow(rows_of_partition, "key binary, value binary"))
