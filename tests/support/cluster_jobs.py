"""Spark applications the cluster tests submit: ``spark-submit --master spark://...
cluster_jobs.py <job> <spec.json> <result.json>``, the way a user runs a job on a cluster (the
test process may hold a local SparkContext already, and a JVM has only one).

Jobs (the spec is JSON; ``ranges`` is ``OffsetRanges.to_json()``):

* ``read``: ``read_kafka`` with each of ``engines`` -> every record as
  ``[partition, offset, key hex, value hex]``;
* ``files``: ``read_kafka`` -> ``FileSink`` to ``path`` (prepare, write, commit with
  ``manifest`` + the run number), ``repeat`` times (default 1);
* ``kafka``: ``read_kafka`` -> ``write_kafka`` (key and value, ``exactly_once``) to
  ``topic``, ``repeat`` times with the same ``write_id``.

Each run's outcome is in the result's ``runs``. ``<job>`` may name several jobs, comma-separated
(``read,kafka``): they run in that order in one application, their runs one after another in
``runs``.

``provenance`` (optional, true) adds, from inside Python tasks on every executor, where their
interpreter, this package, its native module and pyspark were imported from (see
:func:`provenance`): the test of a packed environment shipped with ``spark.archives`` checks it.

``gate`` (optional, a dict) puts :func:`gated` between the read and the write, so a test can
stop tasks half-way and kill an executor under them. The result always holds what the
driver's REST API says about lost executors and failed task attempts.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

RELEASE = "release"
STARTED = "started"
APP_FILE = "app.json"


def gated(df: Any, gate: dict[str, Any]) -> Any:
    """``df`` unchanged, through a Python step that, in the ``hold_run``-th evaluation of each
    Spark partition (1: the first Spark job computing it), on the task's first attempt only,
    passes ``hold_after`` rows on in 10-row batches and then waits until the file
    ``<dir>/release`` exists (at most ``hold_s`` seconds). Every task attempt leaves
    ``<dir>/started/<stage>.<partition>.<attempt>.<python pid>`` so the test sees which task runs
    where; a held one adds ``.held`` once it waits."""
    folder, hold_run = gate["dir"], int(gate["hold_run"])
    hold_after, hold_s = int(gate.get("hold_after", 20)), float(gate.get("hold_s", 180))

    def step(batches: Any) -> Any:
        import os
        from pathlib import Path

        from pyspark import TaskContext

        context = TaskContext.get()
        started = Path(folder) / STARTED
        me = (f"{context.stageId()}.{context.partitionId()}.{context.attemptNumber()}."
              f"{os.getpid()}")
        (started / me).touch()
        stages = {int(p.name.split(".")[0]) for p in started.iterdir()
                  if p.name.split(".")[1] == str(context.partitionId())}
        run = sorted(stages).index(context.stageId()) + 1
        hold = run == hold_run and context.attemptNumber() == 0
        passed = 0
        for batch in batches:
            for begin in range(0, batch.num_rows, 10):
                if hold and passed >= hold_after:
                    (started / f"{me}.held").touch()
                    deadline = time.monotonic() + hold_s
                    while not (Path(folder) / RELEASE).exists():
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"gate {folder} not released in {hold_s}s")
                        time.sleep(0.05)
                    hold = False
                piece = batch.slice(begin, 10)
                passed += piece.num_rows
                yield piece

    (Path(folder) / STARTED).mkdir(parents=True, exist_ok=True)
    return df.mapInArrow(step, df.schema)


def cluster_report(spark: Any) -> dict[str, Any]:
    """Executors removed and failed task attempts, from the driver's REST API."""
    context = spark.sparkContext
    base = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}"

    def get(path: str) -> Any:
        with urllib.request.urlopen(base + path, timeout=30) as response:
            return json.load(response)

    removed = [{"id": e["id"], "reason": e.get("removeReason")}
               for e in get("/allexecutors") if e["id"] != "driver" and not e["isActive"]]
    failed = []
    for stage in get("/stages"):
        if stage.get("numFailedTasks"):
            tasks = get(f"/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=1000")
            failed += [{"stage": stage["stageId"], "index": t["index"], "attempt": t["attempt"],
                        "executor": t["executorId"],
                        "error": (t.get("errorMessage") or "").splitlines()[:1]}
                       for t in tasks if t["status"] == "FAILED"]
    return {"app_id": context.applicationId, "removed_executors": removed,
            "failed_tasks": failed}


def provenance(spark: Any, tasks: int = 4) -> list[dict[str, Any]]:
    """One report per task of a ``tasks``-task job on the executors' Python workers: the
    interpreter (``sys.executable``, ``sys.prefix``), the files this package, its native
    module and pyspark were imported from, the task's working folder, ``sys.path``,
    ``PYTHONPATH``, whether Airflow is importable, and every ``sys.path`` entry that holds a
    folder of this package (any other would be a place to fall back to). Each task waits
    0.2 s so both executors take some."""
    def report(_: Any) -> Any:
        import importlib.util
        import os
        import sys
        import time

        import pyspark

        import airflow_provider_kafka_spark as package
        from airflow_provider_kafka_spark import _native

        time.sleep(0.2)
        yield {"executable": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(),
               "package": package.__file__, "native": _native.__file__,
               "pyspark": pyspark.__file__, "sys_path": list(sys.path),
               "pythonpath": os.environ.get("PYTHONPATH", ""),
               "airflow": importlib.util.find_spec("airflow") is not None,
               "holding_package": [p for p in sys.path if os.path.isdir(
                   os.path.join(p or ".", "airflow_provider_kafka_spark"))]}

    return list(spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(report)
                .collect())


def runs(job: str, spark: Any, spec: dict[str, Any]) -> list[Any]:
    """Run ``job`` (see the module docstring) in ``spark``; the outcome of each of its runs."""
    from airflow_provider_kafka_spark.spark import read_kafka

    def read(engine: str = "python") -> Any:
        return read_kafka(spark, spec["ranges"], spec["kafka_config"], engine=engine,
                          max_records_per_split=spec.get("max_records_per_split"))

    outcomes: list[Any] = []
    if job == "read":
        for engine in spec["engines"]:
            outcomes.append({"engine": engine, "records": sorted(
                [r["partition"], r["offset"],
                 None if r["key"] is None else bytes(r["key"]).hex(), bytes(r["value"]).hex()]
                for r in read(engine).collect())})
    elif job == "files":
        from airflow_provider_kafka_spark.sinks import FileSink

        for run in range(1, spec.get("repeat", 1) + 1):
            shaped = read().selectExpr("partition", "offset", "CAST(key AS STRING) AS key",
                                       "CAST(value AS STRING) AS value")
            sink = FileSink(spec["path"], format="json")
            try:
                sink.prepare(spark, shaped.limit(0))
                if spec.get("gate"):
                    shaped = gated(shaped, spec["gate"])
                output = sink.write(shaped)
                sink.commit({**spec["manifest"], "run": run})
            except BaseException:
                sink.abort()
                raise
            outcomes.append(output)
    elif job == "kafka":
        from airflow_provider_kafka_spark.spark import write_kafka

        for _ in range(spec.get("repeat", 1)):
            out = read().select("key", "value")
            if spec.get("gate"):
                out = gated(out, spec["gate"])
            written = write_kafka(out, spec["kafka_config"], topic=spec["topic"],
                                  delivery_guarantee="exactly_once",
                                  transactional_id_prefix=spec["transactional_id_prefix"],
                                  write_id=spec["write_id"])
            outcomes.append({"records_per_task": written.records_per_task,
                             "skipped_tasks": list(written.skipped_tasks)})
    else:
        raise SystemExit(f"unknown job {job!r}")
    return outcomes


def main(jobs: str, spec_file: str, result_file: str) -> None:
    from pyspark.sql import SparkSession

    from airflow_provider_kafka_spark.spark import kafka_errors

    spec = json.loads(Path(spec_file).read_text())
    spark = SparkSession.builder.appName(f"cluster-test-{jobs}").getOrCreate()
    if spec.get("gate"):
        Path(spec["gate"]["dir"], STARTED).mkdir(parents=True, exist_ok=True)
        Path(spec["gate"]["dir"], APP_FILE).write_text(json.dumps(
            {"app_id": spark.sparkContext.applicationId, "ui": spark.sparkContext.uiWebUrl}))

    result: dict[str, Any] = {"runs": []}
    with kafka_errors():
        for job in jobs.split(","):
            result["runs"] += runs(job, spark, spec)
    if spec.get("provenance"):
        result["provenance"] = provenance(spark)
    result.update(cluster_report(spark))
    Path(result_file).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
