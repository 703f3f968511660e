"""The DAG ``tests/tables/test_backfill_into_tables.py`` runs in a real Airflow: hourly, each run
reads its interval by timestamp (runs may go in any order) and lands it in an Iceberg table
in one commit, exactly once by the table's state.

Its ingest fails its first try, right after the table commit, for the hours listed in the
``fail_after_commit`` Param (``YYYY-MM-DDTHH``): what a worker lost after committing looks like
to Airflow, which then retries the task. The Spark settings (the jars, catalogs and extensions
of the `tables` tier) come from ``$KAFKA_SPARK_TEST_SPARK_CONF`` (JSON).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import IcebergSink

DAG_ID = "kafka_backfill_into_table"
SPARK_CONF: dict[str, str] = json.loads(os.environ.get("KAFKA_SPARK_TEST_SPARK_CONF", "{}"))
APPLICATION = f"{DAG_ID}.ingest"


class IngestFailingOnceAfterCommit(KafkaSparkIngestOperator):
    """The ingest; its first try of an hour in ``params.fail_after_commit`` fails once the
    table commit is made."""

    def execute(self, context: Any) -> Any:
        result = super().execute(context)
        hour = context["data_interval_start"].strftime("%Y-%m-%dT%H")
        if context["ti"].try_number == 1 and hour in context["params"]["fail_after_commit"]:
            raise RuntimeError(f"the test fails the first try of {hour} after its table commit")
        return result


with DAG(
    dag_id=DAG_ID,
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=3)},
    params={
        # No such topic: the DAG's own scheduled run (unpaused for the backfills) fails at
        # once, without starting Spark.
        "topics": Param("kafka_backfill_into_table.none", type="string", minLength=1),
        "table": Param("lake.kafka.backfill", type="string", minLength=1),
        "fail_after_commit": Param([], type="array"),
    },
) as dag:
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
    )
    ingest = IngestFailingOnceAfterCommit(
        task_id="ingest",
        ranges=resolve_offsets.output,
        sql="SELECT topic, `partition`, `offset`, `timestamp`, CAST(key AS STRING) AS key, "
            "CAST(value AS STRING) AS value FROM kafka",
        sink=IcebergSink("{{ params.table }}", application=APPLICATION),
        spark_conf=SPARK_CONF,
    )
    resolve_offsets >> ingest
