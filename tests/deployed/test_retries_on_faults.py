"""The real scheduler's retries decided by the package's errors (issue 55): a fault that a retry
can outlive (the broker's address refused, by the fault proxy ``tests/support/network.py``,
during the first try) is retried by Airflow and the run lands every record once; a certain
error (a topic the cluster does not have) ends the task on its first try, whatever its
``retries``."""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.deployed import AirflowApi
from tests.support.network import toxiproxy  # noqa: F401  # fixture
from tools.fault_proxy import Toxiproxy
from tools.kafka_records import produce

pytestmark = [pytest.mark.deployed, pytest.mark.integration, pytest.mark.faults]

DAG_FILE = '''
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import FileSink

with DAG({dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={{"retries": 2, "retry_delay": timedelta(seconds=5)}}):
    resolve = KafkaResolveOffsetsOperator(task_id="resolve_offsets", kafka_conn_id={conn!r},
                                          topics={topics!r}, start="earliest", stop="latest")
    KafkaSparkIngestOperator(task_id="ingest", kafka_conn_id={conn!r}, ranges=resolve.output,
                             sink=FileSink({output!r}))
'''


def task_instance(airflow: AirflowApi, dag_id: str, run_id: str, task_id: str) -> Any:
    return airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/"
                               f"{urllib.parse.quote(run_id, safe='')}/taskInstances/{task_id}")


def dag_of(airflow: AirflowApi, conn: str, topics: list[str], output: Path) -> tuple[str, Path]:
    """A new DAG file (resolve, then ingest into a local folder) in the stack's extra bundle,
    parsed and unpaused; its id and file."""
    dag_id = f"retries_{uuid.uuid4().hex[:8]}"
    dag_file = Path(str(airflow.stack.extra_dags)) / f"{dag_id}.py"
    dag_file.write_text(DAG_FILE.format(dag_id=dag_id, conn=conn, topics=topics,
                                        output=str(output)))
    airflow.wait_parsed(dag_id)
    airflow.unpause(dag_id)
    return dag_id, dag_file


@pytest.mark.timeout(420)
def test_a_broker_refused_on_the_first_try_is_retried_and_the_run_lands_every_record_once(
        airflow: AirflowApi, toxiproxy: Toxiproxy, kafka_bootstrap: str,  # noqa: F811
        new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    """The run succeeds, the resolve task on its second try (the first failed with a retryable
    error of the package: ``InternalTopicError``, the run pins' topic unreachable, or
    ``OffsetResolutionError``), and the folder holds every record once: the
    connection's bootstrap address (a proxy in front of the broker) refuses connections until
    the first try has failed."""
    proxy = toxiproxy.proxy(f"deployed-{uuid.uuid4().hex[:6]}", kafka_bootstrap)
    conn = f"kafka_proxied_{uuid.uuid4().hex[:6]}"
    airflow.call("POST", "/api/v2/connections", {
        "connection_id": conn, "conn_type": "kafka",
        "extra": json.dumps({"bootstrap.servers": proxy.address})})
    topic = new_topic(partitions=2)
    now = int(time.time() * 1000)
    records = [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), now + i)
               for i in range(20) for p in range(2)]
    produce(kafka_config, topic, records)
    dag_id, dag_file = dag_of(airflow, conn, [topic], tmp_path / "out")
    try:
        proxy.disable()
        run_id = airflow.trigger(dag_id, {})
        deadline = time.monotonic() + 180
        while (ti := task_instance(airflow, dag_id, run_id, "resolve_offsets"))["state"] \
                != "up_for_retry":
            assert ti["state"] not in ("success", "failed"), ti
            assert time.monotonic() < deadline, f"the first try did not fail in 180 s: {ti}"
            time.sleep(0.2)
        proxy.enable()
        run = airflow.wait(dag_id, run_id)
    finally:
        proxy.enable()
        dag_file.unlink(missing_ok=True)

    assert run["state"] == "success", airflow.failure_report(dag_id, run_id)
    assert task_instance(airflow, dag_id, run_id, "resolve_offsets")["try_number"] == 2
    assert task_instance(airflow, dag_id, run_id, "ingest")["try_number"] == 1
    first_try = airflow.log(dag_id, run_id, "resolve_offsets", try_number=1)
    assert any(f'"exc_type": "{name}"' in first_try
               for name in ("InternalTopicError", "OffsetResolutionError")), first_try[-3000:]
    rows = pq.read_table(tmp_path / "out", columns=["partition", "key", "value"]).to_pylist()
    assert Counter((r["partition"], r["key"], r["value"]) for r in rows) == \
        Counter((p, k, v) for p, k, v, _ in records)


@pytest.mark.timeout(300)
def test_an_unknown_topic_ends_the_task_on_its_first_try_without_retries(
        airflow: AirflowApi, tmp_path: Path) -> None:
    """The run fails, its resolve task on try 1 of 3 with ``UnknownTopicError`` (a retry asks
    the same cluster the same question), and the ingest never runs."""
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    dag_id, dag_file = dag_of(airflow, "kafka_default", [missing], tmp_path / "out")
    try:
        run_id = airflow.trigger(dag_id, {})
        run = airflow.wait(dag_id, run_id)
    finally:
        dag_file.unlink(missing_ok=True)

    assert run["state"] == "failed"
    resolve = task_instance(airflow, dag_id, run_id, "resolve_offsets")
    assert (resolve["state"], resolve["try_number"]) == ("failed", 1), resolve
    assert airflow.task_states(dag_id, run_id)["ingest"] == "upstream_failed"
    log = airflow.log(dag_id, run_id, "resolve_offsets")
    assert "UnknownTopicError" in log and missing in log, log[-3000:]
    assert not (tmp_path / "out").exists()
