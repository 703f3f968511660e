"""The tasks' plan (:class:`TaskPlan`: everything a task needs, built once on the driver and
shipped to every task), and the driver's side of an ``exactly_once`` write
(:class:`ExactlyOnceWrite`, its options :class:`ExactlyOnce`): the plan made against the
ledger (which tasks an earlier attempt already committed, and with which input), the write's
slot of the transactional id pool, and fencing the unfinished tasks of an attempt that may have
left a transaction open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import LedgerError
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.options import DeliveryGuarantee
from airflow_provider_kafka_spark.spark.write.checks import (
    check_exactly_once_args,
    check_input_identity,
    check_ledger_record_fits,
    check_ledger_since,
)
from airflow_provider_kafka_spark.spark.write.cluster import Cluster, check_transaction_timeout
from airflow_provider_kafka_spark.spark.write.ledger import (
    LedgerView,
    TaskInput,
    check_identity,
    check_inputs,
    ensure_ledger_topic,
    input_identity_digest,
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
from airflow_provider_kafka_spark.spark.write.transactions import init_transactions

LEDGER_SINCE_MARGIN_S = 300
"""How long before ``ledger_since`` the driver starts reading the write's ledger partition:
room for the clocks of the Airflow worker and the Spark executors to differ."""


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, built once on the driver and shipped to every task.

    ``kafka_config`` holds the user's client config (possibly secrets): it is excluded from
    ``repr`` so that it never appears in a log line or a traceback.
    """

    kafka_config: KafkaConfig = field(repr=False)
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
    # digests.
    identity: str | None = None
    # The input holds the readers' end rows (read_kafka(split_ends=True)): each task strips
    # them and (exactly_once) checks before it commits that its input was whole.
    split_ends: bool = False
    transaction_timeout_ms: int = 60000
    init_timeout_s: float = 60.0
    max_transaction_retries: int = 3
    retry_buffer_bytes: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka_config", KafkaConfig.of(self.kafka_config))

    def transactional_id(self, index: int) -> str:
        """The ``transactional.id`` of task ``index`` (``exactly_once``): ``<prefix>-p<slot>-
        <index>`` of the write's pool slot."""
        assert self.transactional_id_prefix and self.slot is not None
        return pooled_transactional_id(self.transactional_id_prefix, self.slot, index)

    def digest(self, index: int) -> str | None:
        """The content digest of task ``index``'s input; ``None``: not known."""
        return self.digests[index] if self.digests is not None else None

    def unfinished(self) -> list[int]:
        """The partition indices no attempt of the write has committed yet, ascending."""
        return sorted(set(range(self.num_partitions)) - self.committed)


@dataclass(frozen=True)
class ExactlyOnce:
    """The options of one ``exactly_once`` write, checked when the value is made: those of
    :func:`~airflow_provider_kafka_spark.spark.write.writer.write_kafka` of the same names,
    and ``lease_ttl_s``, how long the write's pool slot stays leased after its driver's last
    renewal (the slot of a killed driver).

    Raises:
        WriteConfigError: a blank ``transactional_id_prefix`` or ``write_id``, a
            ``transaction_timeout_ms`` that is not a positive int, a ``ledger_since`` that is
            not an aware datetime, or a blank ``input_identity``.
    """

    transactional_id_prefix: str
    write_id: str
    ledger_topic: str = "_kafka_spark_ledger"
    transaction_timeout_ms: int = 60000
    init_transactions_timeout_s: float = 60.0
    max_transaction_retries: int = 3
    retry_buffer_bytes: int = 256 * 1024 * 1024
    ledger_since: datetime | None = None
    input_identity: str | None = None
    lease_ttl_s: float = LEASE_TTL_S

    def __post_init__(self) -> None:
        prefix, write_id = check_exactly_once_args(self.transactional_id_prefix, self.write_id,
                                                   self.transaction_timeout_ms)
        object.__setattr__(self, "transactional_id_prefix", prefix)
        object.__setattr__(self, "write_id", write_id)
        check_ledger_since(self.ledger_since)
        check_input_identity(self.input_identity)


class ExactlyOnceWrite:
    """The driver's side of one ``exactly_once`` write of ``topic`` (``None``: a ``topic``
    column), in the order it runs::

        write = ExactlyOnceWrite(kafka_config, topic, options)  # kafka_config checked, no I/O
        write.check_cluster(admin, cluster, seconds)            # transaction.max.timeout.ms
        with write:                                             # the end releases the slot
            plan = write.prepare(admin, num_partitions, inputs) # the ledger; a pool slot
            ... write_partition(plan, i, batches) for each i in plan.unfinished() ...

    ``write_kafka`` runs the tasks with Spark; tests and the kill-point harness call
    :func:`~airflow_provider_kafka_spark.spark.write.task.write_partition` themselves. The
    slot's lease is renewed by a thread of this process until :meth:`release` (a killed
    process's lease expires after ``options.lease_ttl_s``).

    Raises:
        WriteConfigError: ``kafka_config`` does not suit an ``exactly_once`` producer, or
            ``write_id`` is too long for a ledger record.
    """

    def __init__(self, kafka_config: KafkaConfig | Mapping[str, Any], topic: str | None,
                 options: ExactlyOnce) -> None:
        kafka_config = KafkaConfig.of(kafka_config)
        prefix, write_id = options.transactional_id_prefix, options.write_id
        check_producer_config(kafka_config, "exactly_once", transactional_id=f"{prefix}-x",
                              transaction_timeout_ms=options.transaction_timeout_ms)
        check_ledger_record_fits(prefix, write_id, topic, kafka_config,
                                 identity=options.input_identity is not None)
        self.kafka_config = kafka_config
        self.topic = topic
        self.options = options
        self._lease: SlotLease | None = None

    def check_cluster(self, admin: AdminClient, cluster: Cluster, seconds: float) -> None:
        """Refuse a ``transaction_timeout_ms`` above a broker's ``transaction.max.timeout.ms``
        (brokers answering within ``seconds``).

        Raises:
            WriteConfigError: see
                :func:`~airflow_provider_kafka_spark.spark.write.cluster.check_transaction_timeout`.
        """
        check_transaction_timeout(admin, cluster, self.options.transaction_timeout_ms, seconds)

    def prepare(self, admin: AdminClient, num_partitions: int,
                inputs: Sequence[TaskInput] | None = None, *,
                split_ends: bool = False) -> TaskPlan:
        """Create/read the ledger, compare its entries with ``inputs``, lease the write's pool
        slot (unless every task is committed already), and return the tasks' plan.

        ``inputs`` (one :class:`TaskInput` per partition index; ``write_kafka``'s pre-pass
        computes them) are compared with the committed ledger entries and set the plan's
        ``expected_rows`` and ``digests``; without them nothing is compared and the caller
        sets ``expected_rows`` (or the input holds the readers' end rows: ``split_ends``).
        With ``options.input_identity`` the entries' identities are compared with it
        instead. The ledger is read from ``options.ledger_since`` minus
        :data:`LEDGER_SINCE_MARGIN_S`, found by time, or from its start.

        Raises:
            LedgerError: see :func:`~airflow_provider_kafka_spark.spark.write.writer.write_kafka`.
        """
        assert self._lease is None, "prepare() once per ExactlyOnceWrite"
        o = self.options
        partitions = ensure_ledger_topic(admin, o.ledger_topic)
        partition = ledger_partition(o.write_id, partitions)
        # The driver's view is an optimisation (skip tasks known to be done); every task
        # re-checks the ledger after fencing, so reading up to the last stable offset is enough.
        stable = ledger_end_offset(admin, o.ledger_topic, partition, committed=True)
        view = self._read_ledger(admin, partition, stable, num_partitions, inputs)
        plan = TaskPlan(
            kafka_config=self.kafka_config, guarantee="exactly_once", topic=self.topic,
            write_id=o.write_id, transactional_id_prefix=o.transactional_id_prefix,
            num_partitions=num_partitions, ledger_topic=o.ledger_topic,
            ledger_partition=partition, ledger_offset=view.end_offset, slot=view.slot,
            committed=frozenset(view.entries),
            committed_topics=tuple(sorted({t for e in view.entries.values() for t in e.topics})),
            ledger_records_read=view.scanned,
            expected_rows=None if inputs is None else tuple(t.records for t in inputs),
            digests=None if inputs is None else tuple(t.digest for t in inputs),
            identity=(None if o.input_identity is None
                      else input_identity_digest(o.input_identity)),
            split_ends=split_ends,
            transaction_timeout_ms=o.transaction_timeout_ms,
            init_timeout_s=o.init_transactions_timeout_s,
            max_transaction_retries=o.max_transaction_retries,
            retry_buffer_bytes=o.retry_buffer_bytes,
        )
        if not plan.unfinished():
            return plan
        plan = replace(plan, slot=self._lease_slot(admin, partitions, partition, view))
        try:
            if stable < ledger_end_offset(admin, o.ledger_topic, partition, committed=False):
                # An open transaction on the ledger partition: maybe a crashed attempt of this
                # write that produced its ledger record but never committed. Fence our
                # unfinished tasks now, rather than let every task wait for the broker to time
                # it out.
                fence_tasks(plan, plan.unfinished())
        except BaseException:
            self.release()
            raise
        return plan

    def _read_ledger(self, admin: AdminClient, partition: int, stable: int,
                     num_partitions: int, inputs: Sequence[TaskInput] | None) -> LedgerView:
        """The write's committed tasks up to ``stable``, checked against this write's number
        of partitions, ``inputs`` and input identity."""
        o = self.options
        start = (ledger_start_offset(admin, o.ledger_topic, partition) if o.ledger_since is None
                 else ledger_offset_since(admin, o.ledger_topic, partition,
                                          int(o.ledger_since.timestamp() * 1000)
                                          - LEDGER_SINCE_MARGIN_S * 1000))
        view = read_ledger(self.kafka_config, o.ledger_topic, partition,
                           transactional_id_prefix=o.transactional_id_prefix,
                           write_id=o.write_id, start_offset=start, until_offset=stable,
                           timeout=o.transaction_timeout_ms / 1000 + 30)
        other = {e.num_partitions for e in view.entries.values()} - {num_partitions}
        if other:
            raise LedgerError(
                f"write_id {o.write_id!r} of transactional_id_prefix "
                f"{o.transactional_id_prefix!r} was started on a DataFrame with {other.pop()} "
                f"partitions but this DataFrame has {num_partitions}. A re-run must produce the "
                "same partitions; use a new write_id for a different DataFrame. Nothing was "
                "written."
            )
        if inputs is not None:
            check_inputs(view.entries, inputs, transactional_id_prefix=o.transactional_id_prefix,
                         write_id=o.write_id)
        if o.input_identity is not None:
            check_identity(view.entries, input_identity_digest(o.input_identity),
                           transactional_id_prefix=o.transactional_id_prefix,
                           write_id=o.write_id, outcome="Nothing was written.")
        return view

    def _lease_slot(self, admin: AdminClient, partitions: int, partition: int,
                    view: LedgerView) -> int:
        """Lease the write's slot of the pool (the one its slot record names; on a first run
        the lowest free one, then recorded); return it. Held in ``self._lease``."""
        o = self.options

        def lease(slot: int | None) -> SlotLease:
            return lease_slot(self.kafka_config, admin, o.ledger_topic, partitions,
                              prefix=o.transactional_id_prefix, write_id=o.write_id, slot=slot,
                              ttl_s=o.lease_ttl_s)

        self._lease = lease(view.slot)
        if view.slot is None:
            try:
                first = write_slot_record(
                    self.kafka_config, o.ledger_topic, partition,
                    transactional_id_prefix=o.transactional_id_prefix, write_id=o.write_id,
                    slot=self._lease.slot, start_offset=view.end_offset,
                    producer=self._lease.producer)
                if first is not None and first != self._lease.slot:
                    # another attempt recorded its slot first: every attempt uses that one
                    self.release()
                    self._lease = lease(first)
            except BaseException:
                self.release()
                raise
        return self._lease.slot

    def release(self) -> None:
        """Free the write's pool slot (nothing if none is leased)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    def __enter__(self) -> ExactlyOnceWrite:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()


def fence_tasks(plan: TaskPlan, indices: Iterable[int]) -> None:
    """Fence the transactional ids of ``indices``: abort any transaction a crashed attempt left
    open, so that it stops holding back the last stable offset of the ledger and the output.

    Raises:
        TransactionError: (and subclasses) see
            :func:`~airflow_provider_kafka_spark.spark.write.transactions.init_transactions`.
    """

    def fence(index: int) -> None:
        tid = plan.transactional_id(index)
        producer = new_producer(plan.kafka_config.producer(
            "exactly_once", transactional_id=tid,
            transaction_timeout_ms=plan.transaction_timeout_ms), "exactly_once")
        init_transactions(producer, tid, plan.init_timeout_s)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(fence, indices))
