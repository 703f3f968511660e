"""The example DAGs in a real Airflow, driven through the REST API: exact ranges in XCom,
exact records on disk (read with pyarrow, not Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.deployed import AirflowApi
from tools.kafka_records import MINUTE_MS, produce

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

# Recent timestamps: the broker's retention (7 days) would delete records from long ago.
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
MS0 = int(T0.timestamp() * 1000)


def test_adhoc_run_through_the_rest_api_reads_exactly_the_conf_range(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    topic = new_topic(partitions=2)
    # partition 0: minutes 0..4, partition 1: minutes 0..2; the stop spec cuts at minute 3.
    records = [(0, f"k{i}".encode(), f"p0-{i}".encode(), MS0 + i * MINUTE_MS) for i in range(5)]
    records += [(1, None, f"p1-{i}".encode(), MS0 + i * MINUTE_MS) for i in range(3)]
    produce(kafka_config, topic, records)
    output = tmp_path / "adhoc"

    airflow.unpause("kafka_adhoc")
    run_id = airflow.trigger("kafka_adhoc", {
        "topics": topic, "start": "earliest", "stop": f"timestamp:{(T0 + timedelta(minutes=3)).isoformat()}",
        "output_path": str(output)})
    run = airflow.wait("kafka_adhoc", run_id)

    assert run["state"] == "success", airflow.failure_report("kafka_adhoc", run_id)
    assert airflow.task_states("kafka_adhoc", run_id) == {
        "resolve_offsets": "success", "ingest": "success"}
    ranges = airflow.xcom("kafka_adhoc", run_id, "resolve_offsets")
    assert [(r["topic"], r["partition"], r["start"], r["stop"]) for r in ranges["ranges"]] == [
        (topic, 0, 0, 3), (topic, 1, 0, 3)]
    rows = pq.read_table(output, columns=["partition", "offset", "key", "value"]).to_pylist()
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows) == [
        (0, 0, b"k0", b"p0-0"), (0, 1, b"k1", b"p0-1"), (0, 2, b"k2", b"p0-2"),
        (1, 0, None, b"p1-0"), (1, 1, None, b"p1-1"), (1, 2, None, b"p1-2")]
    assert airflow.xcom("kafka_adhoc", run_id, "ingest")["records"] == 6
    # A green run's log has no red lines: no entry at warning level or above (the Spark JVM's
    # output and librdkafka's lines come at their own levels; nothing is allowed here).
    for task_id in ("resolve_offsets", "ingest"):
        entries = airflow.log_entries("kafka_adhoc", run_id, task_id)
        loud = [e for e in entries if isinstance(e, dict)
                and str(e.get("level", "")).lower() in ("warning", "error", "critical")]
        assert len(entries) > 5 and loud == [], f"{task_id}: {loud}"


def test_adhoc_bad_spec_fails_the_resolve_task_with_a_clear_message_before_writing(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"x", MS0)])
    output = tmp_path / "never"

    airflow.unpause("kafka_adhoc")
    run_id = airflow.trigger("kafka_adhoc", {
        "topics": topic, "start": "yesterday", "stop": "latest", "output_path": str(output)})
    run = airflow.wait("kafka_adhoc", run_id)

    assert run["state"] == "failed"
    assert airflow.task_states("kafka_adhoc", run_id) == {
        "resolve_offsets": "failed", "ingest": "upstream_failed"}
    assert "start: unknown offset spec 'yesterday'" in airflow.log("kafka_adhoc", run_id,
                                                                   "resolve_offsets")
    assert not output.exists()


def test_clearing_a_run_through_the_rest_api_rereads_the_pinned_slice(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, f"v{i}".encode(), MS0 + i) for i in range(3)])
    output = tmp_path / "cleared"

    airflow.unpause("kafka_adhoc")
    run_id = airflow.trigger("kafka_adhoc", {
        "topics": topic, "start": "earliest", "stop": "latest", "output_path": str(output)})
    assert airflow.wait("kafka_adhoc", run_id)["state"] == "success", \
        airflow.failure_report("kafka_adhoc", run_id)
    # More data arrives; "latest" would now mean offset 5, but the run's first resolution is
    # pinned: clearing the whole run re-reads [0, 3) and rewrites the same records.
    produce(kafka_config, topic, [(0, None, f"late{i}".encode(), MS0 + 10 + i) for i in range(2)])
    cleared = airflow.call("POST", "/api/v2/dags/kafka_adhoc/clearTaskInstances", {
        "dry_run": False, "dag_run_id": run_id, "only_failed": False, "reset_dag_runs": True})
    assert {ti["task_id"] for ti in cleared["task_instances"]} == {"resolve_offsets", "ingest"}
    run = airflow.wait("kafka_adhoc", run_id)

    assert run["state"] == "success", airflow.failure_report("kafka_adhoc", run_id)
    tries = airflow.call("GET", f"/api/v2/dags/kafka_adhoc/dagRuns/{run_id}/taskInstances")
    assert {ti["task_id"]: ti["try_number"] for ti in tries["task_instances"]} == {
        "resolve_offsets": 2, "ingest": 2}
    ranges = airflow.xcom("kafka_adhoc", run_id, "resolve_offsets")["ranges"]
    assert [(r["partition"], r["start"], r["stop"]) for r in ranges] == [(0, 0, 3)]
    rows = pq.read_table(output, columns=["offset", "value"]).to_pylist()
    assert sorted((r["offset"], r["value"]) for r in rows) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


def test_adhoc_start_after_stop_fails_before_reading_with_a_message_naming_both(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, f"v{i}".encode(), MS0 + i * MINUTE_MS) for i in range(3)])
    output = tmp_path / "never"
    start, stop = T0 + timedelta(minutes=2), T0 + timedelta(minutes=1)

    airflow.unpause("kafka_adhoc")
    run_id = airflow.trigger("kafka_adhoc", {
        "topics": topic, "start": f"timestamp:{start.isoformat()}",
        "stop": f"timestamp:{stop.isoformat()}", "output_path": str(output)})
    run = airflow.wait("kafka_adhoc", run_id)

    assert run["state"] == "failed"
    assert airflow.task_states("kafka_adhoc", run_id) == {
        "resolve_offsets": "failed", "ingest": "upstream_failed"}
    log = airflow.log("kafka_adhoc", run_id, "resolve_offsets")
    assert "is after the stopping time" in log, log[-2000:]
    assert not output.exists()
