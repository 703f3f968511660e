"""A long ingest's progress lines reach the task log as the real Airflow stores and serves it
(the REST API), not only the driver's console: an ingest task with ``progress_every=0.5``
whose write takes 2 s or more (4 splits, each task waits 1 s in the transform, on local[2])."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange
from tests.support.deployed import AirflowApi
from tools.kafka_records import produce

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

DAG_FILE = '''
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.sinks import FileSink


def slowly(df):
    def wait(batches):  # nested: Spark pickles it by value for its Python workers
        import time

        time.sleep(1.0)
        yield from batches

    return df.mapInArrow(wait, df.schema)


with DAG(dag_id={dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    KafkaSparkIngestOperator(task_id="ingest", ranges={ranges!r}, sink=FileSink({output!r}),
                             transform=slowly, max_records_per_split=100, progress_every=0.5)
'''

LINE = re.compile(r"ingest: (?P<read>[\d,]+) of at most 400 records read \((?P<percent>\d+)%\), "
                  r"[\d,]+ records/s, (?:about \d+ (?:s|min \d+ s) left|time left unknown); "
                  r"Spark UI: http://[\w.-]+:\d+")


def test_a_long_ingest_logs_its_progress_in_the_task_log(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any],
        tmp_path: Path) -> None:
    topic = new_topic(partitions=2)
    ms = int(time.time() * 1000)
    produce(kafka_config, topic, [(i % 2, None, b"v%d" % i, ms) for i in range(400)])
    ranges = OffsetRanges((PartitionRange(topic, 0, 0, 200), PartitionRange(topic, 1, 0, 200)))
    dag_id = f"progress_{topic.split('-')[-1]}"
    dag_file = Path(str(airflow.stack.extra_dags)) / f"{dag_id}.py"
    dag_file.write_text(DAG_FILE.format(dag_id=dag_id, ranges=ranges.to_dict(),
                                        output=str(tmp_path / "out")))
    try:
        airflow.wait_parsed(dag_id)
        airflow.unpause(dag_id)
        run_id = airflow.trigger(dag_id, {})
        run = airflow.wait(dag_id, run_id)
    finally:
        dag_file.unlink(missing_ok=True)

    assert run["state"] == "success", airflow.failure_report(dag_id, run_id)
    assert airflow.xcom(dag_id, run_id, "ingest")["records"] == 400
    events = [line.get("event", "") if isinstance(line, dict) else str(line)
              for line in map(_parsed, airflow.log(dag_id, run_id, "ingest").splitlines())]
    found = [match for event in events if (match := LINE.fullmatch(event))]
    assert found, "\n".join(events[-40:])
    counts = [int(match["read"].replace(",", "")) for match in found]
    assert counts == sorted(counts) and all(0 <= c <= 400 and c % 100 == 0 for c in counts), counts


def _parsed(line: str) -> Any:
    """A structured log line (JSON, with the message in ``event``), else the text."""
    try:
        return json.loads(line)
    except ValueError:
        return line
