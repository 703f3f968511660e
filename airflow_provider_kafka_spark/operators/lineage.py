"""What the operators read and write, as OpenLineage datasets and Airflow assets name it,
free of OpenLineage's classes (:class:`Lineage`); the OpenLineage provider's side is
:mod:`~airflow_provider_kafka_spark.operators.lineage_facets`.
The names themselves: :mod:`airflow_provider_kafka_spark.naming`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_provider_kafka_spark.offsets import OffsetRanges

__all__ = ["OFFSET_RANGES_FACET", "Lineage"]

OFFSET_RANGES_FACET = "kafkaOffsetRanges"
"""The key of the input facet carrying a topic's resolved offset ranges."""


@dataclass(frozen=True)
class Lineage:
    """What an operator reads and writes, in OpenLineage's terms but free of its classes.

    :param kafka_authority: ``host:port`` of the input cluster (the inputs' namespace).
    :param topics: the input topics, when the ranges are not known yet.
    :param ranges: the resolved ranges, when known: the input topics, each with its
        ``kafkaOffsetRanges`` facet.
    :param records: records read per topic, when the task completed (``inputStatistics``).
    :param output: the output ``(namespace, name)``, if the operator writes one.
    :param output_records: records written, when the task completed (``outputStatistics``).
    """

    kafka_authority: str
    topics: tuple[str, ...] = ()
    ranges: OffsetRanges | None = None
    records: Mapping[str, int] | None = None
    output: tuple[str, str] | None = None
    output_records: int | None = None
