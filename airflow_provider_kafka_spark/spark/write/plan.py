"""The tasks' plan (:class:`TaskPlan`: everything a task needs, built once on the driver and
shipped to every task), and how the driver of an ``exactly_once`` write makes it against the
ledger: which tasks an earlier attempt already committed (and with which input), and fencing
the unfinished tasks of an attempt that may have left a transaction open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import LedgerError
from airflow_provider_kafka_spark.offsets.cluster import admin_client
from airflow_provider_kafka_spark.offsets.config import producer_config
from airflow_provider_kafka_spark.options import DeliveryGuarantee
from airflow_provider_kafka_spark.spark.write.checks import (
    check_ledger_record_fits,
    check_metadata_timeout,
)
from airflow_provider_kafka_spark.spark.write.cluster import (
    check_transaction_timeout,
    read_cluster,
)
from airflow_provider_kafka_spark.spark.write.ledger import (
    TaskInput,
    check_identity,
    check_inputs,
    ensure_ledger_topic,
    ledger_end_offset,
    ledger_offset_since,
    ledger_partition,
    ledger_start_offset,
    read_ledger,
    write_slot_record,
)
from airflow_provider_kafka_spark.spark.write.pool import (
    LEASE_TTL_S,
    SlotLease,
    lease_slot,
    pooled_transactional_id,
)
from airflow_provider_kafka_spark.spark.write.producer import (
    check_producer_config,
    new_producer,
)
from airflow_provider_kafka_spark.spark.write.transactions import (
    init_transactions,
    legacy_transactional_id,
)

LEDGER_SINCE_MARGIN_S = 300
"""How long before ``ledger_since`` the driver starts reading the write's ledger partition:
room for the clocks of the Airflow worker and the Spark executors to differ."""


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, built once on the driver and shipped to every task.

    ``kafka_config`` holds the user's client config (possibly secrets): it is excluded from
    ``repr`` so that it never appears in a log line or a traceback.
    """

    kafka_config: Mapping[str, Any] = field(repr=False)
    guarantee: DeliveryGuarantee
    topic: str | None
    # exactly_once only:
    write_id: str | None = None
    transactional_id_prefix: str | None = None
    num_partitions: int = 0
    ledger_topic: str | None = None
    ledger_partition: int = 0
    ledger_offset: int = 0
    slot: int | None = None  # the write's slot of the application's transactional id pool
    committed: frozenset[int] = frozenset()
    committed_topics: tuple[str, ...] = ()
    ledger_records_read: int = 0  # how many ledger records the driver's check went through
    expected_rows: tuple[int, ...] | None = None
    # The content digest of each partition's input (driver's pre-pass), recorded in the task's
    # ledger entry; None: not known (then the entry has none).
    digests: tuple[str | None, ...] | None = None
    # write_kafka's input_identity (its SHA-256), recorded in every ledger entry instead of
    # digests; with no expected_rows each task checks that its input reached its end.
    identity: str | None = None
    transaction_timeout_ms: int = 60000
    init_timeout_s: float = 60.0
    max_transaction_retries: int = 3
    retry_buffer_bytes: int = 256 * 1024 * 1024

    def transactional_id(self, index: int) -> str:
        """The ``transactional.id`` of task ``index`` (``exactly_once``): ``<prefix>-p<slot>-
        <index>`` of the write's pool slot."""
        assert self.transactional_id_prefix and self.slot is not None
        return pooled_transactional_id(self.transactional_id_prefix, self.slot, index)

    def digest(self, index: int) -> str | None:
        """The content digest of task ``index``'s input; ``None``: not known."""
        return self.digests[index] if self.digests is not None else None


def prepare_exactly_once(
    kafka_config: Mapping[str, Any],
    *,
    topic: str | None,
    transactional_id_prefix: str,
    write_id: str,
    num_partitions: int,
    ledger_topic: str,
    transaction_timeout_ms: int,
    init_transactions_timeout_s: float = 60.0,
    max_transaction_retries: int = 3,
    retry_buffer_bytes: int = 256 * 1024 * 1024,
    metadata_timeout_s: float = 10.0,
    inputs: Sequence[TaskInput] | None = None,
    ledger_since_ms: int | None = None,
    lease_ttl_s: float = LEASE_TTL_S,
) -> TaskPlan:
    """The driver half of an ``exactly_once`` write, without Spark: check the transaction
    timeout against the brokers, create/read the ledger, lease the write's slot of the
    transactional id pool, and return the tasks' plan. The lease is renewed by a thread of this
    process until :func:`finish_exactly_once` (or the process's end; then it expires).

    ``inputs`` (one :class:`TaskInput` per partition index; ``write_kafka``'s pre-pass computes
    them) are compared with the committed ledger entries and set the plan's ``expected_rows``
    and ``digests``; without them nothing is compared and the caller sets ``expected_rows``.

    Raises:
        WriteConfigError: ``transaction_timeout_ms`` exceeds ``transaction.max.timeout.ms``,
            or ``write_id`` is too long for a ledger record.
        LedgerError: see :func:`~airflow_provider_kafka_spark.spark.write.writer.write_kafka`.
    """
    check_producer_config(kafka_config, "exactly_once",
                          transactional_id=f"{transactional_id_prefix}-x",
                          transaction_timeout_ms=transaction_timeout_ms)
    check_ledger_record_fits(transactional_id_prefix, write_id, topic, kafka_config)
    admin = admin_client(kafka_config)
    seconds = check_metadata_timeout(metadata_timeout_s)
    cluster = read_cluster(admin, kafka_config, seconds)
    check_transaction_timeout(admin, cluster, transaction_timeout_ms, seconds)
    plan, lease = plan_exactly_once(admin, TaskPlan(
        kafka_config=dict(kafka_config), guarantee="exactly_once", topic=topic,
        write_id=write_id, transactional_id_prefix=transactional_id_prefix,
        num_partitions=num_partitions, ledger_topic=ledger_topic,
        transaction_timeout_ms=transaction_timeout_ms, init_timeout_s=init_transactions_timeout_s,
        max_transaction_retries=max_transaction_retries, retry_buffer_bytes=retry_buffer_bytes,
    ), inputs, ledger_since_ms=ledger_since_ms, lease_ttl_s=lease_ttl_s)
    if lease is not None:
        earlier = _LEASES.pop((transactional_id_prefix, write_id), None)
        if earlier is not None:  # the new lease took the slot over; stop renewing the old one
            earlier.release()
        _LEASES[(transactional_id_prefix, write_id)] = lease
    return plan


_LEASES: dict[tuple[str, str], SlotLease] = {}


def finish_exactly_once(plan: TaskPlan) -> None:
    """Free the pool slot :func:`prepare_exactly_once` leased for ``plan``'s write."""
    assert plan.transactional_id_prefix and plan.write_id
    lease = _LEASES.pop((plan.transactional_id_prefix, plan.write_id), None)
    if lease is not None:
        lease.release()


def plan_exactly_once(admin: AdminClient, write: TaskPlan, inputs: Sequence[TaskInput] | None,
                      *, ledger_since_ms: int | None = None,
                      lease_ttl_s: float = LEASE_TTL_S) -> tuple[TaskPlan, SlotLease | None]:
    """Create/read the ledger, compare its entries with ``inputs``, lease the write's pool
    slot, and return the tasks' plan: ``write`` (an ``exactly_once`` plan holding the write's
    arguments; they and the cluster are checked already) completed with the ledger's view and
    the slot; and the lease, which the caller releases when the tasks are done (``None``: every
    task is committed already, nothing to write).

    The ledger is read from ``ledger_since_ms`` (epoch millis; no attempt of the write began
    earlier) minus :data:`LEDGER_SINCE_MARGIN_S`, found by time, or from its start when
    ``None``.

    Raises:
        LedgerError: see :func:`~airflow_provider_kafka_spark.spark.write.writer.write_kafka`.
    """
    assert write.write_id and write.transactional_id_prefix and write.ledger_topic
    kafka_config, topic, ledger_topic = write.kafka_config, write.topic, write.ledger_topic
    write_id, transactional_id_prefix = write.write_id, write.transactional_id_prefix
    num_partitions = write.num_partitions
    partitions = ensure_ledger_topic(admin, ledger_topic)
    partition = ledger_partition(write_id, partitions)
    # The driver's view is an optimisation (skip tasks known to be done); every task re-checks
    # the ledger after fencing, so reading only up to the current last stable offset is enough.
    stable = ledger_end_offset(admin, ledger_topic, partition, committed=True)
    start = (ledger_start_offset(admin, ledger_topic, partition) if ledger_since_ms is None
             else ledger_offset_since(admin, ledger_topic, partition,
                                      ledger_since_ms - LEDGER_SINCE_MARGIN_S * 1000))
    view = read_ledger(kafka_config, ledger_topic, partition,
                       transactional_id_prefix=transactional_id_prefix, write_id=write_id,
                       output_topic=topic, start_offset=start, until_offset=stable,
                       timeout=write.transaction_timeout_ms / 1000 + 30)
    other = {e.num_partitions for e in view.entries.values()} - {num_partitions}
    if other:
        raise LedgerError(
            f"write_id {write_id!r} of transactional_id_prefix {transactional_id_prefix!r} was "
            f"started on a DataFrame with {other.pop()} partitions but "
            f"this DataFrame has {num_partitions}. A re-run must produce the same partitions; "
            "use a new write_id for a different DataFrame. Nothing was written."
        )
    if inputs is not None:
        check_inputs(view.entries, inputs, transactional_id_prefix=transactional_id_prefix,
                     write_id=write_id)
    if write.identity is not None:
        check_identity(view.entries, write.identity, transactional_id_prefix=transactional_id_prefix,
                       write_id=write_id, outcome="Nothing was written.")
    plan = replace(
        write,
        ledger_partition=partition,
        ledger_offset=view.end_offset,
        committed=frozenset(view.entries),
        committed_topics=tuple(sorted({t for e in view.entries.values() for t in e.topics})),
        expected_rows=None if inputs is None else tuple(t.records for t in inputs),
        digests=None if inputs is None else tuple(t.digest for t in inputs),
        slot=view.slot,
        ledger_records_read=view.scanned,
    )
    unfinished = sorted(set(range(num_partitions)) - plan.committed)
    if not unfinished:
        return plan, None
    lease = lease_slot(kafka_config, admin, ledger_topic, partitions, prefix=transactional_id_prefix,
                       write_id=write_id, slot=view.slot, ttl_s=lease_ttl_s)
    try:
        slot = lease.slot
        if view.slot is None:
            first = write_slot_record(kafka_config, ledger_topic, partition,
                                      transactional_id_prefix=transactional_id_prefix,
                                      write_id=write_id, slot=slot, start_offset=view.end_offset,
                                      producer=lease.producer)
            if first is not None and first != slot:  # another attempt recorded its slot first
                lease.release()
                lease = lease_slot(kafka_config, admin, ledger_topic, partitions,
                                   prefix=transactional_id_prefix, write_id=write_id, slot=first,
                                   ttl_s=lease_ttl_s)
                slot = first
            if view.entries:
                # Tasks committed by an earlier version of this package, whose ids were
                # <prefix>-<hash of write_id>-<i>: fence their other tasks' ids once, so that no
                # attempt of that version can still commit.
                fence_tasks(plan, unfinished, legacy=True)
        plan = replace(plan, slot=slot)
        if stable < ledger_end_offset(admin, ledger_topic, partition, committed=False):
            # An open transaction on the ledger partition: maybe a crashed attempt of this
            # write that produced its ledger record but never committed. Fence our unfinished
            # tasks now, rather than let every task wait for the broker to time it out.
            fence_tasks(plan, unfinished)
    except BaseException:
        lease.release()
        raise
    return plan, lease


def fence_tasks(plan: TaskPlan, indices: Iterable[int], *, legacy: bool = False) -> None:
    """Fence the transactional ids of ``indices`` (``legacy``: the ids earlier versions of
    this package gave them): abort any transaction a crashed attempt left open, so that it
    stops holding back the last stable offset of the ledger and the output.

    Raises:
        TransactionError: (and subclasses) see
            :func:`~airflow_provider_kafka_spark.spark.write.transactions.init_transactions`.
    """

    def fence(index: int) -> None:
        assert plan.transactional_id_prefix and plan.write_id
        tid = (legacy_transactional_id(plan.transactional_id_prefix, plan.write_id, index)
               if legacy else plan.transactional_id(index))
        producer = new_producer(producer_config(
            plan.kafka_config, "exactly_once", transactional_id=tid,
            transaction_timeout_ms=plan.transaction_timeout_ms), "exactly_once")
        init_transactions(producer, tid, plan.init_timeout_s)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(fence, indices))
