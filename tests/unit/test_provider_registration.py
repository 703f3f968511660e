"""The package registers as an Airflow provider and imports cheaply."""

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_provider_kafka_spark import __version__


def test_airflow_providers_list_shows_the_package(tmp_path: Path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "providers", "list", "-o", "json"],
        env=env, check=True, capture_output=True, text=True,
    ).stdout
    providers = {p["package_name"]: p for p in json.loads(out[out.index("["):])}
    assert providers["airflow-provider-kafka-spark"]["version"] == __version__


def test_importing_the_offset_core_imports_neither_spark_nor_airflow():
    code = (
        "import sys, airflow_provider_kafka_spark, airflow_provider_kafka_spark.offsets; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'airflow')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
