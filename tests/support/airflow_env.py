"""Point Airflow at a throwaway home (SQLite metadata DB, this repo's ``dags/``) before anything
imports Airflow: Airflow reads its configuration once, at import time.

The root conftest imports this module first, before any test module can import Airflow; a
test module that imports Airflow imports it too, to say so. The metadata DB is migrated lazily,
by the ``airflow_db`` fixture of ``tests/support/dag_runs.py``, only when DAGs run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = ROOT / "dags"

if "AIRFLOW_PROVIDER_KAFKA_SPARK_TEST_HOME" in os.environ:
    AIRFLOW_HOME = Path(os.environ["AIRFLOW_PROVIDER_KAFKA_SPARK_TEST_HOME"])
else:
    if "airflow" in sys.modules:
        raise RuntimeError(
            "Airflow was imported before tests/support/airflow_env.py could point it at a test "
            "home; import tests.support.airflow_env first (or run these tests in their own "
            "process)."
        )
    AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-home-"))
    atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
    os.environ["AIRFLOW_PROVIDER_KAFKA_SPARK_TEST_HOME"] = str(AIRFLOW_HOME)
    os.environ.update({
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    })
