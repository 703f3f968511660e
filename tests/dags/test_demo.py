"""``make demo`` (tools/demo.py) on a fresh broker, as a newcomer runs it: its three hourly
``dag.test()`` runs ingest every event once, and it prints none of the lines a newcomer would
take for failures: Airflow's warnings about the output asset, librdkafka's notice of the retry
a just-started broker causes, Spark's default log profile and its warnings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
NOISE = (
    "cannot create asset event",  # Airflow: the ingest's output asset under dag.test()
    "inactive AssetModel",
    "Coordinator load in progress",  # librdkafka: the idempotent producer's expected retry
    "Using Spark's default log4j profile",
    "Setting default log level",
    "NativeCodeLoader",
    "Using incubator modules",  # the JVM's notice of jdk.incubator.vector
)


@pytest.mark.timeout(600)
def test_the_demo_ingests_every_event_once_and_prints_no_noise(tmp_path: Path) -> None:
    # A fresh machine's environment: no Airflow settings (the test session has its own).
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    output = tmp_path / "out"

    demo = subprocess.run([sys.executable, str(ROOT / "tools" / "demo.py"), "--broker-dir",
                           str(tmp_path / "kafka"), "--output", str(output)],
                          env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=580, check=False)

    printed = demo.stdout
    assert demo.returncode == 0, printed
    assert "10000 of 10000 events ingested in 3 runs, none twice." in printed, printed
    assert sum(line.startswith("kafka_hourly_ingest run for [") for line in printed.splitlines()) == 3
    assert len([p for p in output.iterdir() if (p / "_kafka_spark_manifest.json").exists()]) == 3
    assert [line for line in printed.splitlines() if any(n in line for n in NOISE)] == []
    assert not (tmp_path / "kafka" / "broker.pid").exists(), "the demo left its broker running"
