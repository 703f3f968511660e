"""Commit a run's stop offsets to a consumer group, after the sink succeeded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_kafka_spark.offsets import OffsetRanges, OffsetSpecError, commit_offsets
from airflow_provider_kafka_spark.operators.base import KafkaSparkBaseOperator


class KafkaCommitOffsetsOperator(KafkaSparkBaseOperator):
    """Commit each partition's ``stop`` offset of ``ranges`` for ``group_id``.

    Put this task downstream of the ingest task (``resolve >> ingest >> commit``): with
    Airflow's default ``all_success`` trigger rule the group's offsets move only after the
    sink succeeded, and a failed or cleared ingest leaves them where they were. (The official
    Kafka provider's consumer committed even on failure, apache/airflow#34213.)

    The commit goes through the admin API: the group must have no running consumer.

    :param ranges: the resolve task's XCom (``resolve.output``) or its JSON; templated.
    :param group_id: the consumer group to commit to; defaults to the ``group_id`` the ranges
        were resolved with. Templated.
    """

    template_fields: Sequence[str] = ("ranges", "group_id")
    ui_color = "#e0f2d7"

    def __init__(
        self,
        *,
        ranges: Any,
        group_id: str | None = None,
        timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ranges = ranges
        self.group_id = group_id
        self.timeout = timeout

    def execute(self, context: Any) -> dict[str, Any]:
        offset_ranges = OffsetRanges.from_json(self.ranges)
        group_id = self.group_id or offset_ranges.group_id
        if not group_id:
            raise OffsetSpecError(
                "no consumer group to commit to: pass group_id= to the commit operator "
                "(or to the resolve operator, whose ranges then carry it)."
            )
        committed = commit_offsets(
            self.kafka_hook.get_kafka_config(), group_id, offset_ranges, timeout=self.timeout
        )
        self.log.info(
            "Committed group %r: %s", group_id,
            ", ".join(f"{t}/{p}={o}" for (t, p), o in sorted(committed.items())) or "nothing",
        )
        return committed_dict(group_id, committed)


def committed_dict(group_id: str, committed: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    """The JSON-ready XCom of the commit task."""
    return {
        "group_id": group_id,
        "offsets": [{"topic": t, "partition": p, "offset": o}
                    for (t, p), o in sorted(committed.items())],
    }
