"""What one Spark task of ``write_kafka`` does with one partition: produce its rows to Kafka.

Nothing here imports Spark: a task receives ``pyarrow.RecordBatch`` es and a :class:`TaskPlan`
built on the driver, so the same code runs in a Spark Python worker and in a plain process
(the kill-point tests drive it both ways).

``exactly_once`` per task (partition index ``i``)::

    init_transactions()            fences every older producer of transactional.id <prefix>-<h>-<i>
                                   and completes or aborts its transaction
    read the ledger tail           (read_committed) up to the high watermark seen after the fence
    if (prefix, write_id, i)       skip - an earlier attempt committed this task (refuse
      is there:                    with LedgerError if it recorded another input fingerprint)
    begin_transaction()
    produce the rows               counting them; fewer than the partition holds -> abort
    produce the ledger record      last, so the ledger partition is held back only briefly
    commit_transaction()           output and ledger record become visible together
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException

from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    DeliveryError,
    InputTruncatedError,
    ProducerFencedError,
    TransactionError,
    TransactionInitTimeoutError,
    WriteConfigError,
)
from airflow_provider_kafka_spark.offsets.config import client_config, native_settings
from airflow_provider_kafka_spark.offsets.resolve import admin_client
from airflow_provider_kafka_spark.options import DeliveryGuarantee
from airflow_provider_kafka_spark.spark.native import BatchProducer
from airflow_provider_kafka_spark.spark.write.ledger import (
    LedgerEntry,
    TaskInput,
    input_mismatch,
    ledger_end_offset,
    read_ledger,
)

log = logging.getLogger(__name__)


# Keys the sink owns; a user value for them would silently change the guarantee.
_OWNED_KEYS = ("transactional.id", "enable.idempotence", "acks", "transaction.timeout.ms")

# none / at_least_once: how long a record may wait for its acknowledgement (unless
# kafka_config says), and how much longer a task's final flush waits for librdkafka to fail it.
DEFAULT_MESSAGE_TIMEOUT_MS = 120_000
FLUSH_GRACE_S = 5.0

_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


def producer_config(
    kafka_config: Mapping[str, Any],
    guarantee: DeliveryGuarantee,
    *,
    transactional_id: str | None = None,
    transaction_timeout_ms: int | None = None,
) -> dict[str, Any]:
    """The librdkafka producer config of one task for ``guarantee``.

    ``none``: ``acks=1``, no idempotence. ``at_least_once``: idempotent, ``acks=all``.
    ``exactly_once``: additionally ``transactional.id`` and ``transaction.timeout.ms``.
    The local queue defaults to 500,000 messages / 256 MiB unless ``kafka_config`` sets
    ``queue.buffering.max.messages`` / ``queue.buffering.max.kbytes``. ``partitioner``
    defaults to ``murmur2_random`` for every guarantee: a keyed record goes to
    ``(murmur2(key) & 0x7fffffff) % partitions``, where Java producers and Spark's own Kafka
    sink put it (librdkafka's default, ``consistent_random``, hashes with CRC-32 instead);
    a record without a key goes to a random partition. A ``partitioner`` in ``kafka_config``
    wins. ``none`` and ``at_least_once`` give a record ``message.timeout.ms=120000`` (two
    minutes, as the Java producer's ``delivery.timeout.ms``; librdkafka's default is five) to
    be acknowledged, unless ``kafka_config`` sets ``message.timeout.ms`` or
    ``delivery.timeout.ms``; ``exactly_once`` leaves it to librdkafka, which caps it at
    ``transaction.timeout.ms``.

    Raises:
        WriteConfigError: ``kafka_config`` sets a key the sink owns (``transactional.id``,
            ``enable.idempotence``, ``acks``, ``transaction.timeout.ms``).
    """
    config = client_config(kafka_config)
    owned = sorted(k for k in _OWNED_KEYS if k in config)
    if owned:
        raise WriteConfigError(
            f"kafka_config sets {owned}, which write_kafka sets from delivery_guarantee / "
            "transactional_id_prefix / transaction_timeout_ms; remove them from kafka_config."
        )
    # A bulk sink: a deeper local queue than librdkafka's default (100k messages) keeps the
    # producing thread from stalling on a full queue (measured: about 30% more records/s),
    # while bounding the memory of one task's producer. Values in kafka_config win.
    config.setdefault("queue.buffering.max.messages", 500_000)
    config.setdefault("queue.buffering.max.kbytes", 256 * 1024)
    config.setdefault("partitioner", "murmur2_random")  # Java-compatible placement of keys
    if guarantee != "exactly_once" and "delivery.timeout.ms" not in config:
        config.setdefault("message.timeout.ms", DEFAULT_MESSAGE_TIMEOUT_MS)
    if guarantee == "none":
        config.update({"acks": "1", "enable.idempotence": False})
    else:
        config.update({"acks": "all", "enable.idempotence": True})
    if guarantee == "exactly_once":
        if not transactional_id or transaction_timeout_ms is None:
            raise WriteConfigError(
                "producer_config(guarantee='exactly_once') needs transactional_id= and "
                "transaction_timeout_ms=; pass both (write_kafka derives them from "
                "transactional_id_prefix, write_id and transaction_timeout_ms)."
            )
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = int(transaction_timeout_ms)
    return config


def check_producer_config(
    kafka_config: Mapping[str, Any],
    guarantee: DeliveryGuarantee,
    *,
    transactional_id: str | None = None,
    transaction_timeout_ms: int | None = None,
) -> None:
    """Build the tasks' producer once on the driver, so that librdkafka rejects a bad setting
    (an unknown property, an invalid value, ``message.timeout.ms`` above
    ``transaction.timeout.ms``, a SASL mechanism this build lacks) before anything runs. The
    producer sends nothing: with ``exactly_once`` it never calls ``init_transactions()``.

    Raises:
        WriteConfigError: see :func:`producer_config`, or librdkafka refused the config.
    """
    config = producer_config(kafka_config, guarantee, transactional_id=transactional_id,
                             transaction_timeout_ms=transaction_timeout_ms)
    _new_producer(config, guarantee)


def _new_producer(config: Mapping[str, Any], guarantee: DeliveryGuarantee) -> BatchProducer:
    """The native producer of ``config`` (:func:`producer_config` of ``guarantee``); delivery
    reports are counted for ``at_least_once``.

    Raises:
        WriteConfigError: a setting librdkafka refuses, or a Python object in the config.
    """
    try:
        return BatchProducer(native_settings(config), guarantee == "at_least_once")
    except ConfigurationError as exc:
        raise WriteConfigError(f"{exc} Nothing was written.") from None
    except KafkaException as exc:
        # librdkafka's messages name the property, never its value.
        raise WriteConfigError(
            f"kafka_config is not a valid producer config for delivery_guarantee="
            f"{guarantee!r}: {exc.args[0].str()}. Fix or remove that setting (see librdkafka's "
            "CONFIGURATION.md). Nothing was written."
        ) from None


def transactional_id(prefix: str, write_id: str, index: int) -> str:
    """``<prefix>-<first 12 hex digits of sha256(write_id)>-<index>``."""
    digest = hashlib.sha256(write_id.encode()).hexdigest()[:12]
    return f"{prefix}-{digest}-{index}"


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
    committed: frozenset[int] = frozenset()
    committed_topics: tuple[str, ...] = ()
    expected_rows: tuple[int, ...] | None = None
    # The content digest of each partition's input (driver's pre-pass), recorded in the task's
    # ledger entry; None: not known (then the entry has none).
    digests: tuple[str | None, ...] | None = None
    transaction_timeout_ms: int = 60000
    init_timeout_s: float = 60.0
    max_transaction_retries: int = 3
    retry_buffer_bytes: int = 256 * 1024 * 1024

    def transactional_id(self, index: int) -> str:
        assert self.transactional_id_prefix and self.write_id
        return transactional_id(self.transactional_id_prefix, self.write_id, index)


@dataclass(frozen=True)
class TaskOutcome:
    """What one task did: ``records`` produced (0 when ``skipped``) to ``topics``."""

    index: int
    records: int
    skipped: bool
    topics: tuple[str, ...]


def write_partition(plan: TaskPlan, index: int, batches: Iterable[pa.RecordBatch]) -> TaskOutcome:
    """Produce the rows of partition ``index`` with ``plan.guarantee``; see the module doc.

    Raises:
        DeliveryError: ``at_least_once`` and a record was not acknowledged.
        TransactionError: (and subclasses) ``exactly_once`` could not commit.
    """
    if plan.guarantee == "exactly_once":
        return _write_exactly_once(plan, index, batches)
    config = producer_config(plan.kafka_config, plan.guarantee)
    producer = _new_producer(config, plan.guarantee)
    try:
        records, topics = _produce_batches(producer, batches, plan.topic, index)
    except KafkaException as exc:
        raise DeliveryError(
            f"task {index}: could not produce a record: {exc.args[0].str()}. "
            f"{_remedy(exc.args[0])}"
        ) from None
    _flush(producer, config, index, records)
    failed, first = producer.delivery_failures()
    if failed:
        code, reason, topic, partition = first or (KafkaError._FAIL, "", "?", -1)
        error = KafkaError(code, reason)
        raise DeliveryError(
            f"task {index}: {failed} of {records} records were not delivered; first "
            f"failure on {topic}[{partition}]: {error.str()}. {_remedy(error)} "
            "The task fails so that Spark's retry (or a re-run) writes the partition again."
        )
    return TaskOutcome(index, records, False, tuple(sorted(topics)))


def _flush(producer: BatchProducer, config: Mapping[str, Any], index: int, records: int) -> None:
    """Wait until every record is acknowledged or failed: at most the producer ``config``'s
    ``message.timeout.ms`` (after which librdkafka fails a record) plus ``FLUSH_GRACE_S``.

    Raises:
        DeliveryError: records were still queued at the deadline.
    """
    timeout_ms = int(config.get("message.timeout.ms", config.get("delivery.timeout.ms", 0)) or 0)
    if timeout_ms == 0:  # the user asked librdkafka never to time a record out
        while producer.flush(1.0) > 0:
            pass
        return
    limit = timeout_ms / 1000 + FLUSH_GRACE_S
    deadline = time.monotonic() + limit
    remaining = producer.flush(min(1.0, limit))
    while remaining > 0 and (left := deadline - time.monotonic()) > 0:
        remaining = producer.flush(min(1.0, left))
    if remaining > 0:
        raise DeliveryError(
            f"task {index}: {remaining} of {records} records were not delivered within "
            f"{limit:.1f}s (message.timeout.ms={timeout_ms}): the brokers did not acknowledge "
            "them. Check that the brokers are up and reachable from the Spark executors, then "
            "re-run the write (Spark's retry of the task writes the partition again)."
        )


def _produce_batches(
    producer: BatchProducer,
    batches: Iterable[pa.RecordBatch],
    topic: str | None,
    index: int,
) -> tuple[int, set[str]]:
    """Produce every row of task ``index`` (the native producer, no Python object per row);
    return the row count and the topics written to.

    Raises:
        WriteConfigError: a row has a null ``topic``, a negative ``partition`` or a header with
            a null key. The driver's pre-pass finds these before anything is written; this is
            the task's own check (e.g. :func:`write_partition` called without the driver).
        DeliveryError: librdkafka refused a record (unknown topic or partition, too large).
        KafkaException: any other error of the producer (fenced, a transaction state).
    """
    records = 0
    topics: set[str] = set()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        producible = _producible(batch, index, topic)
        if topic is not None:
            topics.add(topic)
        else:
            topics.update(pc.unique(producible.column("topic")).to_pylist())
        try:
            records += producer.produce_batch(producible, topic)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() not in _RECORD_CODES or len(exc.args) < 2:
                raise
            row = exc.args[1]
            target = topic if topic is not None else producible.column("topic")[row].as_py()
            partition = (producible.column("partition")[row].as_py()
                         if "partition" in producible.schema.names else None)
            where = f"{target}[{partition}]" if partition is not None else repr(target)
            raise DeliveryError(
                f"task {index}: could not produce a record to {where}: "
                f"{error.str()}. {_remedy(error)}"
            ) from None
    return records, topics


# The column types the native producer takes (spark/transactions.py brings batches to them).
_PRODUCE_TYPES = {"key": pa.binary(), "value": pa.binary(), "topic": pa.string(),
                  "partition": pa.int32(), "timestamp": pa.int64()}


def _producible(batch: pa.RecordBatch, index: int, topic: str | None) -> pa.RecordBatch:
    """The batch's columns to produce, checked and in the native producer's types; without
    its ``topic`` column when ``topic`` names the target.

    Raises:
        WriteConfigError: a null ``topic``, a negative ``partition``, a header with a null key.
    """
    names = batch.schema.names
    columns: dict[str, pa.Array] = {}
    for name, wanted in _PRODUCE_TYPES.items():
        if name in names and not (name == "topic" and topic is not None):
            column = batch.column(name)
            columns[name] = column if column.type == wanted else column.cast(wanted)
    if "topic" in columns and columns["topic"].null_count:
        nulls = columns["topic"].null_count
        raise WriteConfigError(
            f"task {index}: column 'topic' is null in {nulls} {_rows(nulls)}: every row needs a "
            "topic. Fill the column or pass topic=."
        )
    if "partition" in columns:
        lowest = pc.min(columns["partition"]).as_py()
        if lowest is not None and lowest < 0:
            raise WriteConfigError(
                f"task {index}: column 'partition' holds {lowest}: a partition number must "
                "be >= 0 (null lets the partitioner choose). Fix the column."
            )
    if "headers" in names:
        headers = batch.column("headers")
        entries = pc.list_flatten(headers)
        if entries.null_count or entries.field("key").null_count:
            raise WriteConfigError(
                f"task {index}: column 'headers' has a header with a null key: Kafka header keys "
                "must be strings (the Java client rejects a null key too). Fill or drop such "
                "headers, e.g. filter(headers, h -> h.key IS NOT NULL)."
            )
        columns["headers"] = headers
    return pa.RecordBatch.from_pydict(columns)


def _rows(n: int) -> str:
    return "row" if n == 1 else "rows"


# produce() errors about the record itself (not the producer's state): a DeliveryError.
_RECORD_CODES = frozenset({KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
                           KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.MSG_SIZE_TOO_LARGE,
                           KafkaError._MSG_TIMED_OUT, KafkaError._INVALID_ARG})


def _remedy(err: KafkaError) -> str:
    """What to do about a record that could not be produced or delivered with ``err``."""
    code = err.code()
    if code in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART):
        return ("The topic does not exist (was it deleted after write_kafka checked it?): "
                "create it, then re-run the write.")
    if code == KafkaError._UNKNOWN_PARTITION:
        return ("The partition does not exist (the topic has fewer partitions): fix the "
                "'partition' column (null lets the partitioner choose), then re-run the write.")
    if code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        return ("The record is larger than the producer's message.max.bytes or the topic's "
                "max.message.bytes: raise those limits or make the record smaller.")
    if code == KafkaError._MSG_TIMED_OUT:
        return ("It was not acknowledged within message.timeout.ms: check that the brokers are "
                "up and reachable from the Spark executors, then re-run the write.")
    return "Fix the cause, then re-run the write."


class _ReplayableBatches:
    """The task's input, replayable after an aborted transaction while it fits in a budget.

    The first pass pulls from Spark and keeps the batches; a later pass re-yields the kept ones
    and continues pulling. Once the kept batches exceed ``budget`` bytes they are dropped and
    :attr:`replayable` turns false (Spark's task retry then recomputes the partition instead).
    """

    def __init__(self, source: Iterable[pa.RecordBatch], budget: int) -> None:
        self._source: Iterator[pa.RecordBatch] = iter(source)
        self._kept: list[pa.RecordBatch] | None = []
        self._kept_bytes = 0
        self._budget = budget
        self._passes = 0

    @property
    def replayable(self) -> bool:
        return self._kept is not None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        self._passes += 1
        if self._passes > 1:
            if self._kept is None:
                raise AssertionError("input replayed after the replay buffer was dropped: a bug "
                                     "in write_kafka; please report it")
            yield from list(self._kept)
        for batch in self._source:
            if self._kept is not None:
                self._kept.append(batch)
                self._kept_bytes += batch.nbytes
                if self._kept_bytes > self._budget:
                    self._kept = None
            yield batch


def _write_exactly_once(
    plan: TaskPlan, index: int, batches: Iterable[pa.RecordBatch]
) -> TaskOutcome:
    if index in plan.committed:
        return TaskOutcome(index, 0, True, ())
    assert plan.ledger_topic is not None and plan.write_id is not None
    assert plan.transactional_id_prefix is not None
    tid = plan.transactional_id(index)
    producer = _new_producer(producer_config(
        plan.kafka_config, "exactly_once", transactional_id=tid,
        transaction_timeout_ms=plan.transaction_timeout_ms), "exactly_once")
    _init_transactions(producer, tid, plan.init_timeout_s)
    # After the fence every earlier transaction of this id is decided, its markers written:
    # reading the ledger up to the current high watermark shows any commit of this task.
    timeout = plan.transaction_timeout_ms / 1000 + 30
    high = ledger_end_offset(admin_client(plan.kafka_config), plan.ledger_topic,
                             plan.ledger_partition, committed=False)
    view = read_ledger(plan.kafka_config, plan.ledger_topic, plan.ledger_partition,
                       transactional_id_prefix=plan.transactional_id_prefix,
                       write_id=plan.write_id, output_topic=plan.topic,
                       start_offset=plan.ledger_offset, until_offset=high, timeout=timeout)
    if index in view.entries:
        entry = view.entries[index]
        if plan.expected_rows is not None:
            targets = (plan.topic,) if plan.topic is not None else entry.topics
            expected = TaskInput(plan.expected_rows[index], targets, _digest(plan, index))
            found = expected.differences(entry)
            if found:  # another write of this write_id with other input committed meanwhile
                raise input_mismatch(
                    plan.transactional_id_prefix, plan.write_id, index, found,
                    "This task wrote nothing, but other tasks of this write may have committed "
                    "theirs: the output may mix both inputs.")
        log.info("task %d of write %r was committed by an earlier attempt; skipping",
                 index, plan.write_id)
        return TaskOutcome(index, 0, True, entry.topics)

    source = _ReplayableBatches(batches, plan.retry_buffer_bytes)
    attempt = 0
    while True:
        attempt += 1
        try:
            producer.begin_transaction()
            records, topics = _produce_batches(producer, source, plan.topic, index)
            if plan.expected_rows is not None and records != plan.expected_rows[index]:
                raise InputTruncatedError(
                    f"task {index} of write {plan.write_id!r} received {records} rows but its "
                    f"partition holds {plan.expected_rows[index]}: its input was cut short (an "
                    "upstream failure in the same Spark task) or the DataFrame is not "
                    "deterministic per partition. The transaction is aborted; Spark's task "
                    "retry or a re-run of the write writes the partition."
                )
            entry = LedgerEntry(plan.transactional_id_prefix, plan.write_id, index,
                                plan.num_partitions, records, tuple(sorted(topics)),
                                _digest(plan, index))
            producer.produce(plan.ledger_topic, entry.value(), entry.key().encode(),
                             plan.ledger_partition)
            _commit(producer, tid, timeout)
            return TaskOutcome(index, records, False, entry.topics)
        except KafkaException as exc:
            err = exc.args[0]
            if _is_fenced(err):
                raise ProducerFencedError(_fenced_message(tid, plan)) from None
            if not err.txn_requires_abort():
                _abort_quietly(producer, tid)
                raise TransactionError(
                    f"task {index}: transaction of transactional.id {tid!r} failed: "
                    f"{err.str()}. Re-run the write: it skips this task if the commit went "
                    "through, else writes it."
                ) from None
            _abort(producer, tid, plan)
            if attempt > plan.max_transaction_retries or not source.replayable:
                why = (f"{attempt} attempts" if source.replayable
                       else "the partition is larger than retry_buffer_bytes")
                raise TransactionError(
                    f"task {index}: transaction of transactional.id {tid!r} was aborted "
                    f"({err.str()}) and not retried further ({why}). Nothing of this task is "
                    "visible to read_committed readers; fix the cause and re-run the write."
                ) from None
            log.warning("task %d: transaction aborted (%s); retry %d of %d", index, err.str(),
                        attempt, plan.max_transaction_retries)
        except BaseException:
            _abort_quietly(producer, tid)
            raise


def _digest(plan: TaskPlan, index: int) -> str | None:
    return plan.digests[index] if plan.digests is not None else None


def fence_tasks(plan: TaskPlan, indices: Iterable[int]) -> None:
    """Fence the transactional ids of ``indices``: abort any transaction a crashed attempt left
    open, so that it stops holding back the last stable offset of the ledger and the output.

    Raises:
        TransactionError: (and subclasses) see :func:`_init_transactions`.
    """

    def fence(index: int) -> None:
        tid = plan.transactional_id(index)
        producer = _new_producer(producer_config(
            plan.kafka_config, "exactly_once", transactional_id=tid,
            transaction_timeout_ms=plan.transaction_timeout_ms), "exactly_once")
        _init_transactions(producer, tid, plan.init_timeout_s)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(fence, indices))


# init_transactions() answers: the coordinator cannot write __transaction_state (or has not
# within the timeout).
_COORDINATOR_CANNOT_WRITE = frozenset({
    KafkaError._TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})


def _init_transactions(producer: BatchProducer, tid: str, timeout: float) -> None:
    try:
        producer.init_transactions(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() in _COORDINATOR_CANNOT_WRITE:
            what = (f"did not finish within {timeout}s" if err.code() == KafkaError._TIMED_OUT
                    else f"failed: {err.str()}")
            raise TransactionInitTimeoutError(
                f"init_transactions() for transactional.id {tid!r} {what}. The usual cause is "
                "the broker's __transaction_state topic being under-replicated: fewer brokers "
                "are live than transaction.state.log.min.isr (min.insync.replicas of "
                "__transaction_state) or transaction.state.log.replication.factor, so the "
                "transaction coordinator cannot write. Check the brokers and those settings, "
                "then re-run the write; if the cluster is only slow, raise "
                "init_transactions_timeout_s."
            ) from None
        if _is_fenced(err):
            raise ProducerFencedError(
                f"init_transactions() for transactional.id {tid!r} was fenced: {err.str()}. A "
                "newer producer with this id took over: another attempt of this write is "
                "running, or another application uses the same transactional_id_prefix "
                "(prefixes must be unique per application). Let the other attempt finish, or "
                "give this application its own prefix, then re-run the write."
            ) from None
        raise TransactionError(
            f"init_transactions() for transactional.id {tid!r} failed: {err.str()}. Check the "
            "brokers and that this client may use transactional ids (ACLs: WRITE and DESCRIBE "
            "on TransactionalId, prefixed by transactional_id_prefix), then re-run the write."
        ) from None


def _commit(producer: BatchProducer, tid: str, timeout: float, attempts: int = 3) -> None:
    """``commit_transaction()``, called again (as librdkafka asks) on a retriable error."""
    for attempt in range(1, attempts + 1):
        try:
            producer.commit_transaction(timeout)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or attempt == attempts:
                raise
            log.warning("commit of transactional.id %r: %s; retrying", tid, exc.args[0].str())


def _abort(producer: BatchProducer, tid: str, plan: TaskPlan) -> None:
    try:
        producer.abort_transaction(plan.transaction_timeout_ms / 1000)
    except KafkaException as exc:
        if _is_fenced(exc.args[0]):
            raise ProducerFencedError(_fenced_message(tid, plan)) from None
        raise TransactionError(
            f"could not abort the transaction of transactional.id {tid!r}: "
            f"{exc.args[0].str()}. Nothing of it is visible to read_committed readers; re-run "
            "the write: its first step aborts that transaction at once (else the broker does "
            "after transaction_timeout_ms)."
        ) from None


def _abort_quietly(producer: BatchProducer, tid: str) -> None:
    """Abort on the way out of a failed task; the next attempt's fence aborts it otherwise."""
    try:
        producer.abort_transaction(10)
    except KafkaException as exc:
        log.warning("could not abort the transaction of transactional.id %r (%s); the next "
                    "attempt's init_transactions() or the broker's timeout aborts it",
                    tid, exc.args[0].str())


def _is_fenced(err: KafkaError) -> bool:
    return err.code() in _FENCED_CODES or (
        err.code() == KafkaError._FATAL and "fenced" in err.str().lower()
    )


def _fenced_message(tid: str, plan: TaskPlan) -> str:
    return (
        f"transactional.id {tid!r} was fenced: a newer producer with the same id took over, or "
        "the broker expired the id. Either another attempt of this same write is running (a "
        "Spark retry, a speculative task, an earlier Airflow try still alive; that attempt "
        "finishes the task and this one's transaction is aborted), or another application uses "
        f"transactional_id_prefix {plan.transactional_id_prefix!r} (prefixes must be unique per "
        "application), or the id was idle longer than the broker's "
        "transactional.id.expiration.ms. Nothing of this attempt is visible to read_committed "
        "readers; re-run the write to complete it."
    )
