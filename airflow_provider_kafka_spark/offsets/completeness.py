"""Is the data there yet: partition discovery and interval completeness, as blocking checks
of a librdkafka config (no Airflow).

The sensors run a check in each poke and the triggers in a worker thread of the triggerer;
each check asks the cluster afresh and keeps no state, so running one twice gives the same
answer. A check's arguments are checked here, once, for all three
(:func:`check_min_partitions`, :func:`check_idle_timeout`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_kafka_spark.errors import OffsetResolutionError
from airflow_provider_kafka_spark.offsets.cluster import (
    Key,
    admin_client,
    list_partitions,
    newest_timestamps,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.offsets.resolve import timestamp_stops
from airflow_provider_kafka_spark.offsets.subscription import Subscription
from airflow_provider_kafka_spark.options import check_positive_int, check_seconds


@dataclass(frozen=True)
class Check:
    """The outcome of one check: ``done``, a JSON-ready ``payload``, and, while not done,
    what is still awaited (``waiting_for``, for the task log)."""

    done: bool
    payload: dict[str, Any] = field(default_factory=dict)
    waiting_for: str = ""


def check_min_partitions(owner: str, value: Any, *, allow_text: bool = False) -> int:
    """``value`` as a ``min_partitions``: a positive int (a string of digits too, with
    ``allow_text``, as a template renders it).

    Raises:
        ConfigurationError: anything else, naming ``owner``.
    """
    checked = check_positive_int(owner, "min_partitions", value, example=3,
                                 meaning="how many partitions to wait for",
                                 allow_text=allow_text)
    assert checked is not None
    return checked


def check_idle_timeout(owner: str, value: Any) -> float | None:
    """``value`` as an ``idle_timeout``: a positive number of seconds or ``timedelta``, or
    ``None`` (no idleness). Zero or a negative one would make every partition idle, i.e. the
    interval complete at once.

    Raises:
        ConfigurationError: anything else, naming ``owner``.
    """
    return check_seconds(owner, "idle_timeout", value, allow_none=True, example=600,
                         meaning="how long a partition without new records waits before it "
                                 "counts as idle")


def check_partitions(kafka_config: KafkaConfig | Mapping[str, Any],
                     subscription: Subscription, min_partitions: int, *, timeout: float = 30.0) -> Check:
    """Done when the subscription has at least ``min_partitions`` partitions.

    Unknown topics and a pattern matching nothing count as "not yet" (topic creation is what
    the sensor waits for); the payload's ``partitions`` lists ``[topic, partition]`` pairs.

    Raises:
        ConfigurationError: ``min_partitions`` is not a positive int.
    """
    check_min_partitions("check_partitions", min_partitions)
    try:
        found = list_partitions(kafka_config, subscription, timeout=timeout)
    except OffsetResolutionError as exc:
        return Check(False, waiting_for=str(exc))
    if len(found) < min_partitions:
        return Check(False, waiting_for=(
            f"{subscription} has {len(found)} partition(s), waiting for {min_partitions}."
        ))
    return Check(True, {"partitions": [[t, p] for t, p in found]})


def check_interval_complete(kafka_config: KafkaConfig | Mapping[str, Any],
                            subscription: Subscription, end_ms: int, idle_timeout: float | None, *,
                            timeout: float = 30.0) -> Check:
    """Done when no record that a ``read_committed`` reader could see with a timestamp before
    ``end_ms`` can still appear below the stop that ``resolve_offsets`` would return for
    ``timestamp:<end_ms>``.

    A partition is complete when a record (or transaction marker) with timestamp ``>= end_ms``
    is below its last stable offset: the stop is final (``timestamp_stops``). A transaction
    still open that began before that point holds the partition back whatever its age, since
    its records may yet be committed inside the interval. With ``idle_timeout`` (seconds), a
    partition without a record ``>= end_ms`` and without an open transaction is also complete
    when it is idle: it has no record, or its newest record is older than ``idle_timeout`` by
    the wall clock (Flink's source idleness, applied to batch completeness; records that arrive
    later with older timestamps fall into a later interval). The payload's ``idle`` lists the
    partitions that were complete only by idleness.

    Raises:
        ConfigurationError: ``idle_timeout`` is not ``None`` or a positive number of seconds
            (a negative one would make every partition idle: complete at once).
    """
    check_idle_timeout("check_interval_complete", idle_timeout)
    admin = admin_client(KafkaConfig.of(kafka_config))
    try:
        partitions = list_partitions(admin, subscription, timeout=timeout)
        stops = timestamp_stops(admin, partitions, end_ms, timeout=timeout)
    except OffsetResolutionError as exc:
        return Check(False, waiting_for=str(exc))
    late = {key: (f"has an open transaction from offset {stop.open_transaction} that began "
                  "before the end") for key, stop in stops.items()
            if stop.open_transaction is not None}
    unfinished = [key for key, stop in stops.items()
                  if not stop.final and stop.open_transaction is None]
    newest = newest_timestamps(admin, unfinished, timeout) if unfinished else {}
    not_idle, idle = late_partitions(newest, end_ms, idle_timeout,
                                     now_ms=int(time.time() * 1000))
    late.update(not_idle)
    if late:
        return Check(False, waiting_for=(
            f"{len(late)} of {len(stops)} partition(s) not complete up to {iso_millis(end_ms)}: "
            + "; ".join(f"{t}/{p} {why}" for (t, p), why in sorted(late.items())[:20])
        ))
    return Check(True, {"end": iso_millis(end_ms), "idle": [[t, p] for t, p in idle]})


def late_partitions(newest: Mapping[Key, int | None], end_ms: int, idle_timeout: float | None,
                    now_ms: int) -> tuple[dict[Key, str], list[Key]]:
    """Split partitions that hold no record ``>= end_ms`` yet by their newest record timestamp
    (``-1``: empty, ``None``: no answer).

    Returns ``(late, idle)``: ``late`` maps each partition that may still receive records
    before ``end_ms`` to the reason; ``idle`` lists partitions complete only by idleness.
    """
    late: dict[Key, str] = {}
    idle: list[Key] = []
    idle_before = None if idle_timeout is None else now_ms - int(idle_timeout * 1000)
    for key, ts in sorted(newest.items()):
        if ts is None:
            late[key] = "did not answer (no leader yet?)"
        elif ts >= end_ms:
            continue
        elif idle_before is not None and ts < idle_before:
            idle.append(key)
        elif ts < 0:
            late[key] = "has no record yet"
        else:
            late[key] = f"newest record at {iso_millis(ts)}"
    return late, idle


def iso_millis(millis: int) -> str:
    """``millis`` (epoch, UTC) as ISO-8601 with milliseconds and ``Z``."""
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
