"""Ad-hoc Kafka -> files: fill the trigger form, get one folder of Parquet.

No schedule: a person triggers it from the UI (or ``airflow dags trigger kafka_adhoc --conf
'{...}'``). The form's fields are validated by their Param schema before the run starts.
``start`` and ``stop`` take any offset spec: ``earliest``, ``latest``,
``timestamp:2024-05-01T00:00:00Z``, ``committed:earliest`` (with a group), or explicit offsets
as JSON ``{"orders": {"0": 120, "1": 98}}``. Leaving them empty means "the run's data
interval", which a manual run of this DAG does not have: the run then fails, saying so, before
reading anything. Nothing is committed to any consumer group.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)

with DAG(
    dag_id="kafka_adhoc",
    description="Read any offset range of Kafka topics into one folder of Parquet",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    params={
        "topics": Param(type="string", minLength=1, pattern=r"^[A-Za-z0-9._\-, ]+$",
                        description="Topic name(s), comma-separated."),
        "start": Param(None, type=["null", "string"],
                       description="Starting offset spec (inclusive), e.g. 'earliest' or "
                                   "'timestamp:2024-05-01T00:00:00Z'."),
        "stop": Param(None, type=["null", "string"],
                      description="Stopping offset spec (exclusive), e.g. 'latest'."),
        "output_path": Param(type="string", minLength=1,
                             description="Folder to (over)write, e.g. /data/adhoc/orders-may."),
        "output_format": Param("parquet", enum=["parquet", "json", "orc"],
                               description="Spark file format."),
        "re_resolve": Param(False, type="boolean",
                            description="Resolve the specs again when this run is cleared, "
                                        "instead of re-reading the slice it first resolved."),
    },
    tags=["kafka", "spark", "example"],
) as dag:
    resolve_offsets = KafkaResolveOffsetsOperator(
        task_id="resolve_offsets",
        topics="{{ params.topics }}",
    )
    ingest = KafkaSparkIngestOperator(
        task_id="ingest",
        ranges=resolve_offsets.output,
        output_path="{{ params.output_path }}",
        output_format="{{ params.output_format }}",
    )
    resolve_offsets >> ingest
