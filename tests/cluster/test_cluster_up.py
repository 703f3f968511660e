"""The cluster itself: two ALIVE workers, and a Connect query that runs on their executors
with the project's interpreter (where this package is importable)."""

from __future__ import annotations

import psutil

from tests.support.cluster import processes_of
from tools.spark_cluster import Cluster


def test_connect_query_runs_on_both_workers_executors(spark_cluster: Cluster, connect_spark) -> None:
    assert spark_cluster.alive_workers() == 2
    services = {spark_cluster.pid(name) for name in ("master", "worker-1", "worker-2", "connect")}
    assert None not in services and services <= set(processes_of(spark_cluster.run_dir))

    def where(batches):
        import os
        import sys

        import pyarrow as pa

        import airflow_provider_kafka_spark

        for batch in batches:
            yield pa.RecordBatch.from_pydict({
                "id": batch.column("id"),
                "pid": pa.array([os.getpid()] * batch.num_rows, pa.int64()),
                "python": pa.array([sys.executable] * batch.num_rows),
                "package": pa.array([airflow_provider_kafka_spark.__name__] * batch.num_rows),
            })

    rows = connect_spark.range(0, 400, 1, 4).mapInArrow(
        where, "id long, pid long, python string, package string").collect()

    assert sorted(r["id"] for r in rows) == list(range(400))
    assert {r["python"] for r in rows} == {spark_cluster.python}
    assert {r["package"] for r in rows} == {"airflow_provider_kafka_spark"}
    # Every Python worker descends from an executor JVM under one of the two workers.
    executors = {pid: worker for worker, pids in spark_cluster.executor_pids().items()
                 for pid in pids}
    used = set()
    for pid in {r["pid"] for r in rows}:
        ancestors = {p.pid for p in psutil.Process(pid).parents()}
        (worker,) = {executors[a] for a in ancestors & executors.keys()}
        used.add(worker)
    assert used == {"worker-1", "worker-2"}
