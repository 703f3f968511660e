"""Exceptions of the Kafka sink (``write_kafka``). Every message says what was wrong, where, and
what to do; none of them contains a config value other than ``bootstrap.servers`` (never a
secret), so secrets never reach a log line."""

from __future__ import annotations

from airflow_provider_kafka_spark.offsets.errors import ConfigurationError, KafkaSparkError


class KafkaWriteError(KafkaSparkError):
    """Base class of every error ``write_kafka`` raises on purpose."""


class WriteConfigError(KafkaWriteError, ConfigurationError):
    """Bad arguments or input columns; raised before anything is written."""


class DeliveryError(KafkaWriteError):
    """A record could not be produced (unknown topic or partition, too large), was not
    acknowledged by Kafka (``at_least_once``), or was still unacknowledged when a task's final
    flush ran out of time (``none``, ``at_least_once``)."""


class TransactionError(KafkaWriteError):
    """A Kafka transaction could not be initialised, committed or retried (``exactly_once``)."""


class TransactionInitTimeoutError(TransactionError):
    """``init_transactions()`` did not return in time, or the transaction coordinator was not
    available (usually ``__transaction_state`` trouble: fewer live brokers than its
    ``min.insync.replicas``)."""


class ProducerFencedError(TransactionError):
    """A newer producer with the same ``transactional.id`` took over, or the id expired."""


class InputTruncatedError(TransactionError):
    """A Spark task saw fewer rows than its partition holds: its input was cut short.

    Spark ends a Python task's input stream silently when an upstream computation of that task
    fails, so the truncation is only visible by counting. The transaction is aborted; Spark's
    retry of the task (or a re-run of the write) writes the partition.
    """


class LedgerError(KafkaWriteError):
    """The ledger topic could not be created, read, or disagrees with this write."""
