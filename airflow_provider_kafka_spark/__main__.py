"""``python -m airflow_provider_kafka_spark audit ...``: see :mod:`airflow_provider_kafka_spark.cli`."""

from airflow_provider_kafka_spark.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
