"""``kafka_incremental_committed`` and ``kafka_backfill_by_time`` with ``dag.test()``: committed
offsets carry runs forward without gap or overlap (new partitions from earliest), and
consecutive time intervals tile every partition."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pendulum
import pytest
from confluent_kafka.admin import NewPartitions

from tests.support import airflow_env
from tests.support.dag_data import ranges_of, rows
from tools.kafka_records import MINUTE_MS, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_incremental_runs_continue_from_the_committed_offsets(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any,
        spark: Any, group_offsets: Any, tmp_path: Path) -> None:
    topic = new_topic(partitions=2)
    now = int(pendulum.now("UTC").timestamp() * 1000)
    batch_a = [(0, b"a", b"a0", now), (0, b"a", b"a1", now), (0, b"a", b"a2", now),
               (1, b"a", b"a3", now), (1, b"a", b"a4", now)]
    produce(kafka_config, topic, batch_a)
    group = f"g-{topic}"
    conf = {"topics": topic, "output_root": str(tmp_path / "out"), "group_id": group}

    first = run_dag("kafka_incremental_committed", logical_date=None, conf=conf)
    assert first.state == "success", first.errors
    assert first.xcom["wait_for_topics"] == [[topic, 0], [topic, 1]]
    assert ranges_of(first.xcom["resolve_offsets"]) == [(topic, 0, 0, 3), (topic, 1, 0, 2)]
    first_folder = Path(first.xcom["ingest"]["output"]["path"])
    assert rows(spark, first_folder) == [(0, 0, b"a", b"a0"), (0, 1, b"a", b"a1"),
                                         (0, 2, b"a", b"a2"), (1, 0, b"a", b"a3"),
                                         (1, 1, b"a", b"a4")]
    assert group_offsets(group, topic, 2) == {0: 3, 1: 2}

    # A partition is added and written to; partition 1 gets nothing new.
    kafka_admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    produce(kafka_config, topic, [(0, b"b", b"b0", now), (0, b"b", b"b1", now),
                                  (2, b"b", b"b2", now), (2, b"b", b"b3", now)])
    second = run_dag("kafka_incremental_committed", logical_date=None, conf=conf)
    assert second.state == "success", second.errors
    assert ranges_of(second.xcom["resolve_offsets"]) == [
        (topic, 0, 3, 5), (topic, 1, 2, 2), (topic, 2, 0, 2)]
    second_folder = Path(second.xcom["ingest"]["output"]["path"])
    assert second_folder != first_folder
    assert rows(spark, second_folder) == [(0, 3, b"b", b"b0"), (0, 4, b"b", b"b1"),
                                          (2, 0, b"b", b"b2"), (2, 1, b"b", b"b3")]
    assert len(rows(spark, first_folder)) == 5
    assert group_offsets(group, topic, 3) == {0: 5, 1: 2, 2: 2}


def test_backfill_intervals_tile_without_gap_or_overlap(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], spark: Any,
        tmp_path: Path) -> None:
    topic = new_topic(partitions=3)
    end = pendulum.now("UTC").start_of("hour").subtract(hours=1)
    bounds = [end.subtract(hours=3 - k) for k in range(4)]  # T0 < T1 < T2 < T3
    ms = [int(t.timestamp() * 1000) for t in bounds]
    # Records just before, at and just after every boundary, on every partition.
    stamps = sorted({m + d for m in ms for d in (-MINUTE_MS, -1, 0, 1)}
                    | {ms[0] + k * 17 * MINUTE_MS for k in range(11)})
    records = [(p, None, f"{p}@{ts}".encode(), ts) for p in range(3) for ts in stamps
               if (ts // MINUTE_MS + p) % 4]  # partitions get different subsets
    produce(kafka_config, topic, records)
    conf = {"topics": topic, "output_root": str(tmp_path / "out")}

    outputs, ranges = [], []
    for k in (1, 2, 3):
        outcome = run_dag("kafka_backfill_by_time", logical_date=bounds[k], conf=conf)
        assert outcome.state == "success", outcome.errors
        assert outcome.data_interval == (bounds[k - 1], bounds[k])
        ranges.append(ranges_of(outcome.xcom["resolve_offsets"]))
        folder = tmp_path / "out" / bounds[k - 1].strftime("%Y-%m-%dT%H")
        outputs.append([(p, bytes(v)) for p, _o, _k, v in rows(spark, folder)])
        expected = sorted((p, v) for p, _key, v, ts in records if ms[k - 1] <= ts < ms[k])
        assert sorted(outputs[-1]) == expected

    for before, after in zip(ranges, ranges[1:], strict=False):
        assert [r[3] for r in before] == [r[2] for r in after]  # stop k == start k+1
    everything = [row for output in outputs for row in output]
    assert len(everything) == len(set(everything))
    assert sorted(everything) == sorted(
        (p, v) for p, _key, v, ts in records if ms[0] <= ts < ms[3])


def test_every_example_dag_parses_without_importing_spark() -> None:
    code = ("import sys; from airflow.dag_processing.dagbag import DagBag; "
            f"bag = DagBag({str(airflow_env.DAGS_FOLDER)!r}); "
            "print(sorted(bag.import_errors), sorted(bag.dag_ids), 'pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip().splitlines()[-1]
    assert out == ("[] ['kafka_adhoc', 'kafka_avro_to_parquet', 'kafka_backfill_by_time', "
                   "'kafka_daily_rollup', 'kafka_hourly_ingest', 'kafka_hourly_on_data', "
                   "'kafka_hourly_partitioned', "
                   "'kafka_hourly_report', 'kafka_hourly_to_iceberg', 'kafka_incremental_committed', "
                   "'kafka_to_kafka_exactly_once', 'kafka_window_when_complete'] False")
