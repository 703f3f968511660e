"""Where an ingest's records go: one :class:`Sink` per destination, one module each.

    sink.prepare(spark, shaped)   checks on the driver, before anything is read
    sink.intake(given)            ingest asks once how the sink takes the records (Intake)
    sink.write(df)                the Spark job
    sink.commit(manifest)         make the write visible (files: swap the staged folder in)
    sink.abort()                  after any failure, instead of commit

* :class:`FileSink` (``files/``): a folder of files per run, staged next to the run's
  folder and swapped in only when complete, with a manifest; on S3 published by a
  conditional PUT of the manifest instead (:func:`published_files` reads exactly that run);
* :class:`KafkaSink` (``kafka.py``): a Kafka topic through ``write_kafka`` (exactly-once by
  default; see ``docs/exactly-once.md``);
* :class:`IcebergSink`, :class:`DeltaSink` (``tables/``): a lakehouse table, one table commit
  per run recording the run and its offsets (see ``docs/tables.md``).

In the ingest operator a sink is an argument (``sink=FileSink("/data/{{ ds }}")``): Airflow
renders its ``template_fields``, and :meth:`Sink.for_run` fills in from :class:`RunInfo` what it
was not given (write ids, the application, the run).

No Airflow import, and Spark is imported only when a sink is used, so the Airflow layer can
import this package while a DAG file is parsed. Imports point one way:
``operators/ -> sinks/ -> spark/ -> offsets/``. Usable from a plain PySpark job::

    sink = FileSink("s3a://lake/events/2024-05-01T00", format="parquet")
    sink.prepare(spark, df.limit(0))
    try:
        sink.write(df)
        sink.commit({"note": "anything JSON-ready"})
    except BaseException:
        sink.abort()
        raise
"""

from airflow_provider_kafka_spark.errors import SinkError
from airflow_provider_kafka_spark.s3 import S3Settings
from airflow_provider_kafka_spark.sinks.base import RunInfo, Sink
from airflow_provider_kafka_spark.sinks.files import (
    MANIFEST_NAME,
    FileSink,
    PublishConflictError,
    published_files,
)
from airflow_provider_kafka_spark.sinks.kafka import KafkaSink
from airflow_provider_kafka_spark.sinks.tables import DeltaSink, IcebergSink, TableSink

__all__ = ["MANIFEST_NAME", "DeltaSink", "FileSink", "IcebergSink", "KafkaSink",
           "PublishConflictError", "RunInfo", "S3Settings", "Sink", "SinkError", "TableSink",
           "published_files"]
