"""What one Spark task of ``write_kafka`` does with one partition: produce its rows to Kafka.

Nothing here imports Spark: a task receives ``pyarrow.RecordBatch`` es and a
:class:`~airflow_provider_kafka_spark.spark.write.plan.TaskPlan` built on the driver, so the
same code runs in a Spark Python worker and in a plain process (the kill-point tests drive it
both ways). ``none`` / ``at_least_once`` produce and flush; ``exactly_once`` runs the protocol
of :mod:`~airflow_provider_kafka_spark.spark.write.transactions`. An input that holds the
readers' end rows (``plan.split_ends``) goes through
:class:`~airflow_provider_kafka_spark.spark.split_ends.SplitEnds`: stripped, and with
``exactly_once`` checked before the commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from airflow_provider_kafka_spark.errors import (
    DeliveryError,
    InputTruncatedError,
    ProducerFencedError,
    TransactionError,
)
from airflow_provider_kafka_spark.spark.native import BatchProducer
from airflow_provider_kafka_spark.spark.split_ends import SplitEnds
from airflow_provider_kafka_spark.spark.write.ledger import (
    LedgerEntry,
    TaskInput,
    check_identity,
    input_mismatch,
    ledger_high_watermark,
    read_ledger,
)
from airflow_provider_kafka_spark.spark.write.plan import TaskPlan
from airflow_provider_kafka_spark.spark.write.producer import (
    new_producer,
    produce_batches,
    remedy,
)
from airflow_provider_kafka_spark.spark.write.transactions import (
    abort,
    abort_quietly,
    commit,
    fenced_message,
    init_transactions,
    is_fenced,
)

log = logging.getLogger(__name__)

# none / at_least_once: how much longer than message.timeout.ms a task's final flush waits for
# librdkafka to fail a record.
FLUSH_GRACE_S = 5.0


@dataclass(frozen=True)
class TaskOutcome:
    """What one task did: ``records`` produced (0 when ``skipped``) to ``topics``."""

    index: int
    records: int
    skipped: bool
    topics: tuple[str, ...]


def write_partition(plan: TaskPlan, index: int, batches: Iterable[pa.RecordBatch]) -> TaskOutcome:
    """Produce the rows of partition ``index`` with ``plan.guarantee``; ``exactly_once`` as the
    :mod:`~airflow_provider_kafka_spark.spark.write.transactions` module doc says.

    Raises:
        DeliveryError: ``at_least_once`` and a record was not acknowledged.
        TransactionError: (and subclasses) ``exactly_once`` could not commit.
    """
    if plan.guarantee == "exactly_once":
        return _write_exactly_once(plan, index, batches)
    config = plan.kafka_config.producer(plan.guarantee)
    producer = new_producer(config, plan.guarantee)
    try:
        records, topics = produce_batches(
            producer, SplitEnds(batches) if plan.split_ends else batches, plan.topic, index)
    except KafkaException as exc:
        raise DeliveryError(
            f"task {index}: could not produce a record: {exc.args[0].str()}. "
            f"{remedy(exc.args[0])}"
        ) from None
    flush(producer, config, index, records)
    failed, first = producer.delivery_failures()
    if failed:
        code, reason, topic, partition = first or (KafkaError._FAIL, "", "?", -1)
        error = KafkaError(code, reason)
        raise DeliveryError(
            f"task {index}: {failed} of {records} records were not delivered; first "
            f"failure on {topic}[{partition}]: {error.str()}. {remedy(error)} "
            "The task fails so that Spark's retry (or a re-run) writes the partition again."
        )
    return TaskOutcome(index, records, False, tuple(sorted(topics)))


def flush(producer: BatchProducer, config: Mapping[str, Any], index: int, records: int) -> None:
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


class ReplayableBatches:
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
        """Whether another pass can still be made (the kept batches fit in the budget)."""
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


_MIXED = ("This task wrote nothing, but other tasks of this write may have committed theirs: "
          "the output may mix both inputs.")


def _write_exactly_once(
    plan: TaskPlan, index: int, batches: Iterable[pa.RecordBatch]
) -> TaskOutcome:
    """The exactly-once protocol of one task (the transactions module doc)."""
    if index in plan.committed:
        return TaskOutcome(index, 0, True, ())
    assert plan.ledger_topic is not None and plan.write_id is not None
    assert plan.transactional_id_prefix is not None
    tid = plan.transactional_id(index)
    producer = new_producer(plan.kafka_config.producer(
        "exactly_once", transactional_id=tid,
        transaction_timeout_ms=plan.transaction_timeout_ms), "exactly_once")
    init_transactions(producer, tid, plan.init_timeout_s)
    # After the fence every earlier transaction of this id is decided, its markers written:
    # reading the ledger up to the current high watermark shows any commit of this task.
    timeout = plan.transaction_timeout_ms / 1000 + 30
    high = ledger_high_watermark(plan.kafka_config, plan.ledger_topic, plan.ledger_partition)
    view = read_ledger(plan.kafka_config, plan.ledger_topic, plan.ledger_partition,
                       transactional_id_prefix=plan.transactional_id_prefix,
                       write_id=plan.write_id, start_offset=plan.ledger_offset,
                       until_offset=high, timeout=timeout)
    if index in view.entries:
        entry = view.entries[index]
        if plan.expected_rows is not None:
            targets = (plan.topic,) if plan.topic is not None else entry.topics
            expected = TaskInput(plan.expected_rows[index], targets, plan.digest(index))
            found = expected.differences(entry)
            if found:  # another write of this write_id with other input committed meanwhile
                raise input_mismatch(
                    plan.transactional_id_prefix, plan.write_id, index, found, _MIXED)
        if plan.identity is not None:
            check_identity({index: entry}, plan.identity,
                           transactional_id_prefix=plan.transactional_id_prefix,
                           write_id=plan.write_id, outcome=_MIXED)
        log.info("task %d of write %r was committed by an earlier attempt; skipping",
                 index, plan.write_id)
        return TaskOutcome(index, 0, True, entry.topics)

    ends = SplitEnds(batches) if plan.split_ends else None
    source = ReplayableBatches(batches if ends is None else ends, plan.retry_buffer_bytes)
    attempt = 0
    while True:
        attempt += 1
        try:
            producer.begin_transaction()
            records, topics = produce_batches(producer, source, plan.topic, index)
            if ends is not None:
                ends.check(f"task {index} of write {plan.write_id!r}")
            elif plan.expected_rows is None and plan.identity is not None:
                raise InputTruncatedError(
                    f"task {index} of write {plan.write_id!r} received {records} rows and "
                    "cannot tell whether that is its whole input: its plan has neither the "
                    "rows of its partition (expected_rows) nor input with the readers' end "
                    "rows (split_ends). The transaction is aborted; write with write_kafka, "
                    "which sets one of them."
                )
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
                                plan.digest(index), plan.identity)
            producer.produce(plan.ledger_topic, entry.value(), entry.key().encode(),
                             plan.ledger_partition)
            commit(producer, tid, timeout)
            return TaskOutcome(index, records, False, entry.topics)
        except KafkaException as exc:
            err = exc.args[0]
            if is_fenced(err):
                raise ProducerFencedError(
                    fenced_message(tid, plan.transactional_id_prefix)) from None
            if not err.txn_requires_abort():
                abort_quietly(producer, tid)
                raise TransactionError(
                    f"task {index}: transaction of transactional.id {tid!r} failed: "
                    f"{err.str()}. Re-run the write: it skips this task if the commit went "
                    "through, else writes it."
                ) from None
            abort(producer, tid, plan.transaction_timeout_ms / 1000, plan.transactional_id_prefix)
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
            abort_quietly(producer, tid)
            raise
