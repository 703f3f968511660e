"""Everything the test tiers share, in one place: a test module imports test code only from
here (and gets fixtures from its own tier's conftest, the root conftest and the plugin
``dag_runs``), never another test module or another tier's conftest.

Helpers that ``tools/`` and ``benchmarks/`` use too live in ``tools/`` and tests import them
from there (``tools/`` never imports ``tests/``): ``tools/kafka_records.py`` (exact records in
the real broker and read back), ``tools/write_kafka_rows.py`` (the deterministic rows of
exactly-once writes and a read_committed reader), ``tools/killpoint_harness.py`` (the
kill-point harness). Here:

* ``airflow_env``: points Airflow at a throwaway home; the root conftest imports it before
  anything imports Airflow (Airflow reads its configuration once, at first import).
* ``faults``: the slow reads and writes of the fault tests (``tools/fault_workloads.py``) and
  how to find the broker that matters (leaders, coordinators).
* ``cluster``, ``cluster_jobs``: running Spark applications on the standalone cluster.
* ``dag_runs`` (a pytest plugin, loaded by the root conftest): ``run_dag`` and the metadata DB
  and ``kafka_default`` connection it needs.
* ``dag_data``: the hours, records and readers of the example DAG tests.
* ``deployed``, ``browser``: the deployed Airflow's REST API client and the UI's browser.
* ``secured``: helpers of the tests against the secured broker.
* ``model_exactness``: the model behind ``tests/integration/test_model_exactness.py``.
"""
