# The Airflow image of docker-compose.yml: Airflow 3 + this provider (pip install .) + Java for
# Spark's local mode, the example DAGs in /opt/airflow/dags. One image for every Airflow
# service (api-server, scheduler, dag-processor, triggerer); the command picks the service.

# The wheel, with the native Kafka module (native/: Rust, librdkafka and OpenSSL from source).
FROM python:3.11-slim-bookworm AS wheel
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake perl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=rust:1-slim-bookworm /usr/local/cargo /usr/local/cargo
COPY --from=rust:1-slim-bookworm /usr/local/rustup /usr/local/rustup
ENV PATH=/usr/local/cargo/bin:$PATH CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup
WORKDIR /src
COPY pyproject.toml README.md ./
COPY native ./native
COPY airflow_provider_kafka_spark ./airflow_provider_kafka_spark
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/airflow/project
COPY --from=wheel /wheels /wheels
# psycopg2 and asyncpg (Airflow's async engine, derived from the same URL) for the PostgreSQL
# metadata DB of docker-compose.yml.
RUN pip install --no-cache-dir /wheels/*.whl psycopg2-binary asyncpg
# tools/airflow_stack.py seeds the demo topic (airflow-init), as scripts/airflow-local does.
COPY tools ./tools
COPY dags /opt/airflow/dags

ENV AIRFLOW_HOME=/opt/airflow \
    PYSPARK_PYTHON=/usr/local/bin/python \
    SPARK_LOCAL_IP=127.0.0.1
WORKDIR /opt/airflow
ENTRYPOINT ["airflow"]
CMD ["version"]
