"""A daily rollup of ``kafka_hourly_partitioned``: one run per day, once its 24 hours are in.

``PartitionedAssetTimetable`` over the hourly asset with ``RollupMapper(StartOfDayMapper(),
DayWindow())``: each hourly run's asset event carries its partition key
(``2026-03-10T09:00:00``); Airflow maps it to the day (``2026-03-10``) and creates this DAG's
run for that day when every one of the day's 24 hourly partitions has an event (``WaitForAll``,
the default wait policy). The run's ``partition_key`` is the day; its triggering asset events
are the hourly events it consumed (see docs/airflow.md for Airflow 3.3's rules).
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import (
    DAG,
    Asset,
    DayWindow,
    PartitionedAssetTimetable,
    RollupMapper,
    StartOfDayMapper,
    task,
)

OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")
# The asset kafka_hourly_partitioned.py's ingest announces (the same name and URI).
HOURLY = Asset(name="kafka_hourly_partitioned",
               uri=f"file://{OUTPUT_ROOT}/kafka_hourly_partitioned")

with DAG(
    dag_id="kafka_daily_rollup",
    description="One run per day of kafka_hourly_partitioned, once its 24 hours are in",
    schedule=PartitionedAssetTimetable(
        assets=HOURLY,
        default_partition_mapper=RollupMapper(upstream_mapper=StartOfDayMapper(),
                                              window=DayWindow()),
    ),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kafka", "example", "partitions"],
) as dag:

    @task
    def summarize_day(dag_run: Any = None, triggering_asset_events: Any = None) -> dict[str, Any]:
        """The day and the hourly partitions it rolls up (each from its asset event)."""
        hours = sorted({event.partition_key for events in triggering_asset_events.values()
                        for event in events if event.partition_key})
        print(f"Day {dag_run.partition_key}: {len(hours)} hourly partitions: {', '.join(hours)}")
        return {"day": dag_run.partition_key, "hours": hours}

    summarize_day()
