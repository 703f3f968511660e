"""The operators' metrics reach a StatsD server (a UDP socket on loopback here) through
Airflow's own Stats, configured as ``[metrics] statsd_on`` with InfluxDB-style tags, during a
``dag.test()`` run of ``kafka_hourly_ingest`` against the real broker and Spark."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.dag_data import T1, arrange

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def statsd_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A UDP socket as the StatsD server; Airflow's Stats sends to it, as a task runner
    configured with these settings does (and is reset to no metrics after)."""
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability.metrics import stats_utils

    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.5)
    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1",
                       "STATSD_PORT": str(server.getsockname()[1]), "STATSD_PREFIX": "airflow",
                       "STATSD_INFLUXDB_ENABLED": "True"}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    yield server
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    server.close()


def received(server: socket.socket) -> list[str]:
    lines = []
    while True:
        try:
            lines += server.recv(65536).decode().splitlines()
        except TimeoutError:
            return lines


def test_lag_records_bytes_and_commits_arrive_tagged_with_the_task(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path,
        statsd_server: socket.socket) -> None:
    topic = new_topic(partitions=3)
    arrange(kafka_config, topic)
    conf = {"topics": topic, "output_root": str(tmp_path / "out"), "group_id": f"g-{topic}"}

    outcome = run_dag("kafka_hourly_ingest", logical_date=T1, conf=conf)

    assert outcome.state == "success", outcome.errors
    ours = sorted(line for line in received(statsd_server)
                  if line.startswith("airflow.kafka_spark."))
    tags = "dag_id=kafka_hourly_ingest,task_id="
    # Interval [T0, T1): 9 records of 2-byte keys and 4-byte values; after its stops the
    # partitions hold 3, 4 and 0 more offsets.
    assert ours == sorted([
        f"airflow.kafka_spark.lag,{tags}resolve_offsets:7|g",
        f"airflow.kafka_spark.records_read,{tags}ingest:9|c",
        f"airflow.kafka_spark.bytes_read,{tags}ingest:54|c",
        f"airflow.kafka_spark.lost_offsets,{tags}ingest:0|c",
        f"airflow.kafka_spark.commit_success,{tags}commit_offsets:1|c",
    ])
    assert outcome.xcom["ingest"]["lag"] == 7 and outcome.xcom["ingest"]["bytes"] == 54
