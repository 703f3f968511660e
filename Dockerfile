# The Airflow image of docker-compose.yml: Airflow 3 + this provider (pip install .) + Java for
# Spark's local mode, the example DAGs in /opt/airflow/dags. One image for every Airflow
# service (api-server, scheduler, dag-processor, triggerer); the command picks the service.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/airflow/project
COPY pyproject.toml README.md ./
COPY airflow_provider_kafka_spark ./airflow_provider_kafka_spark
# psycopg2 for the PostgreSQL metadata DB of docker-compose.yml.
RUN pip install --no-cache-dir . psycopg2-binary
# tools/airflow_stack.py seeds the demo topic (airflow-init), as scripts/airflow-local does.
COPY tools ./tools
COPY dags /opt/airflow/dags

ENV AIRFLOW_HOME=/opt/airflow \
    PYSPARK_PYTHON=/usr/local/bin/python \
    SPARK_LOCAL_IP=127.0.0.1
WORKDIR /opt/airflow
ENTRYPOINT ["airflow"]
CMD ["version"]
