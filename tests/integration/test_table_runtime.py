"""The table sinks on the newest pyspark, for which Iceberg and Delta publish no runtime yet:
a clear error naming the artifact and the Spark to use, before anything is read or written
(the sinks themselves are proven in tests/tables, on pyspark 4.1)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import TableRuntimeError
from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.sinks import DeltaSink, IcebergSink
from airflow_provider_kafka_spark.spark import ingest

pytestmark = [pytest.mark.spark]

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1"}


@pytest.mark.parametrize(("sink", "artifact"), [
    (IcebergSink("lake.db.orders", application="a", run="r"),
     "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"),
    (DeltaSink("/tmp/delta/orders", application="a", run="r"),
     "io.delta:delta-spark_4.1_2.13:4.4.0"),
])
def test_a_spark_without_a_table_runtime_is_refused_before_the_read(
        spark: Any, sink: Any, artifact: str) -> None:
    minor = ".".join(spark.version.split(".")[:2])
    if minor in ("4.0", "4.1", "4.2"):
        pytest.fail(f"this test expects the newest pyspark (no table runtime); got {minor}")
    ranges = OffsetRanges((PartitionRange("orders", 0, 0, 5),))
    with pytest.raises(TableRuntimeError, match=f"runs Spark {spark.version}.*{artifact}.*"
                                                "Nothing was read or written"):
        ingest(spark, ranges, UNREACHABLE, sink)
