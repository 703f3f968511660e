"""Reading a bounded slice of Kafka with Spark: ``read_kafka`` (``reader``), the
``kafka_bounded`` Python data source and its split reader (``datasource``, ``splits``), the
translation of librdkafka settings for Spark's own Kafka source (``java_client``), decoding
(``decode``) and per-partition statistics (``summary``). The public names are re-exported by
:mod:`airflow_provider_kafka_spark.spark`."""
