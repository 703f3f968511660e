"""Ad-hoc Kafka -> files: fill the trigger form, get one folder of Parquet.

No schedule: a person triggers it from the UI's trigger form (or ``airflow dags trigger
kafka_adhoc --conf '{...}'``, or the REST API). Airflow checks each field against its Param
schema when the run is triggered: a topic list or an offset spec of the wrong shape is refused
with a message naming the field, and no run is created. The resolve task then checks the specs
fully (an unknown keyword, an impossible date, a topic that does not exist) before reading
anything. ``start`` and ``stop`` take any offset spec: ``earliest``, ``latest``,
``timestamp:2024-05-01T00:00:00Z``, ``timestamp:<epoch ms>``, ``committed:earliest`` (with a
group), or explicit offsets as JSON ``{"orders": {"0": 120, "1": 98}}``. Leaving them empty
means "the run's data interval", which a manual run of this DAG does not have: the run then
fails, saying so, before reading anything. Nothing is committed to any consumer group.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_kafka_spark.operators import (
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.sinks import FileSink

# The default output folder's parent: $KAFKA_SPARK_OUTPUT_ROOT (scripts/airflow-local sets it to
# its run folder's output/), else /tmp. Override per run in the form.
OUTPUT_ROOT = os.environ.get("KAFKA_SPARK_OUTPUT_ROOT", "/tmp")
# Kafka topic names: ASCII letters, digits, '.', '_' and '-'; several separated by commas.
TOPICS_PATTERN = r"^\s*[A-Za-z0-9._-]+(\s*,\s*[A-Za-z0-9._-]+)*\s*$"
# The shape of an offset spec, to refuse obvious slips in the form (a bare date without
# "timestamp:", two words, a number): a word, optionally followed by ":" and more (`earliest`,
# `committed:latest`, `timestamp:<time>`), or a JSON object. The resolve task checks the rest
# (is the keyword known, is the time valid and zoned) and names what is wrong.
SPEC_PATTERN = r"^\s*([A-Za-z]+(:\s*\S.*)?|\{.*\})\s*$"
SPEC_FORMS = ("earliest, latest, committed, committed:earliest, committed:latest, "
              "timestamp:<ISO-8601 time with a zone> (e.g. timestamp:2024-05-01T00:00:00Z), "
              "timestamp:<epoch millis>, or explicit offsets as JSON, e.g. "
              '{"orders": {"0": 120, "1": 98}, "*": "earliest"}')

with DAG(
    dag_id="kafka_adhoc",
    description="Read any offset range of Kafka topics into one folder of files",
    doc_md=__doc__,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    params={
        "topics": Param(
            "demo.events", type="string", minLength=1, maxLength=10_000, pattern=TOPICS_PATTERN,
            title="Topics",
            description="The topic to read, or several separated by commas, e.g. demo.events "
                        "or orders,refunds. Every partition of each is read.",
            examples=["demo.events"]),
        "start": Param(
            None, type=["null", "string"], pattern=SPEC_PATTERN,
            title="Start offset (inclusive)",
            description="Where to start reading in each partition: " + SPEC_FORMS + ".",
            examples=["earliest", "committed:earliest", "timestamp:2024-05-01T00:00:00Z",
                      "timestamp:1714521600000"]),
        "stop": Param(
            None, type=["null", "string"], pattern=SPEC_PATTERN,
            title="Stop offset (exclusive)",
            description="Where to stop in each partition (that offset is not read), in the same "
                        "forms as the start, e.g. latest or timestamp:2024-05-02T00:00:00Z.",
            examples=["latest", "timestamp:2024-05-02T00:00:00Z", "timestamp:1714608000000"]),
        "output_path": Param(
            f"{OUTPUT_ROOT}/kafka_adhoc", type="string", minLength=1, pattern=r"\S",
            title="Output folder",
            description="The folder this run writes (replaced if it exists, once the new output "
                        "is complete; a path on the machines that run the tasks, or a URL such "
                        "as s3a://lake/adhoc/orders-may), e.g. /tmp/kafka_adhoc/orders-may."),
        "output_format": Param(
            "parquet", type="string", enum=["parquet", "json", "orc"],
            title="Output format",
            description="The Spark file format of the output."),
        "re_resolve": Param(
            False, type="boolean",
            title="Resolve again when cleared",
            description="Off (the default): clearing this run re-reads exactly the offsets it "
                        "first resolved. On: a cleared run resolves start and stop again."),
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
        sink=FileSink("{{ params.output_path }}", format="{{ params.output_format }}"),
    )
    resolve_offsets >> ingest
