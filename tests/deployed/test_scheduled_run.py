"""The scheduler itself creates a run of ``kafka_hourly_ingest`` (catchup off: the last complete
hour) over ``demo.events``, which ``scripts/airflow-local`` seeded; the run's ranges and files
hold exactly the topic's records of that hour, in the DAG's default folder under the stack's
``KAFKA_SPARK_OUTPUT_ROOT`` (never /tmp). The ingest's asset event then makes the scheduler run
``kafka_hourly_report`` (scheduled on the ingest's output alias) on exactly that folder."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.deployed import AirflowApi
from tools.airflow_stack import DEMO_TOPIC
from tools.kafka_records import consume_all, produce

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

DAG_ID = "kafka_hourly_ingest"
REPORT_DAG_ID = "kafka_hourly_report"


def test_a_scheduled_hourly_run_ingests_exactly_the_records_of_its_interval(
        airflow: AirflowApi, kafka_config: dict[str, Any]) -> None:
    # One record "now" in every partition: each has data past the interval's end, so the
    # completeness sensor is done at once instead of waiting for its 10-minute idle timeout.
    now_ms = int(time.time() * 1000)
    produce(kafka_config, DEMO_TOPIC, [(p, b"marker", b"{}", now_ms) for p in range(3)])

    airflow.unpause(REPORT_DAG_ID)
    airflow.unpause(DAG_ID)
    try:
        deadline = time.monotonic() + 60
        while not (runs := airflow.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")["dag_runs"]):
            assert time.monotonic() < deadline, "the scheduler created no run within 60 s"
            time.sleep(1.0)
        first = min(runs, key=lambda r: r["data_interval_start"])
        assert first["run_type"] == "scheduled"
        start = datetime.fromisoformat(first["data_interval_start"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(first["data_interval_end"].replace("Z", "+00:00"))
        # The DAG's default output_root Param: $KAFKA_SPARK_OUTPUT_ROOT/kafka_hourly_ingest.
        folder = airflow.stack.output_root / DAG_ID / start.strftime("%Y-%m-%dT%H")
        run = airflow.wait(DAG_ID, first["dag_run_id"])
        assert run["state"] == "success", airflow.failure_report(DAG_ID, run["dag_run_id"])
        reported = reports_by_uri(airflow, f"file://{folder}")
    finally:
        airflow.pause(DAG_ID)
        airflow.pause(REPORT_DAG_ID)

    assert run["state"] == "success", airflow.failure_report(DAG_ID, run["dag_run_id"])
    start_ms, end_ms = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
    expected = sorted((p, o, k, v) for p, o, k, v, ts in consume_all(kafka_config, DEMO_TOPIC, 3)
                      if start_ms <= ts < end_ms)
    assert expected, "the seeded demo topic has no events in the run's hour"
    ranges = airflow.xcom(DAG_ID, run["dag_run_id"], "resolve_offsets")["ranges"]
    for r in ranges:
        offsets = [o for p, o, _, _ in expected if p == r["partition"]]
        assert (r["start"], r["stop"]) == ((min(offsets), max(offsets) + 1) if offsets
                                           else (r["start"], r["start"]))
    rows = pq.read_table(folder, columns=["partition", "offset", "key", "value"]).to_pylist()
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows) == expected

    assert reported[f"file://{folder}"] == [
        ("asset_triggered", {"uri": f"file://{folder}", "records": len(expected), "ranges": ranges})]


def reports_by_uri(airflow: AirflowApi, uri: str, timeout: float = 90.0
                   ) -> dict[str, list[tuple[str, Any]]]:
    """Wait until a successful ``kafka_hourly_report`` run reported ``uri``; every folder its
    runs reported (a run reports each hour written since the previous one), with the run type."""
    deadline = time.monotonic() + timeout
    while True:
        reported: dict[str, list[tuple[str, Any]]] = {}
        for run in airflow.call("GET", f"/api/v2/dags/{REPORT_DAG_ID}/dagRuns")["dag_runs"]:
            assert run["state"] != "failed", airflow.failure_report(REPORT_DAG_ID,
                                                                    run["dag_run_id"])
            if run["state"] == "success":
                for entry in airflow.xcom(REPORT_DAG_ID, run["dag_run_id"], "report"):
                    reported.setdefault(entry["uri"], []).append((run["run_type"], entry))
        if uri in reported:
            return reported
        assert time.monotonic() < deadline, f"no report of {uri} within {timeout} s: {reported}"
        time.sleep(1.0)
