"""Provider metadata read by Airflow's ``apache_airflow_provider`` entry point.

No connection type is registered: the Kafka hook reads the ``kafka`` connection of the
official ``apache-airflow-providers-apache-kafka`` (extra JSON = librdkafka config), and the
Spark hook reads ``spark`` / ``spark_connect`` connections; registering those types here would
clash with the providers that own them. Importing this module imports neither Airflow nor Spark.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_kafka_spark import __version__

_INTEGRATION = "Kafka on Spark"
_PACKAGE = "airflow_provider_kafka_spark"
DOCS_URL = "https://airflow-provider-kafka-spark.readthedocs.io/"
"""The documentation site (mkdocs.yml's ``site_url``). Airflow's providers page links the
package to it: Airflow 3.3 reads it from the installed distribution's ``Project-URL:
Documentation`` (pyproject's ``[project.urls]``) into the provider info's
``documentation-url``, which this function gives too."""


def get_provider_info() -> dict[str, Any]:
    """Describe this package to Airflow (``airflow providers list``)."""
    return {
        "package-name": "airflow-provider-kafka-spark",
        "name": "Kafka on Spark (bounded ingestion)",
        "description": "Bounded, replayable Kafka batch ingestion on Apache Spark: "
        "offset ranges resolved per run, read by Spark, written exactly once.",
        "versions": [__version__],
        "documentation-url": DOCS_URL,
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://kafka.apache.org/documentation/",
                "tags": ["apache", "kafka", "spark"],
            }
        ],
        "hooks": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [f"{_PACKAGE}.hooks.kafka", f"{_PACKAGE}.hooks.spark",
                                   f"{_PACKAGE}.hooks.schema_registry"],
            }
        ],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    f"{_PACKAGE}.operators.resolve",
                    f"{_PACKAGE}.operators.ingest",
                    f"{_PACKAGE}.operators.commit",
                ],
            }
        ],
        "sensors": [
            {"integration-name": _INTEGRATION, "python-modules": [f"{_PACKAGE}.sensors.kafka"]}
        ],
        "triggers": [
            {"integration-name": _INTEGRATION,
             "python-modules": [f"{_PACKAGE}.triggers.kafka", f"{_PACKAGE}.triggers.intervals"]}
        ],
        # `airflow kafka-spark audit`: Airflow (3.2+) adds the commands these functions return;
        # `python -m airflow_provider_kafka_spark audit` is the same without Airflow's CLI.
        "cli": [f"{_PACKAGE}.cli.get_airflow_cli_commands"],
    }
