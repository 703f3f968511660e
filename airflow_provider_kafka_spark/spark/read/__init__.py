"""Reading a bounded slice of Kafka with Spark: ``read_kafka`` (``reader``), the options of
the source that reads it, with the translation of librdkafka settings for Spark's own Kafka
source (``sources``), the ``kafka_bounded`` Python data source and its split reader
(``datasource``, ``splits``), decoding (``decode``) and what a read counted: per-partition
statistics and lost offsets (``summary``). The public names are re-exported by
:mod:`airflow_provider_kafka_spark.spark`."""
