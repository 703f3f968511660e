"""The Kafka sink: ``write_kafka`` behind the :class:`Sink` steps."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.offsets.errors import ConfigurationError
from airflow_provider_kafka_spark.sinks.base import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RECORD_COLUMNS: tuple[str, ...] = ("key", "value", "headers", "timestamp")
"""What a record read from Kafka keeps when it is written to Kafka unchanged."""

KafkaConfig = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


class KafkaSink(Sink):
    """Write a DataFrame to the Kafka topic ``topic`` with
    :func:`~airflow_provider_kafka_spark.spark.write.write_kafka`.

    There is nothing to stage: with ``delivery_guarantee="exactly_once"`` each Spark task
    commits its own Kafka transaction (recorded in the ledger under ``write_id``, so a re-run
    of the same ``write_id`` skips what is committed), so :meth:`commit` and :meth:`abort` do
    nothing and the manifest stays with the caller (the ingest task's XCom).

    :param kafka_config: the output cluster's librdkafka config, or a function returning it
        (called when the sink writes).
    :param topic: the output topic.
    :param delivery_guarantee: ``exactly_once``, ``at_least_once`` or ``none``.
    :param transactional_id_prefix: for ``exactly_once``.
    :param write_id: for ``exactly_once``.
    :param records_as_read: the DataFrame comes straight from ``read_kafka``: keep only
        ``key``, ``value``, ``headers`` and ``timestamp`` (its ``topic`` and ``partition``
        columns would send each record back to where it was read).
    """

    def __init__(self, kafka_config: KafkaConfig, topic: str, *,
                 delivery_guarantee: str = "exactly_once",
                 transactional_id_prefix: str | None = None, write_id: str | None = None,
                 records_as_read: bool = False) -> None:
        if not isinstance(topic, str) or not topic.strip():
            raise ConfigurationError(f"KafkaSink: topic={topic!r} is not valid; pass the name of "
                                     "the topic to write to.")
        self._kafka_config = kafka_config
        self.topic = topic.strip()
        self.delivery_guarantee = delivery_guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.write_id = write_id
        self.records_as_read = records_as_read

    def describe(self) -> dict[str, Any]:
        """``{"topic", "delivery_guarantee", "write_id", "records_written": 0,
        "skipped_tasks": []}``."""
        return {"topic": self.topic, "delivery_guarantee": self.delivery_guarantee,
                "write_id": self.write_id, "records_written": 0, "skipped_tasks": []}

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:
        """Check the output's column names (``write_kafka`` checks their types too, before
        it writes).

        Raises:
            WriteConfigError: a column ``write_kafka`` does not take, or no ``value``.
        """
        from airflow_provider_kafka_spark.spark.write import ACCEPTED_COLUMNS
        from airflow_provider_kafka_spark.spark.write_errors import WriteConfigError

        columns = self._selected(shaped).columns
        unknown = [c for c in columns if c not in ACCEPTED_COLUMNS]
        if unknown or "value" not in columns:
            raise WriteConfigError(
                f"the records to write to topic {self.topic!r} have the columns {columns}: "
                + (f"{unknown} cannot be written" if unknown else "no 'value'")
                + f". write_kafka takes {list(ACCEPTED_COLUMNS)} and needs 'value'; make the "
                "transform or sql return those (select or rename the columns). Nothing was read "
                "or written."
            )

    def write(self, df: DataFrame) -> dict[str, Any]:
        """``write_kafka``; returns :meth:`describe` with ``records_written`` and
        ``skipped_tasks``."""
        from airflow_provider_kafka_spark.spark import kafka_errors
        from airflow_provider_kafka_spark.spark.write import write_kafka

        config = self._kafka_config() if callable(self._kafka_config) else self._kafka_config
        with kafka_errors():
            result = write_kafka(
                self._selected(df), config, topic=self.topic,
                delivery_guarantee=self.delivery_guarantee,
                transactional_id_prefix=self.transactional_id_prefix, write_id=self.write_id,
            )
        return {**self.describe(), "records_written": result.records_written,
                "skipped_tasks": list(result.skipped_tasks)}

    def _selected(self, df: DataFrame) -> DataFrame:
        if not self.records_as_read:
            return df
        return df.select(*[c for c in RECORD_COLUMNS if c in df.columns])
