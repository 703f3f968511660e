"""A task's final flush is bounded: records still queued after it are a DeliveryError."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_kafka_spark.errors import DeliveryError
from airflow_provider_kafka_spark.spark.write import task
from airflow_provider_kafka_spark.spark.write.plan import TaskPlan
from airflow_provider_kafka_spark.spark.write.task import write_partition


class _StuckProducer:
    """A producer whose records are never delivered (every broker gone)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.queued = 0
        self.flush_timeouts: list[float] = []

    def produce_batch(self, batch: pa.RecordBatch, topic: str | None) -> int:
        self.queued += batch.num_rows
        return batch.num_rows

    def flush(self, timeout: float) -> int:
        self.flush_timeouts.append(timeout)
        time.sleep(timeout)
        return self.queued

    def delivery_failures(self) -> tuple[int, None]:
        return 0, None


@pytest.mark.parametrize("guarantee", ["none", "at_least_once"])
def test_records_never_delivered_fail_the_task_after_a_bounded_flush(
    monkeypatch: pytest.MonkeyPatch, guarantee: str
) -> None:
    producers: list[_StuckProducer] = []

    def stuck(config: dict[str, Any], guarantee: str) -> _StuckProducer:
        producers.append(_StuckProducer(config))
        return producers[-1]

    monkeypatch.setattr(task, "new_producer", stuck)
    monkeypatch.setattr(task, "FLUSH_GRACE_S", 0.3)
    plan = TaskPlan(kafka_config={"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 200},
                    guarantee=guarantee, topic="out")  # type: ignore[arg-type]
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"a", b"b", b"c"])})

    with pytest.raises(DeliveryError, match=r"task 4: 3 of 3 records were not delivered within "
                                            r"0\.5s \(message.timeout.ms=200\).*brokers"):
        write_partition(plan, 4, [batch])
    assert sum(producers[0].flush_timeouts) == pytest.approx(0.5, abs=0.2)
