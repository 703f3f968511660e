"""Packed executors: the package reaches the executors only as a packed environment shipped
with the application (``spark.archives``), made and submitted by docs/cluster.md's recipe
(option 2 of "Getting the package onto the executors"; ``tests/support/packed_env.py`` runs
the page's blocks). The workers' own Python (``spark_cluster.python``, the project's
``.venv``) has the package installed, so the test checks from inside the executors' tasks that
none of it came from there: the interpreter, the package and its native module are the
unpacked environment's, and no other folder on their path holds the package. In that
application a bounded read (the native reader in the executors) and an ``exactly_once``
``write_kafka`` give exactly the expected records."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.cluster import all_ranges, run_job, transactional_input
from tests.support.packed_env import (
    LEFT_OUT,
    PackedEnv,
    executor_requirements,
    recipe_block,
)
from tools.kafka_records import consume_all
from tools.spark_cluster import Cluster, spark_home

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_provider_kafka_spark"


def test_the_recipe_installs_the_packages_requirements(package_wheel: Path) -> None:
    """The page's install line names exactly the wheel's requirements but Airflow and pyspark."""
    words = shlex.split(recipe_block("pack").replace("\\\n", " "))
    requirements = [w for w in words if re.match(r"[A-Za-z][\w.-]*(\[[\w,]+\])?[<>=!~]", w)]
    assert requirements == executor_requirements(package_wheel), (
        "docs/cluster.md's pack recipe must install the wheel's requirements but "
        f"{sorted(LEFT_OUT)}, as its metadata writes them")
    assert not LEFT_OUT & {re.split(r"[\[<>=!~]", r)[0] for r in requirements}


def test_packed_environment_on_the_standalone_cluster(
        spark_cluster: Cluster, packed_executor_env: PackedEnv, kafka_config: dict[str, Any],
        kafka_admin: Any, new_topic: Any, tmp_path: Path) -> None:
    # The executors' own interpreter could import the package: the fallback the test excludes.
    assert subprocess.run([spark_cluster.python, "-c", f"import {PACKAGE}._native"],
                          cwd=tmp_path).returncode == 0
    source, target = new_topic(partitions=2), new_topic(partitions=3)
    expected = transactional_input(kafka_config, kafka_admin, source, partitions=2)
    ranges = all_ranges(kafka_config, source)
    spec = {"ranges": ranges.to_json(), "kafka_config": kafka_config, "engines": ["python"],
            "max_records_per_split": 100, "topic": target,
            "transactional_id_prefix": f"packed-{uuid.uuid4().hex[:8]}",
            "write_id": f"w-{uuid.uuid4().hex[:8]}", "provenance": True}
    # (The executors' unpacked copies stay in the cluster's folder, a temporary one: deleting
    # 2 x 340 MB took 30 s on this 2-core machine, with its disk discarding freed blocks.)
    result = run_job(spark_cluster, "read,kafka", spec, tmp_path,
                     conf=packed_executor_env.conf, cwd=packed_executor_env.folder)

    # the imports came from the unpacked archive, in executors of both workers
    site = Path("lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
    workers = set()
    for task in result["provenance"]:
        cwd = Path(task["cwd"])
        env = cwd / "environment"
        assert (task["executable"], task["prefix"]) == (str(env / "bin" / "python"), str(env))
        assert task["package"] == str(env / site / PACKAGE / "__init__.py")
        assert task["native"] == str(env / site / PACKAGE / "_native.abi3.so")
        assert task["holding_package"] == [str(env / site)]  # nothing to fall back to
        assert task["airflow"] is False
        # Spark's own pyspark (SPARK_HOME's zip, not an installed one)
        assert task["pyspark"] == str(spark_home() / "python" / "lib" / "pyspark.zip" /
                                      "pyspark" / "__init__.py")
        # nothing of this repository on the path but Spark's own files (pyspark.zip, py4j,
        # spark-core's jar: what Spark puts on PYTHONPATH from SPARK_HOME)
        assert [p for p in task["sys_path"] if Path(cwd, p).is_relative_to(ROOT) and
                not Path(p).is_relative_to(spark_home())] == [], task["sys_path"]
        assert cwd.parent.name == result["app_id"], cwd  # <run dir>/<worker>/<app>/<executor>
        assert cwd.parents[2] == spark_cluster.run_dir, cwd
        workers.add(cwd.parent.parent.name)
    assert workers == {"worker-1", "worker-2"}

    read, written = result["runs"]
    assert read["engine"] == "python"
    records = [(p, o, bytes.fromhex(k).decode(), bytes.fromhex(v).decode())
               for p, o, k, v in read["records"]]
    assert len(expected) == 440
    assert {(p, k, v) for p, _, k, v in records} == expected
    assert len(records) == len(expected)  # no record twice
    assert {p: max(o for q, o, _, _ in records if q == p) for p in (0, 1)} == {
        r.partition: r.stop - 1 for r in ranges}

    committed = consume_all(kafka_config, target, 3, isolation_level="read_committed")
    assert Counter(k.decode() for _, _, k, _, _ in committed) == Counter(k for _, k, _ in expected)
    assert {(k.decode(), v.decode()) for _, _, k, v, _ in committed} == {
        (k, v) for _, k, v in expected}
    assert sum(written["records_per_task"].values()) == len(expected)
    assert written["skipped_tasks"] == []
    assert result["removed_executors"] == [] and result["failed_tasks"] == []
