"""The accumulator param that brings offsets skipped on executors back to the driver."""

from __future__ import annotations

from airflow_provider_kafka_spark.spark.read.summary import SplitLosses


def test_a_split_counted_twice_counts_once_with_its_larger_count() -> None:
    param = SplitLosses()
    total = param.zero({})
    total = param.addInPlace(total, {("t", 0, 0): 5, ("t", 0, 5): 2})
    total = param.addInPlace(total, {("t", 0, 5): 5})  # the task of split 5 ran again
    total = param.addInPlace(total, {("t", 0, 0): 3, ("t", 1, 0): 1})
    assert total == {("t", 0, 0): 5, ("t", 0, 5): 5, ("t", 1, 0): 1}
    assert param.zero(total) == {}
