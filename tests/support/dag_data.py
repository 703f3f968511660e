"""The hours, records and readers of the example DAG tests (``tests/dags``): three whole hours
in the past, records before, in and after them, and the rows a run wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum

from tools.kafka_records import MINUTE_MS, produce

NOW = pendulum.now("UTC")
# Three whole hours in the past: intervals I1 = [T0, T1) and I2 = [T1, T2).
T1 = NOW.start_of("hour").subtract(hours=2)
T0, T2 = T1.subtract(hours=1), T1.add(hours=1)
MS0, MS1, MS2 = (int(t.timestamp() * 1000) for t in (T0, T1, T2))


def arrange(kafka_config: dict[str, Any], topic: str) -> dict[str, list[tuple]]:
    """Produce records before I1, in I1, in I2 and after I2; return them by interval as
    ``(partition, offset, key, value)``. Partition 2 only has old records: it is idle."""
    per_partition = {
        0: [MS0 - 30 * MINUTE_MS, MS0 - 20 * MINUTE_MS, MS0 - 1]
        + [MS0 + i * 10 * MINUTE_MS for i in range(5)] + [MS1, MS2 - 1, MS2 + 5 * MINUTE_MS],
        1: [MS0 + i * 15 * MINUTE_MS for i in range(4)] + [MS1 + 1, MS1 + 2, MS1 + 3]
        + [MS2 + MINUTE_MS],
        2: [MS0 - 20 * MINUTE_MS, MS0 - 10 * MINUTE_MS],
    }
    records, by_interval = [], {"before": [], "I1": [], "I2": [], "after": []}
    for partition, stamps in per_partition.items():
        for offset, ts in enumerate(stamps):
            key, value = f"k{partition}".encode(), f"v{partition}-{offset}".encode()
            records.append((partition, key, value, ts))
            where = ("before" if ts < MS0 else "I1" if ts < MS1 else "I2" if ts < MS2
                     else "after")
            by_interval[where].append((partition, offset, key, value))
    produce(kafka_config, topic, records)
    return by_interval


def rows(spark: Any, path: Path, file_format: str = "parquet") -> list[tuple]:
    df = spark.read.format(file_format).load(str(path))
    return sorted((r["partition"], r["offset"], r["key"] and bytes(r["key"]), bytes(r["value"]))
                  for r in df.select("partition", "offset", "key", "value").collect())


def ranges_of(xcom: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    return [(r["topic"], r["partition"], r["start"], r["stop"]) for r in xcom["ranges"]]
