"""The exactly-once protocol: how one Spark task of ``write_kafka`` writes its partition in one
Kafka transaction together with its ledger record, and the transaction steps it is made of.

``exactly_once`` per task (partition index ``i``; run by
:func:`~airflow_provider_kafka_spark.spark.write.task.write_partition`)::

    init_transactions()            fences every older producer of transactional.id <prefix>-p<slot>-<i>
                                   and completes or aborts its transaction
    read the ledger tail           (read_committed) up to the high watermark seen after the fence
    if (prefix, write_id, i)       skip - an earlier attempt committed this task (refuse
      is there:                    with LedgerError if it recorded another input fingerprint)
    begin_transaction()
    produce the rows               counting them; fewer than the partition holds -> abort
    produce the ledger record      last, so the ledger partition is held back only briefly
    commit_transaction()           output and ledger record become visible together

An abortable error aborts the transaction and retries it from the task's input kept in memory
(:class:`~airflow_provider_kafka_spark.spark.write.task.ReplayableBatches`); a fenced producer
means another attempt of the same task took over. Before the tasks run, the driver fences the
unfinished tasks whose earlier attempt may have left a transaction open
(:func:`~airflow_provider_kafka_spark.spark.write.plan.fence_tasks`). The ledger itself is
:mod:`~airflow_provider_kafka_spark.spark.write.ledger`.

Nothing here imports Spark.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException

from airflow_provider_kafka_spark.errors import (
    ProducerFencedError,
    TransactionError,
    TransactionInitTimeoutError,
)
from airflow_provider_kafka_spark.spark.native import BatchProducer

log = logging.getLogger(__name__)

_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)

# init_transactions() answers: the coordinator cannot write __transaction_state (or has not
# within the timeout).
_COORDINATOR_CANNOT_WRITE = frozenset({
    KafkaError._TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})


def init_transactions(producer: BatchProducer, tid: str, timeout: float) -> None:
    """``init_transactions()``: fence every older producer of ``tid`` and complete or abort its
    transaction.

    Raises:
        TransactionInitTimeoutError: the transaction coordinator could not write (or did not
            within ``timeout`` seconds).
        ProducerFencedError: a newer producer of ``tid`` took over.
        TransactionError: any other failure.
    """
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
        if is_fenced(err):
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


def commit(producer: BatchProducer, tid: str, timeout: float, attempts: int = 3) -> None:
    """``commit_transaction()``, called again (as librdkafka asks) on a retriable error.

    Raises:
        KafkaException: a non-retriable error, or the last attempt's.
    """
    for attempt in range(1, attempts + 1):
        try:
            producer.commit_transaction(timeout)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or attempt == attempts:
                raise
            log.warning("commit of transactional.id %r: %s; retrying", tid, exc.args[0].str())


def abort(producer: BatchProducer, tid: str, timeout: float, prefix: str | None) -> None:
    """``abort_transaction()`` after an abortable error, before the transaction is retried.

    Raises:
        ProducerFencedError: a newer producer of ``tid`` took over (see :func:`fenced_message`).
        TransactionError: the abort failed.
    """
    try:
        producer.abort_transaction(timeout)
    except KafkaException as exc:
        if is_fenced(exc.args[0]):
            raise ProducerFencedError(fenced_message(tid, prefix)) from None
        raise TransactionError(
            f"could not abort the transaction of transactional.id {tid!r}: "
            f"{exc.args[0].str()}. Nothing of it is visible to read_committed readers; re-run "
            "the write: its first step aborts that transaction at once (else the broker does "
            "after transaction_timeout_ms)."
        ) from None


def abort_quietly(producer: BatchProducer, tid: str) -> None:
    """Abort on the way out of a failed task; the next attempt's fence aborts it otherwise."""
    try:
        producer.abort_transaction(10)
    except KafkaException as exc:
        log.warning("could not abort the transaction of transactional.id %r (%s); the next "
                    "attempt's init_transactions() or the broker's timeout aborts it",
                    tid, exc.args[0].str())


def is_fenced(err: KafkaError) -> bool:
    """Whether ``err`` says a newer producer of the same transactional id took over."""
    return err.code() in _FENCED_CODES or (
        err.code() == KafkaError._FATAL and "fenced" in err.str().lower()
    )


def fenced_message(tid: str, prefix: str | None) -> str:
    """The :class:`ProducerFencedError` message of a task whose producer ``tid`` (of
    ``transactional_id_prefix`` ``prefix``) was fenced."""
    return (
        f"transactional.id {tid!r} was fenced: a newer producer with the same id took over, or "
        "the broker expired the id. Either another attempt of this same write is running (a "
        "Spark retry, a speculative task, an earlier Airflow try still alive; that attempt "
        "finishes the task and this one's transaction is aborted), or another application uses "
        f"transactional_id_prefix {prefix!r} (prefixes must be unique per "
        "application), or the id was idle longer than the broker's "
        "transactional.id.expiration.ms. Nothing of this attempt is visible to read_committed "
        "readers; re-run the write to complete it."
    )
