"""Runs each time ``kafka_hourly_ingest`` has written an hour: scheduled on the ingest's output.

Every ingest task announces the output it wrote as an Airflow asset (``file:///...`` for a
folder, ``s3://...``, ``kafka://host:port/topic`` for a topic) through an asset alias named
``kafka_spark:<dag_id>.<task_id>``. This DAG is scheduled on that alias, so it runs once per
hour written, and reads which folder it was from the triggering asset event; its one task reads
the folder's manifest (no Spark) and returns the hour's record count and ranges.

To schedule on one fixed output instead (a ``FileSink`` path without templates, or a
``KafkaSink`` topic), use the asset itself: ``schedule=[Asset("file:///data/events/latest")]`` or
``schedule=[Asset("kafka://broker:9092/orders.enriched")]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pendulum
from airflow.sdk import DAG, AssetAlias, task

from airflow_provider_kafka_spark.sinks import MANIFEST_NAME

INGEST_OUTPUT = AssetAlias(name="kafka_spark:kafka_hourly_ingest.ingest")

with DAG(
    dag_id="kafka_hourly_report",
    description="After each hour kafka_hourly_ingest writes: report its records from the manifest",
    schedule=[INGEST_OUTPUT],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kafka", "example", "assets"],
) as dag:

    @task
    def report(triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """Each folder written (one per triggering event): its URI, records and ranges."""
        written = []
        # Keyed by the alias (each event is also listed under its asset's own key).
        for event in triggering_asset_events[INGEST_OUTPUT]:
            uri = event.asset.uri
            manifest = json.loads((Path(urlsplit(uri).path) / MANIFEST_NAME).read_text())
            written.append({"uri": uri, "records": manifest["records"],
                            "ranges": manifest["ranges"]["ranges"]})
        return written

    report()
