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

Each run's outcome is in the result's ``runs``.

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


def main(job: str, spec_file: str, result_file: str) -> None:
    from pyspark.sql import SparkSession

    from airflow_provider_kafka_spark.spark import kafka_errors, read_kafka

    spec = json.loads(Path(spec_file).read_text())
    spark = SparkSession.builder.appName(f"cluster-test-{job}").getOrCreate()
    if spec.get("gate"):
        Path(spec["gate"]["dir"], STARTED).mkdir(parents=True, exist_ok=True)
        Path(spec["gate"]["dir"], APP_FILE).write_text(json.dumps(
            {"app_id": spark.sparkContext.applicationId, "ui": spark.sparkContext.uiWebUrl}))

    def read(engine: str = "python") -> Any:
        return read_kafka(spark, spec["ranges"], spec["kafka_config"], engine=engine,
                          max_records_per_split=spec.get("max_records_per_split"))

    result: dict[str, Any] = {"runs": []}
    with kafka_errors():
        if job == "read":
            for engine in spec["engines"]:
                result["runs"].append({"engine": engine, "records": sorted(
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
                result["runs"].append(output)
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
                result["runs"].append({"records_per_task": written.records_per_task,
                                       "skipped_tasks": list(written.skipped_tasks)})
        else:
            raise SystemExit(f"unknown job {job!r}")
    result.update(cluster_report(spark))
    Path(result_file).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
