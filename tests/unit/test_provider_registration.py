"""The package registers as an Airflow provider and imports cheaply."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from airflow_provider_kafka_spark import __version__
from airflow_provider_kafka_spark.get_provider_info import DOCS_URL, get_provider_info

ROOT = Path(__file__).resolve().parents[2]


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


def test_airflow_links_the_provider_to_its_documentation_site(tmp_path: Path):
    # One address: the provider info's, the distribution's Documentation URL and the site's.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    site_url = re.search(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    assert site_url is not None
    assert get_provider_info()["documentation-url"] == DOCS_URL == \
        project["urls"]["Documentation"] == site_url.group(1)
    # What Airflow's providers page links to: the installed distribution's Project-URL (a
    # package without one gets a link to airflow.apache.org/docs/<package>/<version>/).
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    code = ("from airflow.providers_manager import ProvidersManager; "
            "print(ProvidersManager().providers['airflow-provider-kafka-spark']"
            ".data['documentation-url'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                         text=True).stdout
    assert out.strip().splitlines()[-1] == DOCS_URL
