"""The OpenLineage side of the operators: :class:`OpenLineageMixin` gives each operator the
``get_openlineage_facets_on_start/_on_complete/_on_failure`` methods that the OpenLineage
provider's ``DefaultExtractor`` calls, from one :class:`~.lineage.Lineage` the operator
describes itself with.

The OpenLineage provider and client are imported only inside those calls (the ``[openlineage]``
extra): the package works without them.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.operators.lineage import OFFSET_RANGES_FACET, Lineage

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage


class OpenLineageMixin:
    """``get_openlineage_facets_on_start/_on_complete/_on_failure`` from one method each
    operator implements, :meth:`lineage`, which gets the task's XCom ``return_value`` on
    completion and ``None`` at start and on failure."""

    task_id: str

    def lineage(self, result: Any | None) -> Lineage:
        """What this task reads and writes (``result``: its XCom, once it completed)."""
        raise NotImplementedError

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """Lineage known before the task runs (from the rendered arguments)."""
        return operator_lineage(self.lineage(None))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """Lineage of the completed task, with what it returned."""
        return operator_lineage(self.lineage(task_instance.xcom_pull(task_ids=self.task_id)))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """Lineage of the failed task: what it was to read and write."""
        return operator_lineage(self.lineage(None))


@cache
def offset_ranges_facet() -> type:
    """The class of the ``kafkaOffsetRanges`` input facet: the resolved offset ranges read from
    one topic (``[start, stop)`` per partition) and the isolation level they were resolved
    with. Built on first use, so that importing this module needs no OpenLineage client."""
    import attr
    from openlineage.client.facet_v2 import InputDatasetFacet

    @attr.define
    class KafkaOffsetRangesInputDatasetFacet(InputDatasetFacet):
        """The resolved offset ranges read from one topic: ``[start, stop)`` per partition, and
        the isolation level they were resolved with."""

        isolationLevel: str  # noqa: N815 (OpenLineage facet fields are camelCase)
        partitions: list[dict[str, int]]

    return KafkaOffsetRangesInputDatasetFacet


def operator_lineage(lineage: Lineage) -> OperatorLineage:
    """The provider's ``OperatorLineage`` of ``lineage``."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (
        input_statistics_input_dataset,
        output_statistics_output_dataset,
    )

    namespace = f"kafka://{lineage.kafka_authority}"
    topics = (tuple(dict.fromkeys(r.topic for r in lineage.ranges)) if lineage.ranges is not None
              else lineage.topics)
    inputs = []
    for topic in topics:
        facets: dict[str, Any] = {}
        if lineage.ranges is not None:
            facets[OFFSET_RANGES_FACET] = offset_ranges_facet()(
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
