"""Commit a run's stop offsets to a consumer group, after the sink succeeded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_kafka_spark.arguments import checkable, parse_ranges
from airflow_provider_kafka_spark.naming import kafka_authority
from airflow_provider_kafka_spark.offsets import (
    CommitResult,
    ConfigurationError,
    OffsetRanges,
    commit_offsets,
)
from airflow_provider_kafka_spark.operators import metrics
from airflow_provider_kafka_spark.operators.base import KafkaSparkBaseOperator, bool_param
from airflow_provider_kafka_spark.operators.lineage import Lineage
from airflow_provider_kafka_spark.operators.lineage_facets import OpenLineageMixin
from airflow_provider_kafka_spark.options import check_bool, check_seconds, check_text
from airflow_provider_kafka_spark.retries import fail_at_once_when_certain


class KafkaCommitOffsetsOperator(OpenLineageMixin, KafkaSparkBaseOperator):
    """Commit each partition's ``stop`` offset of ``ranges`` for ``group_id``.

    Put this task downstream of the ingest task (``resolve >> ingest >> commit``): with
    Airflow's default ``all_success`` trigger rule the group's offsets move only after the
    sink succeeded, and a failed or cleared ingest leaves them where they were. (The official
    Kafka provider's consumer committed even on failure, apache/airflow#34213.)

    A commit never moves the group backwards: partitions already at or past their stop are
    left and reported, so re-running an old run's commit task is a no-op, not a rewind that
    makes the next ``committed`` run read data again. ``allow_rewind=True`` (or the run's
    Param ``allow_rewind``) moves them back, logged with the offsets before and after.

    The commit goes through the admin API: the group must have no running consumer.

    Returns (XCom) ``{"group_id", "offsets": [{topic, partition, offset}, ...], "unchanged":
    [{topic, partition, offset}, ...]}``: what was committed, and what was left as it was
    (with the group's offset).

    :param ranges: the resolve task's XCom (``resolve.output``) or its JSON; templated.
    :param group_id: the consumer group to commit to; defaults to the ``group_id`` the ranges
        were resolved with. Templated.
    :param allow_rewind: move partitions whose committed offset is past the stop back to it
        (a bool; the run's Param ``allow_rewind`` must be a JSON boolean too).
    :param timeout: seconds (a positive number) to wait for the cluster's answers.

    Literal arguments are checked when the DAG file is parsed, ``ranges`` and ``group_id``
    once rendered, before any cluster call; a bad one is a ``ConfigurationError`` (bad ranges:
    ``OffsetSpecError``) naming the task, the argument and what to pass.
    """

    template_fields: Sequence[str] = ("ranges", "group_id")
    ui_color = "#e0f2d7"

    def __init__(
        self,
        *,
        ranges: Any,
        group_id: str | None = None,
        allow_rewind: bool = False,
        timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ranges = ranges
        self.group_id = group_id
        self.allow_rewind = check_bool(self.task_id, "allow_rewind", allow_rewind)
        self.timeout = check_seconds(self.task_id, "timeout", timeout, example=30,
                                     meaning="how long to wait for the cluster's answers")
        self.check_arguments(rendered=False)

    def check_arguments(self, *, rendered: bool) -> None:
        """Check the template fields: literals when the DAG is parsed, all once rendered.

        Raises:
            OffsetSpecError: ``ranges`` are not offset ranges.
            ConfigurationError: a bad ``group_id``.
        """
        if checkable(self.ranges, rendered=rendered):
            self.offset_ranges()
        if not checkable(self.group_id, rendered=rendered):
            return
        if rendered and (self.group_id is None or isinstance(self.group_id, str)):
            return  # a template rendered to "" means the ranges' group, as None does
        check_text(self.task_id, "group_id", self.group_id, allow_none=True,
                   meaning="a consumer group id, or None for the ranges' group")

    def offset_ranges(self) -> OffsetRanges:
        """The (rendered) ``ranges`` argument, parsed (see :func:`parse_ranges`)."""
        return parse_ranges(self.task_id, self.ranges)

    def lineage(self, result: Any | None) -> Lineage:
        """The topics whose offsets are committed, with their ranges (OpenLineage inputs)."""
        return Lineage(kafka_authority(self.kafka_hook.get_kafka_config()),
                       ranges=self.offset_ranges())

    @fail_at_once_when_certain
    def execute(self, context: Any) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        offset_ranges = self.offset_ranges()
        group_id = self.group_id or offset_ranges.group_id
        if not group_id:
            raise ConfigurationError(
                f"{self.task_id}: no consumer group to commit to: pass group_id= to the commit "
                "operator (or to the resolve operator, whose ranges then carry it)."
            )
        allow_rewind = bool_param(self.task_id, context, "allow_rewind") or self.allow_rewind
        try:
            result = commit_offsets(self.kafka_hook.get_kafka_config(), group_id, offset_ranges,
                                    allow_rewind=allow_rewind, timeout=self.timeout)
        except Exception:
            metrics.count(self, "commit_failure", 1)
            raise
        metrics.count(self, "commit_success", 1)
        self.log.info(
            "Committed group %r: %s", group_id,
            ", ".join(f"{t}/{p}={o}" for (t, p), o in sorted(result.committed.items()))
            or "nothing",
        )
        if result.unchanged:
            self.log.info(
                "Left as they were (the group is already at or past the stop): %s",
                ", ".join(f"{t}/{p}={o}" for (t, p), o in sorted(result.unchanged.items())),
            )
        return commit_xcom(result)


def commit_xcom(result: CommitResult) -> dict[str, Any]:
    """The JSON-ready XCom of the commit task."""

    def entries(offsets: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]

    return {"group_id": result.group_id, "offsets": entries(result.committed),
            "unchanged": entries(result.unchanged)}
