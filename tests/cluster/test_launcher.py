"""tools/spark_cluster.py itself: a start that fails half-way stops everything it started."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import processes_of
from tools import spark_cluster


@pytest.mark.timeout(240)
def test_a_failed_start_stops_what_it_started(tmp_path: Path) -> None:
    # An interpreter without pyspark: master, workers and the Connect server come up, then
    # the Connect probe (run with that interpreter) fails.
    python = shutil.which("python3", path="/usr/bin")
    assert python and subprocess.run([python, "-c", "import pyspark"],
                                     capture_output=True).returncode != 0
    run_dir = tmp_path / "spark-local"
    with pytest.raises(spark_cluster.ClusterError, match="Connect session failed"):
        spark_cluster.start(run_dir, python=python)

    assert (run_dir / "worker-2.log").exists() and (run_dir / "connect.log").exists()
    assert not list(run_dir.glob("*.pid"))
    assert processes_of(run_dir) == []
