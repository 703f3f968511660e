"""The OpenLineage datasets and facets of a :class:`~.lineage.Lineage`; imported only when the
OpenLineage provider asks an operator for its lineage (the ``[openlineage]`` extra)."""

from __future__ import annotations

from typing import Any

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    InputDatasetFacet,
    input_statistics_input_dataset,
    output_statistics_output_dataset,
)

from airflow_provider_kafka_spark.operators.lineage import OFFSET_RANGES_FACET, Lineage


@attr.define
class KafkaOffsetRangesInputDatasetFacet(InputDatasetFacet):
    """The resolved offset ranges read from one topic: ``[start, stop)`` per partition, and
    the isolation level they were resolved with."""

    isolationLevel: str  # noqa: N815 (OpenLineage facet fields are camelCase)
    partitions: list[dict[str, int]]


def operator_lineage(lineage: Lineage) -> OperatorLineage:
    """The provider's ``OperatorLineage`` of ``lineage``."""
    namespace = f"kafka://{lineage.kafka_authority}"
    topics = (tuple(dict.fromkeys(r.topic for r in lineage.ranges)) if lineage.ranges is not None
              else lineage.topics)
    inputs = []
    for topic in topics:
        facets: dict[str, Any] = {}
        if lineage.ranges is not None:
            facets[OFFSET_RANGES_FACET] = KafkaOffsetRangesInputDatasetFacet(
                isolationLevel=lineage.ranges.isolation_level,
                partitions=[{"partition": r.partition, "start": r.start, "stop": r.stop}
                            for r in lineage.ranges if r.topic == topic])
        if lineage.records is not None:
            facets["inputStatistics"] = (
                input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                    rowCount=lineage.records.get(topic, 0)))
        inputs.append(InputDataset(namespace=namespace, name=topic, inputFacets=facets))
    outputs = []
    if lineage.output is not None:
        facets = {}
        if lineage.output_records is not None:
            facets["outputStatistics"] = (
                output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                    rowCount=lineage.output_records))
        outputs.append(OutputDataset(namespace=lineage.output[0], name=lineage.output[1],
                                     outputFacets=facets))
    return OperatorLineage(inputs=inputs, outputs=outputs)
