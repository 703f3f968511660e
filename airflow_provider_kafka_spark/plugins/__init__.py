"""Airflow plugins of this provider: the offsets view (:mod:`.offsets_view`), a page of the
Airflow UI that shows what a resolve task's runs read, partition by partition.

Registered through the ``airflow.plugins`` entry point (``pyproject.toml``), which Airflow
loads in every installation. Importing this package imports neither FastAPI nor Airflow's API
server: task processes load plugins too, and pay nothing for this one.
"""
