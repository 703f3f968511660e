"""docker-compose.yml runs the same Airflow as scripts/airflow-local: the same services, the
same environment variable names, the same ports. Fast, no Docker needed: it parses the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.airflow_stack import DEFAULT_PORT, POSTGRES_DATABASE, SERVICES, stack_settings
from tools.postgres_server import Connection

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_SERVICES = [f"airflow-{name}" for name in SERVICES]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


@pytest.fixture(scope="module")
def launcher_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What scripts/airflow-local sets for its services (default port)."""
    return stack_settings(tmp_path_factory.mktemp("stack"), DEFAULT_PORT, "127.0.0.1:9092")


def test_every_launcher_service_is_a_compose_service_running_that_command(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "postgres", "airflow-init", *AIRFLOW_SERVICES} <= set(services)
    for name in SERVICES:
        service = services[f"airflow-{name}"]
        assert service["command"] == [name]
        assert service["build"] == "."
        assert service["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("service", [*AIRFLOW_SERVICES, "airflow-init"])
def test_compose_sets_every_variable_the_launcher_sets(
        compose: dict[str, Any], launcher_env: dict[str, str], service: str) -> None:
    env = compose["services"][service]["environment"]
    assert sorted(set(launcher_env) - set(env)) == []


def test_same_values_where_they_do_not_depend_on_the_machine(
        compose: dict[str, Any], launcher_env: dict[str, str]) -> None:
    env = compose["services"]["airflow-scheduler"]["environment"]
    same = ["AIRFLOW__CORE__EXECUTOR", "AIRFLOW__CORE__PARALLELISM", "AIRFLOW__CORE__LOAD_EXAMPLES",
            "AIRFLOW__CORE__AUTH_MANAGER", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS",
            "AIRFLOW__API__PORT", "SPARK_LOCAL_IP", "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT",
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT", "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"]
    assert {k: str(env[k]) for k in same} == {k: launcher_env[k] for k in same}
    connection = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])
    assert connection["conn_type"] == "kafka"
    assert connection["extra"]["bootstrap.servers"] == "kafka:19092"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == \
        f"http://airflow-api-server:{DEFAULT_PORT}/execution/"


def test_the_metadata_db_is_postgresql_through_the_same_drivers_as_the_deployed_tests(
        compose: dict[str, Any]) -> None:
    """The launcher's `--db postgres` (tests/deployed) and compose: psycopg2 in the URL, and
    asyncpg for the async engine Airflow derives from it, which the image installs too."""
    env = compose["services"]["airflow-scheduler"]["environment"]
    launcher = Connection("127.0.0.1", 5432, "postgres", POSTGRES_DATABASE, pid=0).sqlalchemy_url
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].split("://")[0] == \
        launcher.split("://")[0] == "postgresql+psycopg2"
    assert "psycopg2-binary asyncpg" in (ROOT / "Dockerfile").read_text()


def test_same_ports_published_on_loopback(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["airflow-api-server"]["ports"] == [f"127.0.0.1:{DEFAULT_PORT}:{DEFAULT_PORT}"]
    assert services["kafka"]["ports"] == ["127.0.0.1:9092:9092"]
    listeners = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "INTERNAL://kafka:19092" in listeners


def test_a_schema_registry_runs_beside_the_broker(compose: dict[str, Any]) -> None:
    registry = compose["services"]["schema-registry"]
    assert registry["image"].startswith("confluentinc/cp-schema-registry:")
    assert registry["ports"] == ["127.0.0.1:8085:8081"]
    assert registry["environment"]["SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS"] == \
        "PLAINTEXT://kafka:19092"


def test_the_image_installs_this_repo_java_and_the_example_dags() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "openjdk-17-jre-headless" in dockerfile
    # The wheel is built with the native module (Rust) in a first stage, installed in the second.
    assert "COPY native ./native" in dockerfile
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in dockerfile
    assert "pip install --no-cache-dir /wheels/*.whl" in dockerfile
    assert "COPY dags /opt/airflow/dags" in dockerfile
