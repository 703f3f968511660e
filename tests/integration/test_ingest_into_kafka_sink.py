"""``ingest`` into a ``KafkaSink`` on PySpark 4.3 (``.venv``), headers as read (records with
and without), set to null, and left out: exact records read back (issue 43; the same body runs
on PySpark 4.1 in ``tests/tables/test_ingest_into_kafka_sink.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kafka_sink_ingest import CASES, HeaderShape, ingest_into_kafka_sink

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.mark.parametrize(("guarantee", "shape"), CASES)
def test_ingest_into_kafka_sink_writes_every_record_with_its_headers(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any, guarantee: str,
        shape: HeaderShape) -> None:
    ingest_into_kafka_sink(spark, kafka_config, new_topic, guarantee, shape)
