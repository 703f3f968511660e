"""Resolve offset specs to exact ``[start, stop)`` ranges, and find where ``timestamp:`` stops
land.

The semantics live here (what ``earliest``, ``latest``, ``timestamp:T``, ``committed`` and
explicit offsets mean per partition; open transactions, data loss, lag); the cluster's answers
come from :mod:`~airflow_provider_kafka_spark.offsets.cluster`, batched: one metadata call, one
``list_offsets`` call per spec kind (earliest, latest, and each distinct timestamp) and at
most one group-offsets call, whatever the number of partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka.admin import AdminClient

import airflow_provider_kafka_spark.offsets.specs as offset_specs
from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    DataLossError,
    IntervalNotCompleteError,
    OffsetResolutionError,
    OffsetSpecError,
)
from airflow_provider_kafka_spark.offsets.cluster import (
    Key,
    OffsetLookup,
    admin_client,
    cluster_admin,
    subscribed_partitions,
)
from airflow_provider_kafka_spark.offsets.commit import committed_offsets
from airflow_provider_kafka_spark.offsets.config import (
    KafkaConfig,
    check_isolation_level,
    check_timeout,
)
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.offsets.specs import shown
from airflow_provider_kafka_spark.offsets.subscription import Subscription, check_subscription

log = logging.getLogger(__name__)

OnDataLoss = Literal["fail", "skip"]
OnOpenTransaction = Literal["fail", "truncate"]


@dataclass(frozen=True)
class OffsetRequest:
    """What to resolve, checked once when built: the arguments of :func:`resolve_offsets`
    (which documents them) but ``kafka_config`` and ``table_offsets``.

    Raises:
        ConfigurationError: a bad ``timeout``, ``isolation_level``, ``on_data_loss``,
            ``on_open_transaction`` or ``group_id``.
        OffsetSpecError: a bad subscription or spec, ``table`` as the stopping spec,
            ``committed`` without ``group_id``, or a timestamp start after the stop.
    """

    subscription: Subscription
    start: offset_specs.OffsetSpec
    stop: offset_specs.OffsetSpec
    group_id: str | None = None
    isolation_level: str = "read_committed"
    on_data_loss: OnDataLoss = "fail"
    on_open_transaction: OnOpenTransaction = "fail"
    timeout: float = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        start = offset_specs.parse_offset_spec(self.start)
        stop = offset_specs.parse_offset_spec(self.stop)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "isolation_level", check_isolation_level(self.isolation_level))
        if self.on_data_loss not in ("fail", "skip"):
            raise ConfigurationError(f"on_data_loss={shown(self.on_data_loss)} is not valid; use "
                                     "'fail' or 'skip'.")
        if self.on_open_transaction not in ("fail", "truncate"):
            raise ConfigurationError(f"on_open_transaction={shown(self.on_open_transaction)} is "
                                     "not valid; use 'fail' or 'truncate'.")
        if self.group_id is not None and not isinstance(self.group_id, str):
            raise ConfigurationError(f"group_id={shown(self.group_id)} is not a consumer group; "
                                     "pass the consumer group's id as a string (or None).")
        check_subscription(self.subscription)
        if stop.reads() == "table":
            raise OffsetSpecError(
                f"the stopping spec {stop} is not valid: 'table' says where the table's data "
                "ends, so it is a starting spec only; stop at 'latest', 'timestamp:<time>' or "
                "explicit offsets."
            )
        if "group" in (start.reads(), stop.reads()) and not self.group_id:
            raise OffsetSpecError("a 'committed' offset spec needs group_id: pass the consumer "
                                  "group whose offsets to use.")
        if (isinstance(start, offset_specs.Timestamp) and isinstance(stop, offset_specs.Timestamp)
                and start.millis > stop.millis):
            raise OffsetSpecError(
                f"the starting time {start} is after the stopping time {stop}; swap them, "
                "or check the times (the start is inclusive, the stop exclusive)."
            )


def resolve_offsets(
    kafka_config: KafkaConfig | Mapping[str, Any],
    subscription: Subscription,
    starting: object,
    stopping: object,
    *,
    group_id: str | None = None,
    table_offsets: Mapping[Key, int] | None = None,
    isolation_level: str = "read_committed",
    on_data_loss: OnDataLoss = "fail",
    on_open_transaction: OnOpenTransaction = "fail",
    timeout: float = 30.0,
) -> OffsetRanges:
    """Resolve ``starting`` and ``stopping`` specs to one ``[start, stop)`` range per partition.

    Semantics per partition:

    * ``earliest``: the log start offset.
    * ``latest``: the last stable offset under ``read_committed``, the high watermark under
      ``read_uncommitted``.
    * ``timestamp:T``: the offset of the first record with timestamp >= T, or ``latest`` when
      there is none. Note that Kafka's lookup also sees transaction markers, which carry the
      time of the commit.
    * ``committed``: the group's committed offset, else the reset strategy (no reset: error).
    * ``table`` (starting only): the offset the table recorded as the application's stop
      (``table_offsets``, from the table sink's ``recorded_offsets(spark)``),
      else the reset strategy (no reset: error).
    * explicit offsets: as given; a listed offset beyond ``latest`` is an error.

    Open transactions (``read_committed``): a ``timestamp:T`` **stop** that the last stable
    offset cuts short, because a transaction that is still open began before the first record
    with timestamp >= T, is :class:`IntervalNotCompleteError` (retry once the transaction is
    decided). With ``on_open_transaction="truncate"`` the stop is the last stable offset and
    the cut is recorded in ``OffsetRanges.truncated``.

    Lag: each partition's ``latest`` (under ``isolation_level``) minus its stop, kept in
    ``OffsetRanges.lag``: how far the range ends behind the partition's end at resolution.

    Data loss: a start below the log start offset means the data is gone; so does a
    ``timestamp:T`` start on a partition whose records were deleted (log start offset > 0)
    when T is not after the oldest retained record's timestamp (the deleted records may have
    been in the interval). That is :class:`DataLossError`, or with ``on_data_loss="skip"``
    the start moves up and the lost count is kept in ``OffsetRanges.lost`` (and logged); for
    a timestamp start the count is the log start offset, an upper bound.

    ``timeout``: seconds for all the cluster calls together (a positive, finite number of at
    most 3600). The first, for the cluster's metadata, waits at most ``CONNECT_TIMEOUT_S``
    (10 s) of it for some broker to answer; no answer, or a cluster still not settled once
    ``timeout`` passed, is an :class:`OffsetResolutionError` naming the servers. A named topic
    the metadata does not show yet (created a moment ago) is looked up again for 5 s of it
    (``TOPIC_PROPAGATION_S``) before it is unknown; a pattern matching nothing fails at once.

    Raises:
        ConfigurationError: a bad ``timeout`` or client config.
        OffsetSpecError: an invalid spec, ``committed`` without ``group_id``, ``table``
            without ``table_offsets`` or as the stopping spec, or bad options.
        OffsetResolutionError: unknown topics, start > stop, an explicit offset out of range,
            a partition with no committed offset and no reset strategy, or a timeout.
        IntervalNotCompleteError: an open transaction holds back a ``timestamp:`` stop.
        DataLossError: data the range needs was deleted, with ``on_data_loss="fail"``.
    """
    request = OffsetRequest(subscription, offset_specs.parse_offset_spec(starting),
                            offset_specs.parse_offset_spec(stopping), group_id, isolation_level,
                            on_data_loss, on_open_transaction, timeout)
    config = KafkaConfig.of(kafka_config)
    return resolve_request(config, admin_client(config), request, table_offsets=table_offsets)


def resolve_request(
    kafka_config: KafkaConfig,
    admin: AdminClient,
    request: OffsetRequest,
    *,
    table_offsets: Mapping[Key, int] | None = None,
    boundaries: tuple[Mapping[Key, int] | None, Mapping[Key, int] | None] = (None, None),
) -> OffsetRanges:
    """:func:`resolve_offsets` of a checked ``request``, through ``admin``, the resolution's
    one admin client (:func:`~airflow_provider_kafka_spark.offsets.cluster.admin_client` of
    ``kafka_config``).

    Boundaries (how runs tile, :func:`~airflow_provider_kafka_spark.offsets.runs.resolve_run`):
    ``boundaries`` (starts, stops) map partitions to offsets a neighbouring run already fixed
    for this run's ``timestamp:`` start / stop; those partitions use them instead of the
    timestamp lookup (other partitions are looked up). A start taken from a boundary is
    checked against the log start like any offset (an exact loss count); a stop taken from
    one is checked against the end of the log like a lookup's stop (an open transaction below
    it is :class:`IntervalNotCompleteError` or a truncation). Where a boundary start lies past
    the stop's lookup (records stamped after the stop that the previous run read), the range
    is empty: ``[start, start)``.

    Raises:
        what :func:`resolve_offsets` raises but the checks of ``request``;
        ConfigurationError: boundaries for a side whose spec is not ``timestamp:``.
    """
    start_spec, stop_spec, level = request.start, request.stop, request.isolation_level
    seconds = request.timeout
    recorded = _check_table_offsets(start_spec, table_offsets)
    fixed_starts = _check_boundaries("boundary_starts", start_spec, boundaries[0])
    fixed_stops = _check_boundaries("boundary_stops", stop_spec, boundaries[1])
    group_id = request.group_id
    on_open_transaction, on_data_loss = request.on_open_transaction, request.on_data_loss

    deadline = time.monotonic() + seconds
    cluster = kafka_config.cluster
    partitions = subscribed_partitions(admin, cluster, request.subscription, deadline)
    lookup = OffsetLookup(admin, cluster, partitions, level, deadline)

    committed = (committed_offsets(kafka_config, group_id, partitions, deadline)
                 if group_id and "group" in (start_spec.reads(), stop_spec.reads()) else {})
    context = offset_specs.LookupContext(lookup, committed, recorded)
    starts = start_spec.lookup(context, partitions, "starting")
    stops = stop_spec.lookup(context, partitions, "stopping")
    fixed_starts = {k: o for k, o in fixed_starts.items() if k in starts}
    fixed_stops = {k: o for k, o in fixed_stops.items() if k in stops}
    _check_within_log(lookup, {**fixed_starts, **fixed_stops})
    starts.update(fixed_starts)
    stops.update(fixed_stops)
    truncated: dict[Key, int] = {}
    if isinstance(stop_spec, offset_specs.Timestamp):
        held = {k: s.open_transaction for k, s in _timestamp_stops(lookup, stop_spec.millis).items()
                if s.open_transaction is not None and k not in fixed_stops}
        if fixed_stops and level == "read_committed":
            stable = lookup.offsets("latest")
            held |= {k: stable[k] for k, o in fixed_stops.items() if o > stable[k]}
        if held and on_open_transaction == "fail":
            detail = "; ".join(f"{t}/{p}: last stable offset {o} (the open transaction's first "
                               f"offset {o})" for (t, p), o in sorted(held.items())[:20])
            raise IntervalNotCompleteError(
                f"the interval up to {stop_spec} is not complete on {len(held)} partition(s): a "
                f"transaction that is still open began before its end ({detail}). Its records "
                "may be committed inside the interval. Retry once it is committed or aborted "
                "(the broker aborts it after its transaction.timeout.ms); wait with "
                "KafkaIntervalCompleteSensor; or pass on_open_transaction='truncate' to stop at "
                "the last stable offset and record the cut in the ranges.",
                held,
            )
        truncated = held
        stops |= {k: min(stops[k], o) for k, o in held.items()}
        if truncated:
            log.warning("Stopping at the last stable offset (on_open_transaction='truncate'): %s",
                        ", ".join(f"{t}/{p} at {o}" for (t, p), o in truncated.items()))

    earliest = lookup.offsets("earliest")
    latest = lookup.offsets("latest")  # cached: asked once per resolution at most
    ranges: list[PartitionRange] = []
    lost: dict[Key, int] = {}
    backwards: list[str] = []
    retained_after = (_deleted_may_be_in_interval(lookup, start_spec.millis) - set(fixed_starts)
                      if isinstance(start_spec, offset_specs.Timestamp) else set())
    for key in partitions:
        start, stop = starts[key], stops[key]
        if key in fixed_starts and key not in fixed_stops and stop < start:
            stop = start  # what the stop's lookup would add, the previous run read already
        gone = min(earliest[key], stop) - start
        if gone > 0:
            lost[key] = gone
            start += gone
        elif key in retained_after:
            lost[key] = earliest[key]
        if start > stop:
            backwards.append(f"{key[0]}/{key[1]} start {start} > stop {stop}")
            continue
        ranges.append(PartitionRange(key[0], key[1], start, stop))
    if backwards:
        raise OffsetResolutionError(
            f"the starting offsets are after the stopping offsets for {len(backwards)} "
            f"partition(s): {'; '.join(backwards[:20])}. Check the start and stop specs "
            f"({start_spec} .. {stop_spec})."
        )
    if lost:
        detail = ", ".join(f"{t}/{p}: {n} offset(s)" for (t, p), n in sorted(lost.items()))
        if on_data_loss == "fail":
            raise DataLossError(
                f"data was deleted before it could be read ({detail}): the start is below the "
                "log start offset, or the interval begins before the oldest record that "
                "retention or delete_records left (the deleted records may have been in it). "
                "Pass on_data_loss='skip' to read what is left instead, recording the loss.",
                lost,
            )
        log.warning("Skipping deleted offsets (on_data_loss='skip'): %s", detail)
    return OffsetRanges(
        tuple(ranges),
        starting=str(start_spec),
        stopping=str(stop_spec),
        isolation_level=level,
        group_id=group_id,
        lost=lost,
        lag={(r.topic, r.partition): max(latest[(r.topic, r.partition)] - r.stop, 0)
             for r in ranges},
        truncated=truncated,
    )


@dataclass(frozen=True)
class TimestampStop:
    """Where a ``timestamp:T`` stop lands on one partition, and whether that can still change.

    ``offset`` is the stop :func:`resolve_offsets` returns now. ``final``: a record (or a
    transaction marker) with timestamp >= T exists below the last stable offset, so the stop
    can never move. ``open_transaction``: the first offset of an open transaction that began
    before the stop (the stop is held back there until the transaction is decided), else None.
    Neither: no record with timestamp >= T exists yet, the stop is the end of the log.
    """

    offset: int
    final: bool
    open_transaction: int | None = None


def timestamp_stops(
    kafka_config: KafkaConfig | Mapping[str, Any] | AdminClient,
    partitions: Iterable[Key],
    millis: int,
    *,
    isolation_level: str = "read_committed",
    timeout: float = 30.0,
) -> dict[Key, TimestampStop]:
    """The :class:`TimestampStop` of ``timestamp:<millis>`` on each partition (batched).

    Raises:
        ConfigurationError: a bad ``timeout``, ``isolation_level`` or config.
        OffsetSpecError: ``partitions`` is not a list of (topic, partition) pairs.
        OffsetResolutionError: the cluster did not answer within ``timeout`` seconds, or
            refused a partition.
    """
    seconds = check_timeout(timeout)
    level = check_isolation_level(isolation_level)
    stop = offset_specs.Timestamp(millis).millis
    if isinstance(partitions, Sized) and len(partitions) == 0:
        return {}
    keys = Subscription.partitions(partitions, allow_internal=True).partition_list
    admin, cluster = cluster_admin(kafka_config)
    lookup = OffsetLookup(admin, cluster, list(keys), level, time.monotonic() + seconds)
    return _timestamp_stops(lookup, stop)


def _deleted_may_be_in_interval(lookup: OffsetLookup, millis: int) -> set[Key]:
    """Partitions whose deleted records (below a log start offset > 0) may have timestamps
    >= ``millis``: the oldest retained record is at or after ``millis``, or none is left."""
    earliest = lookup.offsets("earliest")
    if not any(earliest.values()):
        return set()
    found = lookup.offsets(millis, "read_uncommitted")
    high = lookup.offsets("latest", "read_uncommitted")
    return {k for k in lookup.partitions if earliest[k] > 0
            and (found[k] == earliest[k] or (found[k] < 0 and high[k] == earliest[k]))}


def _check_boundaries(name: str, spec: offset_specs.OffsetSpec,
                      boundaries: object) -> dict[Key, int]:
    """``boundaries`` as a dict, once they fit ``spec`` (a ``timestamp:`` spec)."""
    if boundaries is None:
        return {}
    if not isinstance(spec, offset_specs.Timestamp):
        raise ConfigurationError(
            f"{name} are given but that side's spec is {spec}; boundaries replace only a "
            "'timestamp:' lookup. Pass them only with a timestamp spec (or remove them)."
        )
    return _offsets_mapping(name, boundaries, "")


def _check_within_log(lookup: OffsetLookup, offsets: Mapping[Key, int]) -> None:
    """Boundary offsets past a partition's high watermark: the topic was deleted and created
    again since the neighbouring run fixed them."""
    if not offsets:
        return
    high = lookup.offsets("latest", "read_uncommitted")
    beyond = [f"{t}/{p}: {o} > {high[(t, p)]}" for (t, p), o in sorted(offsets.items())
              if o > high[(t, p)]]
    if beyond:
        raise OffsetResolutionError(
            f"the offsets where the neighbouring runs of this run stopped or started are past "
            f"the end of the log ({'; '.join(beyond[:20])}): the topic was deleted and created "
            "again since. Resolve this run with explicit offsets or non-timestamp specs, or "
            "delete the pins of the old topic's runs."
        )


def _check_table_offsets(start: offset_specs.OffsetSpec, table_offsets: object) -> dict[Key, int]:
    """``table_offsets`` as a dict, once the ``table`` start and it fit together."""
    if start.reads() != "table":
        if table_offsets is not None:
            raise ConfigurationError(
                f"table_offsets are given but the starting spec is {start}; pass them only "
                "with a 'table' start (or remove them)."
            )
        return {}
    if table_offsets is None:
        raise OffsetSpecError(
            f"the starting spec {start} needs table_offsets: the stops the table recorded, read "
            "with the table sink's recorded_offsets(spark), e.g. IcebergSink(table, "
            "application=...).recorded_offsets(spark)."
        )
    return _offsets_mapping("table_offsets", table_offsets, " as recorded_offsets() returns it")


def _offsets_mapping(name: str, value: object, source: str) -> dict[Key, int]:
    """``value`` as a dict ``{(topic, partition): offset}``, or :class:`ConfigurationError`."""
    if not isinstance(value, Mapping) or not all(
            isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], str)
            and type(k[1]) is int and type(v) is int and v >= 0
            for k, v in value.items()):
        raise ConfigurationError(
            f"{name}={shown(value)} is not valid; pass a mapping "
            f"{{(topic, partition): offset}}{source}."
        )
    return dict(value)


def _timestamp_stops(lookup: OffsetLookup, millis: int) -> dict[Key, TimestampStop]:
    """The :class:`TimestampStop` of ``timestamp:<millis>`` on each partition of ``lookup``."""
    found = lookup.offsets(millis)
    stops = offset_specs.Timestamp(millis).lookup(offset_specs.LookupContext(lookup),
                                                  lookup.partitions)
    if lookup.isolation_level != "read_committed":
        return {k: TimestampStop(stops[k], found[k] >= 0) for k in lookup.partitions}
    stable = lookup.offsets("latest")
    high = lookup.offsets("latest", "read_uncommitted")
    held = [k for k in lookup.partitions if found[k] < 0 and stable[k] < high[k]]
    # Counting the undecided records too, the first offset with ts >= T: at the LSO, the
    # stop is exact whatever the transaction does; past it (or none yet), the open
    # transaction began before the stop and its records may still land in the interval.
    uncommitted = lookup.offsets(millis, "read_uncommitted") if held else {}
    exact = {k for k in held if uncommitted[k] == stable[k]}
    return {k: TimestampStop(stops[k], found[k] >= 0 or k in exact,
                             stable[k] if k in held and k not in exact else None)
            for k in lookup.partitions}
