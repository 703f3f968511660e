"""A cleared run re-reads and re-writes exactly what its first try did (pinned ranges), for the
file sink and the exactly-once topic sink, and its commit never moves the group backwards.

``dag.test()`` with the same ``run_after`` reuses the run id (``manual__<run_after>``),
replacing the earlier run and its XCom: what a clear of the whole run does."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pendulum
import pytest

from tests.support.dag_data import ranges_of, rows
from tools.kafka_records import consume_all, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]

L1 = pendulum.datetime(2026, 1, 1, 1, tz="UTC")
L2 = pendulum.datetime(2026, 1, 1, 2, tz="UTC")


def test_a_cleared_incremental_run_rewrites_its_own_slice(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], spark: Any,
        group_offsets: Any, tmp_path: Path) -> None:
    topic = new_topic(partitions=2)
    now = int(time.time() * 1000)
    produce(kafka_config, topic, [(i % 2, None, f"a{i}".encode(), now) for i in range(5)])
    group = f"g-{topic}"
    conf = {"topics": topic, "output_root": str(tmp_path / "out"), "group_id": group}

    first = run_dag("kafka_incremental_committed", logical_date=L1, conf=conf, run_after=L1)
    assert first.state == "success", first.errors
    assert ranges_of(first.xcom["resolve_offsets"]) == [(topic, 0, 0, 3), (topic, 1, 0, 2)]
    folder = Path(first.xcom["ingest"]["output"]["path"])
    first_rows = rows(spark, folder)
    assert len(first_rows) == 5

    produce(kafka_config, topic, [(i % 2, None, f"b{i}".encode(), now) for i in range(4)])
    second = run_dag("kafka_incremental_committed", logical_date=L2, conf=conf, run_after=L2)
    assert second.state == "success", second.errors
    assert ranges_of(second.xcom["resolve_offsets"]) == [(topic, 0, 3, 5), (topic, 1, 2, 4)]
    assert group_offsets(group, topic, 2) == {0: 5, 1: 4}

    cleared = run_dag("kafka_incremental_committed", logical_date=L1, conf=conf, run_after=L1)
    assert cleared.state == "success", cleared.errors
    assert cleared.xcom["resolve_offsets"] == first.xcom["resolve_offsets"]
    assert Path(cleared.xcom["ingest"]["output"]["path"]) == folder
    assert rows(spark, folder) == first_rows
    # The old run's commit is a no-op: the group stays where the newer run left it.
    assert cleared.xcom["commit_offsets"]["offsets"] == []
    assert cleared.xcom["commit_offsets"]["unchanged"] == [
        {"topic": topic, "partition": 0, "offset": 5},
        {"topic": topic, "partition": 1, "offset": 4}]
    assert group_offsets(group, topic, 2) == {0: 5, 1: 4}

    # Re-resolving is an explicit choice (the Param is read from the run's conf).
    def re_resolve(dag: Any) -> None:
        dag.get_task("resolve_offsets").re_resolve = True

    again = run_dag("kafka_incremental_committed", logical_date=L1, conf=conf, edit=re_resolve,
                    run_after=L1)
    assert again.state == "success", again.errors
    assert ranges_of(again.xcom["resolve_offsets"]) == [(topic, 0, 5, 5), (topic, 1, 4, 4)]


def test_a_cleared_exactly_once_run_writes_nothing_twice(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any],
        ledger_ready: None) -> None:  # noqa: F811
    source, sink = new_topic(partitions=2), new_topic(partitions=3)
    now = int(time.time() * 1000)
    batch = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), now) for i in range(30)]
    produce(kafka_config, source, batch)
    conf = {"topics": source, "output_topic": sink, "group_id": f"g-{source}"}

    first = run_dag("kafka_to_kafka_exactly_once", logical_date=L1, conf=conf, run_after=L1)
    assert first.state == "success", first.errors
    assert first.xcom["transform_and_write"]["output"]["records_written"] == 30
    later = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), now) for i in range(30, 40)]
    produce(kafka_config, source, later)

    cleared = run_dag("kafka_to_kafka_exactly_once", logical_date=L1, conf=conf, run_after=L1)
    assert cleared.state == "success", cleared.errors
    assert cleared.xcom["resolve_offsets"] == first.xcom["resolve_offsets"]
    output = cleared.xcom["transform_and_write"]["output"]
    assert output["write_id"] == first.xcom["transform_and_write"]["output"]["write_id"]
    assert output["records_written"] == 0

    second = run_dag("kafka_to_kafka_exactly_once", logical_date=L2, conf=conf, run_after=L2)
    assert second.state == "success", second.errors
    assert second.xcom["transform_and_write"]["output"]["records_written"] == 10

    written = consume_all(kafka_config, sink, 3, isolation_level="read_committed")
    assert Counter(key for _p, _o, key, _v, _ts in written) == Counter(
        key for _p, key, _v, _ts in batch + later)


def test_a_run_recreated_with_other_topics_is_refused_not_fed_its_old_slice(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    first_topic, other_topic = new_topic(partitions=1), new_topic(partitions=1)
    now = int(time.time() * 1000)
    produce(kafka_config, first_topic, [(0, None, b"old", now)])
    produce(kafka_config, other_topic, [(0, None, b"new", now)])
    conf = {"topics": first_topic, "start": "earliest", "stop": "latest",
            "output_path": str(tmp_path / "out")}
    first = run_dag("kafka_adhoc", logical_date=L1, conf=conf, run_after=L1)
    assert first.state == "success", first.errors

    # The same run id, created again with another topic: its pin answers the old request.
    output = tmp_path / "other"
    again = run_dag("kafka_adhoc", logical_date=L1, conf={**conf, "topics": other_topic,
                                         "output_path": str(output)}, run_after=L1)
    assert again.state == "failed"
    assert again.task_states == {"resolve_offsets": "failed", "ingest": "upstream_failed"}
    assert (f"subscription 'topics:{first_topic}' -> 'topics:{other_topic}'"
            in again.errors["resolve_offsets"])
    assert not output.exists()

    def re_resolve(dag: Any) -> None:
        dag.get_task("resolve_offsets").re_resolve = True

    resolved = run_dag("kafka_adhoc", logical_date=L1, conf={**conf, "topics": other_topic,
                                            "output_path": str(output)}, edit=re_resolve,
                       run_after=L1)
    assert resolved.state == "success", resolved.errors
    assert ranges_of(resolved.xcom["resolve_offsets"]) == [(other_topic, 0, 0, 1)]
