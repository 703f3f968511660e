"""``kafka_to_kafka_exactly_once`` with ``dag.test()``: every input record appears once in the
output topic (read_committed), transformed, and the input group moves after the write."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.dag_data import ranges_of
from tools.kafka_records import consume_all, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_kafka_to_kafka_exactly_once_across_two_runs(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], group_offsets: Any,
        ledger_ready: None) -> None:
    source, sink = new_topic(partitions=2), new_topic(partitions=3)
    now = int(time.time() * 1000)
    first_batch = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), now) for i in range(30)]
    produce(kafka_config, source, first_batch)
    group = f"g-{source}"
    conf = {"topics": source, "output_topic": sink, "group_id": group}

    first = run_dag("kafka_to_kafka_exactly_once", logical_date=None, conf=conf)
    assert first.state == "success", first.errors
    assert ranges_of(first.xcom["resolve_offsets"]) == [(source, 0, 0, 15), (source, 1, 0, 15)]
    output = first.xcom["transform_and_write"]["output"]
    assert output["topic"] == sink and output["delivery_guarantee"] == "exactly_once"
    assert output["records_written"] == 30
    assert output["write_id"].startswith("kafka_to_kafka_exactly_once/transform_and_write/")
    assert group_offsets(group, source, 2) == {0: 15, 1: 15}

    second_batch = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), now) for i in range(30, 40)]
    produce(kafka_config, source, second_batch)
    second = run_dag("kafka_to_kafka_exactly_once", logical_date=None, conf=conf)
    assert second.state == "success", second.errors
    assert ranges_of(second.xcom["resolve_offsets"]) == [(source, 0, 15, 20), (source, 1, 15, 20)]
    assert group_offsets(group, source, 2) == {0: 20, 1: 20}

    written = consume_all(kafka_config, sink, 3, isolation_level="read_committed")
    assert sorted(value for _p, _o, _k, value, _ts in written) == sorted(
        value for _p, _k, value, _ts in first_batch + second_batch)
    assert {(key, value) for _p, _o, key, value, _ts in written} == {
        (key, value) for _p, key, value, _ts in first_batch + second_batch}
