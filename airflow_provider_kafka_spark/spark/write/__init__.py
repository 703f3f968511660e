"""Writing a DataFrame to Kafka: ``write_kafka`` (``writer``) and how its exactly-once
guarantee works: the ledger of committed tasks (``ledger``) and the transactional producer
protocol run by each Spark task (``transactions``). The public names are re-exported by
:mod:`airflow_provider_kafka_spark.spark`."""
