"""The package's errors, all in one place. Every message says what was wrong, where (argument,
key, topic/partition/offset), and what to do, and never holds a secret.

``KafkaSparkError`` is the one base a user can catch::

    KafkaSparkError
      ConfigurationError        a bad argument, option, connection or client config (ValueError)
        KafkaAuthenticationError  the brokers refused the client's SASL credentials or TLS setup
        OffsetSpecError         an offset spec, subscription or serialized range
        PinnedRequestChangedError  a run's pin answers other topics/specs/group (re_resolve)
        WriteConfigError        write_kafka's arguments or input rows (also a KafkaWriteError)
        DecodeError             decode_kafka's options
      OffsetResolutionError     the cluster could not answer a resolution (unknown topic, timeout)
        UnknownTopicError       a named topic or partition is not there, a pattern matches none
        DataLossError           offsets a range needs were deleted
        IntervalNotCompleteError  an open transaction holds back a timestamp stop (retryable)
      CommitError               consumer-group offsets could not be committed
      InternalTopicError        the ledger / pins topics could not be created or read
      KafkaReadError            a split could not be read
        CorruptRecordError      a record could not be decoded (on_corrupt="fail")
      SparkKafkaSourceMissingError  engine="spark-kafka" without Spark's kafka source
      SparkKafkaJarsError       the jars of Spark's kafka source could not be fetched
      SchemaRegistryError       the Schema Registry could not answer
      KafkaWriteError           the Kafka sink failed
        DeliveryError, TransactionError (TransactionInitTimeoutError, ProducerFencedError,
        InputTruncatedError), LedgerError
      SinkError                 a sink could not prepare or publish its output (retryable)
        PublishConflictError    on S3, another run writes or published the same folder
      TransientError            a check before the read hit a store or server that did not answer

Each class says whether a retry can help (:attr:`KafkaSparkError.retryable`): configuration
and spec errors (every ``ConfigurationError``), undecodable records (``CorruptRecordError``) and
deleted offsets (``DataLossError``), topics or partitions the cluster does not have
(``UnknownTopicError``) fail the same way on every try, so the Airflow layer ends
the task at once (``airflow_provider_kafka_spark.retries``); the others keep Airflow's retries.

Where an engine's, a store's or a client's exception becomes one of these,
:func:`airflow_provider_kafka_spark.causes.classify` decides from its causes which class: only a
cause a retry cannot change (an unknown format, refused credentials, a missing bucket or topic,
a bad argument) is raised as a class that is not retryable.

Configuration errors are raised before any side effect: nothing read, committed or written.
:func:`kafka_errors` turns a failure of a Spark action whose cause is one of these errors
(raised on an executor, reported by Spark as a generic exception with its text) back into it.

No Airflow and no Spark import: every layer of the package imports this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar


class KafkaSparkError(Exception):
    """Base class of every error this package raises on purpose."""

    retryable: ClassVar[bool] = True
    """Whether a retry of the same task can succeed (a broker away, a coordinator moving, an
    interval not complete yet); False when the same inputs fail the same way every time."""


class ConfigurationError(KafkaSparkError, ValueError):
    """A bad argument, option, Airflow connection or librdkafka config; raised before anything
    is read, committed or written."""

    retryable = False


class KafkaAuthenticationError(ConfigurationError):
    """The brokers refused the client's credentials or TLS setup (wrong SASL user or password,
    a mechanism the listener does not enable, an untrusted CA, a missing or rejected client
    certificate). librdkafka reports these through its error callback, not as a request error;
    this package raises them as soon as they are reported instead of waiting for a timeout."""


class OffsetSpecError(ConfigurationError):
    """An offset spec, subscription or serialized range could not be understood."""


class PinnedRequestChangedError(ConfigurationError):
    """A run's pinned ranges answer another request (topics, specs, group) than the run makes
    now; re-resolve the run explicitly to read what it asks for."""


class OffsetResolutionError(KafkaSparkError):
    """Offsets could not be resolved against the cluster (unknown topic, bad range, timeout...).

    Raised before anything is read or committed.
    """


class UnknownTopicError(OffsetResolutionError):
    """A topic or partition the subscription names is not on the cluster, or its pattern
    matches no topic (after the wait for a topic created a moment ago).

    Not retryable: a retry asks the same cluster the same question; fix the names or create
    the topic. Still an ``OffsetResolutionError``, which sensors and the interval watcher take
    as "not there yet" and keep waiting on.
    """

    retryable = False


class DataLossError(OffsetResolutionError):
    """Offsets that a range needs were deleted (retention, ``delete_records``, compaction).

    ``lost`` maps ``(topic, partition)`` to the number of offsets that are gone.
    """

    retryable = False  # the pinned range reads the same gap on every try

    def __init__(self, message: str, lost: dict[tuple[str, int], int]) -> None:
        super().__init__(message)
        self.lost = dict(lost)


class IntervalNotCompleteError(OffsetResolutionError):
    """A ``timestamp:`` stop is held back by an open transaction that began before it, or a
    run's partition has not ended yet (``open_transactions`` empty).

    Records of that transaction may still be committed inside the interval, so the interval
    cannot be cut yet. Retryable: the transaction commits or aborts (at the latest after its
    ``transaction.timeout.ms``), then the same resolution succeeds. ``open_transactions`` maps
    ``(topic, partition)`` to the first offset of the open transaction (the last stable offset).
    """

    def __init__(self, message: str, open_transactions: dict[tuple[str, int], int]) -> None:
        super().__init__(message)
        self.open_transactions = dict(open_transactions)


class CommitError(KafkaSparkError):
    """Consumer-group offsets could not be committed."""


class InternalTopicError(KafkaSparkError):
    """A topic holding this package's state (the exactly-once ledger, pinned run ranges) could
    not be created, checked or read."""


class KafkaReadError(KafkaSparkError):
    """A split could not be read: no progress within ``poll_timeout``, or a non-retriable
    Kafka error (unknown topic, authorization, fatal client error)."""


class SparkKafkaSourceMissingError(KafkaSparkError):
    """``engine="spark-kafka"`` was asked for but Spark's ``kafka`` source is not on the
    classpath."""


class DecodeError(ConfigurationError):
    """Invalid decoding or encoding options (unknown format, missing or unparsable schema, a
    schema with no Spark counterpart)."""


class SchemaRegistryError(KafkaSparkError):
    """The Schema Registry could not answer: unreachable, refused the credentials, or does not
    have the subject/version asked for. Never a reason to skip or dead-letter records: the job
    fails (and Spark retries the task) instead, so nothing is dropped because a server was
    away."""

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
    fails, so the truncation is only visible by counting: against the driver's pre-pass, or
    against the end row the package's reader puts after each split (``split_ends``). The
    transaction is aborted; Spark's retry of the task (or a re-run of the write) writes the
    partition.
    """


class LedgerError(KafkaWriteError):
    """The ledger topic could not be created, read, or disagrees with this write."""


class CorruptRecordError(KafkaReadError):
    """A record could not be decoded and ``on_corrupt="fail"``: nothing was written.

    ``topic``, ``partition`` and ``offset`` name the first such record (the one the message
    names).
    """

    retryable = False  # the same records are read on every try

    def __init__(self, message: str, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class SparkKafkaJarsError(KafkaSparkError):
    """The jars of Spark's ``kafka`` source could not be fetched with Maven."""


class SinkError(KafkaSparkError):
    """A sink could not finish: the file sink could not move its staged output into place
    (the message says what is where on the file system, and what to do)."""


class TableError(SinkError):
    """An Iceberg or Delta table sink could not commit the run (e.g. concurrent commits kept
    conflicting, or the run's earlier rows cannot be replaced); the table is as it was."""


class TransientError(KafkaSparkError):
    """A step that checks the run before the read (a ``transform`` or ``sql`` on an empty
    DataFrame, a partition's slice) failed for a reason a retry can change: a metastore, a
    store or a server that did not answer, timed out, throttled or reset the connection
    (:func:`airflow_provider_kafka_spark.causes.classify`). Nothing was read or written."""


class TableRuntimeError(ConfigurationError):
    """The session lacks the Iceberg or Delta runtime a table sink needs, or has one built for
    another Spark version (the message names the artifact to put on the classpath)."""



@contextmanager
def kafka_errors() -> Iterator[None]:
    """Re-raise executor-side failures of a Spark action as this package's exceptions.

    Spark reports an exception raised in a Python worker as a generic ``PythonException`` /
    ``Py4JJavaError`` carrying the traceback text. Inside ``with kafka_errors():`` a failure
    caused by one of this package's errors (:class:`DataLossError` with its ``lost`` counts,
    :class:`KafkaReadError`, :class:`KafkaAuthenticationError`, the ``write_kafka``
    errors, the object store's :class:`SinkError` and :class:`ConfigurationError` of a
    reader's upload), or by a corrupt record of ``decode_kafka(on_corrupt="fail")``
    (:class:`CorruptRecordError` with its ``topic``, ``partition`` and ``offset``), is raised
    as that class, chained to the original; anything else propagates unchanged::

        with kafka_errors():
            df.write.parquet(path)
    """
    try:
        yield
    except KafkaSparkError:
        raise
    except Exception as exc:
        converted = executor_error(str(exc))
        if converted is None:
            raise
        raise converted from exc


_LOST = re.compile(r"\[lost: ([\w.-]+)/(\d+)=(\d+)\]")
_CORRUPT = re.compile(r"(corrupt record in ([\w.-]+)/(\d+) at offset (\d+): .*?)"
                      r"(?: SQLSTATE: \w+)?(?:\n|$)")
"""``decode_kafka``'s message for a corrupt record with ``on_corrupt="fail"`` (Spark's
``raise_error``: ``[USER_RAISED_EXCEPTION] <message> SQLSTATE: P0001``)."""


def executor_error(text: str) -> KafkaSparkError | None:
    """The package error in the text of Spark's wrapping exception, or None: a corrupt record
    of ``decode_kafka`` (the cause of the job's failure wherever it surfaced), else the
    package error named last."""
    corrupt = _CORRUPT.search(text)
    if corrupt:
        message, topic, partition, offset = corrupt.groups()
        return CorruptRecordError(message, topic, int(partition), int(offset))
    classes = _executor_error_classes()
    pattern = re.compile(rf"(?:[\w.]+\.)?({'|'.join(classes)}): (.*?)(?:\n|$)")
    matches = pattern.findall(text)
    if not matches:
        return None
    kind, message = matches[-1]
    if kind == "DataLossError":
        lost = {(t, int(p)): int(n) for t, p, n in _LOST.findall(message)}
        return DataLossError(message, lost)
    return classes[kind](message)


def _executor_error_classes() -> dict[str, type[KafkaSparkError]]:
    """The errors an executor can raise, by class name: the read's, the registry's, every
    ``KafkaWriteError``, and the object store's (a reader's upload to S3: ``SinkError``, or
    ``ConfigurationError`` when a retry cannot help)."""
    classes: dict[str, type[KafkaSparkError]] = {
        "DataLossError": DataLossError, "KafkaReadError": KafkaReadError,
        "CorruptRecordError": CorruptRecordError,
        "KafkaAuthenticationError": KafkaAuthenticationError,
        "SchemaRegistryError": SchemaRegistryError,
        "SinkError": SinkError, "ConfigurationError": ConfigurationError}
    pending: list[type[KafkaSparkError]] = [KafkaWriteError]
    while pending:
        cls = pending.pop()
        classes[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return classes


def error_line(exc: BaseException, limit: int = 500) -> str:
    """The first meaningful line of an exception's message, for error messages and logs; for
    a Java exception (``Py4JJavaError``), the Java exception's class and message."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return cut(lines[0] if lines else type(exc).__name__, limit)


def cut(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit - 3]}..."
