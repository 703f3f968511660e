"""Deferrable sensors in the real triggerer (``kafka_window_when_complete``): the partitions
sensor and the interval-complete sensor reach ``deferred``, hold no worker slot meanwhile (as
many runs as the LocalExecutor has slots wait, and another run still executes all its tasks),
and resume when the topic grows and when a record at the window's end arrives."""

from __future__ import annotations

import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.deployed import AirflowApi
from tools.airflow_stack import PARALLELISM
from tools.kafka_records import produce

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

DAG_ID = "kafka_window_when_complete"
TRIGGERS = "airflow_provider_kafka_spark.triggers.kafka"
STATE_TIMEOUT_S = 240.0


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def conf(topic: str, start: datetime, stop: datetime, output: Path) -> dict[str, Any]:
    return {"topics": topic, "min_partitions": 2, "start": f"timestamp:{start.isoformat()}",
            "stop": f"timestamp:{stop.isoformat()}", "output_path": str(output)}


def task(airflow: AirflowApi, run_id: str, task_id: str) -> dict[str, Any]:
    return dict(airflow.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/"
                                    f"{urllib.parse.quote(run_id, safe='')}/taskInstances/{task_id}"))


def wait_for(airflow: AirflowApi, run_id: str, task_id: str, state: str) -> dict[str, Any]:
    """The task instance once it is in ``state`` (and, if deferred, its trigger is picked up
    by the triggerer)."""
    deadline = time.monotonic() + STATE_TIMEOUT_S
    while True:
        ti = task(airflow, run_id, task_id)
        if ti["state"] == state and (state != "deferred" or (ti["trigger"] or {}).get("triggerer_id")):
            return ti
        assert ti["state"] not in ("failed", "upstream_failed"), \
            airflow.failure_report(DAG_ID, run_id)
        assert time.monotonic() < deadline, f"{run_id} {task_id}: {ti['state']}, not {state}"
        time.sleep(1.0)


def assert_waits_in_the_triggerer(ti: dict[str, Any], trigger: str) -> None:
    """Deferred, its trigger picked up by the triggerer. (The task instance keeps the ``pid``
    it ran with, a process that lives on: the proof that no worker slot is held is the
    executor running other tasks meanwhile.)"""
    assert ti["state"] == "deferred"
    assert ti["trigger"]["classpath"] == f"{TRIGGERS}.{trigger}"
    assert ti["trigger"]["triggerer_id"] is not None


@pytest.mark.timeout(900)
def test_deferred_sensors_hold_no_worker_slot_and_resume_when_the_topic_grows_and_the_window_completes(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], kafka_admin: Any,
        tmp_path: Path) -> None:
    from confluent_kafka.admin import NewPartitions

    topic = new_topic(partitions=1)  # the runs wait for 2 partitions
    now = datetime.now(UTC).replace(microsecond=0)
    # A window still filling up: it ends in the future; its records so far are recent, so no
    # partition counts as idle (10 minutes) while the test runs.
    start, stop = now - timedelta(minutes=5), now + timedelta(minutes=15)
    window = [(0, b"a", b"w0", ms(start)), (0, b"b", b"w1", ms(now) - 60_000),
              (0, b"c", b"w2", ms(now) - 5_000)]
    produce(kafka_config, topic, window)
    # The other runs read a window before these records: nothing to read, no Spark job.
    early = (start - timedelta(hours=1), start - timedelta(minutes=30))

    airflow.unpause(DAG_ID)
    try:
        main = airflow.trigger(DAG_ID, conf(topic, start, stop, tmp_path / "window"))
        others = [airflow.trigger(DAG_ID, conf(topic, *early, tmp_path / f"early{i}"))
                  for i in range(PARALLELISM - 1)]
        waiting = [main, *others]
        for run_id in waiting:
            ti = wait_for(airflow, run_id, "wait_for_partitions", "deferred")
            assert_waits_in_the_triggerer(ti, "KafkaPartitionsTrigger")

        # As many sensors wait as the LocalExecutor has slots (parallelism): if they held
        # them, nothing else could run. Another run executes all its four tasks meanwhile.
        ready = new_topic(partitions=2)
        produce(kafka_config, ready, [(p, None, b"r", ms(now)) for p in (0, 1)])
        other = airflow.trigger(DAG_ID, conf(ready, *early, tmp_path / "other"))
        assert airflow.wait(DAG_ID, other)["state"] == "success", \
            airflow.failure_report(DAG_ID, other)
        assert airflow.task_states(DAG_ID, other) == {
            "wait_for_partitions": "success", "wait_for_window": "success",
            "resolve_offsets": "success", "ingest": "success"}
        for run_id in waiting:
            assert_waits_in_the_triggerer(task(airflow, run_id, "wait_for_partitions"),
                                          "KafkaPartitionsTrigger")

        # The topic grows to 2 partitions: the partitions sensors resume. The main run then
        # waits for its window: no partition holds a record at or after its end yet.
        kafka_admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
        late = (1, b"d", b"w3", ms(now))
        produce(kafka_config, topic, [late])
        ti = wait_for(airflow, main, "wait_for_window", "deferred")
        assert_waits_in_the_triggerer(ti, "KafkaIntervalCompleteTrigger")
        assert task(airflow, main, "wait_for_partitions")["state"] == "success"
        for run_id in others:
            assert airflow.wait(DAG_ID, run_id)["state"] == "success", \
                airflow.failure_report(DAG_ID, run_id)

        # A record at the window's end on each partition completes the window.
        produce(kafka_config, topic, [(p, b"end", b"end", ms(stop)) for p in (0, 1)])
        run = airflow.wait(DAG_ID, main)
    finally:
        airflow.pause(DAG_ID)

    assert run["state"] == "success", airflow.failure_report(DAG_ID, main)
    assert airflow.xcom(DAG_ID, main, "wait_for_partitions") == [[topic, 0], [topic, 1]]
    assert airflow.xcom(DAG_ID, main, "wait_for_window") == {
        "end": stop.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "idle": []}
    ranges = airflow.xcom(DAG_ID, main, "resolve_offsets")["ranges"]
    assert [(r["partition"], r["start"], r["stop"]) for r in ranges] == [(0, 0, 3), (1, 0, 1)]
    rows = pq.read_table(tmp_path / "window", columns=["partition", "offset", "value"])
    assert sorted((r["partition"], r["offset"], r["value"]) for r in rows.to_pylist()) == [
        (0, 0, b"w0"), (0, 1, b"w1"), (0, 2, b"w2"), (1, 0, b"w3")]
    for run_id in [*others, other]:
        assert airflow.xcom(DAG_ID, run_id, "ingest")["records"] == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("early", "other"))]
