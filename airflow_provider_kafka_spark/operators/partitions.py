"""A run's partition as its slice of Kafka: ``partition_date`` .. the next tick of the DAG's
:class:`~airflow.sdk.CronPartitionTimetable`, or what the user's function makes of the
partition key (Airflow 3.3 partitioned runs have a ``partition_key`` and a ``partition_date``
but no data interval)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from airflow_provider_kafka_spark.causes import classify
from airflow_provider_kafka_spark.errors import ConfigurationError, TransientError
from airflow_provider_kafka_spark.offsets import Timestamp

PartitionSlice = Callable[[str], tuple[Any, Any]]
"""The user's map of a partition key to its ``(start, stop)``: each a ``datetime`` (aware) or
an offset spec (``"timestamp:..."``, ``"earliest"`` ...)."""


@dataclass(frozen=True)
class RunPartition:
    """A partitioned run's ``partition_key`` and ``partition_date`` (None when Airflow gave
    none, e.g. a key of one's own triggered through the REST API)."""

    key: str
    date: datetime | None


def partition_bounds(task_id: str, partition: RunPartition, timetable: Any,
                     partition_slice: PartitionSlice | None) -> tuple[Any, Any]:
    """The ``(start, stop)`` of ``partition``: ``partition_slice(key)`` when given; else, on a
    :class:`~airflow.sdk.CronPartitionTimetable`, the ``Timestamp`` of the partition's start
    and that of the next cron tick (the start is the ``partition_date``, or the key read with
    the timetable's ``key_format`` in its timezone).

    Raises:
        ConfigurationError: the function failed or returned something else than two bounds;
            or, without a function, a timetable that does not say how long a partition is, or
            a key that is not a tick of the cron (each naming the key and what to pass).
    """
    if partition_slice is not None:
        return _sliced(task_id, partition.key, partition_slice)
    from airflow.sdk import CronPartitionTimetable

    if not isinstance(timetable, CronPartitionTimetable):
        raise ConfigurationError(
            f"{task_id}: the run's partition key {partition.key!r} does not say which slice of "
            f"Kafka to read: the DAG's timetable ({type(timetable).__name__}) has no partition "
            "length. Pass partition_slice=<a function of the key returning (start, stop)> to "
            "the operator, schedule the DAG with CronPartitionTimetable, or trigger the run with "
            "the Params 'start' and 'stop'.")
    zone = _zone(timetable.timezone)
    start = partition.date or _key_date(task_id, partition.key, timetable, zone)
    start = datetime.fromtimestamp(start.timestamp(), tz=zone)  # a plain datetime for croniter
    from croniter import croniter

    stop = croniter(timetable.expression, start).get_next(datetime)
    if croniter(timetable.expression, stop).get_prev(datetime) != start:
        raise ConfigurationError(
            f"{task_id}: the run's partition {partition.key!r} ({start.isoformat()}) is not a "
            f"tick of the DAG's cron {timetable.expression!r}, so its end is not defined. "
            "Trigger the run with a partition key the timetable makes (its key_format at a "
            "tick), or pass partition_slice=<a function of the key returning (start, stop)>.")
    return Timestamp.from_datetime(start), Timestamp.from_datetime(stop)


def unkeyed_run_of_partitioned_dag(task_id: str, timetable: Any
                                   ) -> tuple[None, None] | ConfigurationError:
    """``(None, None)`` for a run without a partition key of a DAG that is not partitioned;
    for one of a partitioned DAG (a manual run without a key), the error that says to pass one
    (raised only when a side of the run has no other source, such as the Params)."""
    from airflow.sdk import CronPartitionTimetable, PartitionedAssetTimetable

    if not (getattr(timetable, "partitioned", False)
            or isinstance(timetable, CronPartitionTimetable | PartitionedAssetTimetable)):
        return None, None
    return ConfigurationError(
        f"{task_id}: this run of a partitioned DAG ({type(timetable).__name__}) has no "
        "partition key, so it has no slice of Kafka to read. Trigger it with a partition key "
        "(the REST API's POST /api/v2/dags/<dag_id>/dagRuns with \"partition_key\": "
        "\"2024-05-01T09:00:00\", or a backfill by partition), or with the Params 'start' and "
        "'stop'.")


def check_partition_slice(task_id: str, value: Any) -> PartitionSlice | None:
    """``partition_slice`` as given (None or a callable).

    Raises:
        ConfigurationError: anything else, named.
    """
    if value is None or callable(value):
        return value
    raise ConfigurationError(
        f"{task_id}: partition_slice={value!r} is not a function: pass a function of the "
        "partition key returning its (start, stop), e.g. lambda key: (datetime.fromisoformat("
        "key.split('|')[1]), ...), or None to read the partition of a CronPartitionTimetable.")


def _sliced(task_id: str, key: str, partition_slice: PartitionSlice) -> tuple[Any, Any]:
    """``partition_slice(key)``, checked: two bounds, each a spec or an aware datetime."""
    try:
        bounds = partition_slice(key)
    except Exception as exc:
        cause = classify(exc, otherwise=False)  # a function of the key: deterministic, unless
        if cause.retryable:  # it asked a server that did not answer
            raise TransientError(
                f"{task_id}: partition_slice failed for the partition key {key!r}: "
                f"{type(exc).__name__}: {exc}. {cause.says()}") from exc
        raise ConfigurationError(
            f"{task_id}: partition_slice failed for the partition key {key!r}: "
            f"{type(exc).__name__}: {exc}. Make it return (start, stop) for every key the DAG's "
            "runs have.") from exc
    if not (isinstance(bounds, tuple | list) and len(bounds) == 2):
        raise ConfigurationError(
            f"{task_id}: partition_slice({key!r}) returned {bounds!r}: return a pair (start, "
            "stop), each an aware datetime or an offset spec such as 'timestamp:...'.")
    checked = []
    for side, bound in zip(("start", "stop"), bounds, strict=True):
        if isinstance(bound, datetime):
            if bound.tzinfo is None:
                raise ConfigurationError(
                    f"{task_id}: partition_slice({key!r}) returned a {side} without a time zone "
                    f"({bound.isoformat()}): return aware datetimes (tzinfo=UTC).")
            bound = Timestamp.from_datetime(bound)
        elif not isinstance(bound, str) or not bound:
            raise ConfigurationError(
                f"{task_id}: partition_slice({key!r}) returned the {side} {bound!r}: return an "
                "aware datetime or an offset spec such as 'timestamp:...'.")
        checked.append(bound)
    return checked[0], checked[1]


def _key_date(task_id: str, key: str, timetable: Any, zone: tzinfo) -> datetime:
    """The partition start written in ``key`` (the timetable's ``key_format``, local time)."""
    try:
        return datetime.strptime(key, timetable.key_format).replace(tzinfo=zone)
    except ValueError:
        raise ConfigurationError(
            f"{task_id}: the run's partition key {key!r} is not a time in the DAG's key_format "
            f"{timetable.key_format!r}. Trigger the run with a key of that format (e.g. "
            f"{datetime(2026, 3, 10, 9, tzinfo=UTC).strftime(timetable.key_format)!r}), or "
            "pass partition_slice=<a function of the key returning (start, stop)>.") from None


def _zone(timezone: str | tzinfo) -> tzinfo:
    """The timetable's time zone (a name, or pendulum's Timezone/FixedTimezone: tzinfos)."""
    return ZoneInfo(timezone) if isinstance(timezone, str) else timezone

