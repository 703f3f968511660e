"""The package's error hierarchy. Every message says what was wrong, where, and what to do.

``KafkaSparkError`` is the one base a user can catch::

    KafkaSparkError
      ConfigurationError        a bad argument, option, connection or client config (ValueError)
        OffsetSpecError         an offset spec, subscription or serialized range
        WriteConfigError        write_kafka's arguments or input rows (spark.write_errors)
        DecodeError             decode_kafka's options (spark.errors)
        KafkaAuthenticationError  the brokers refused the client's SASL credentials or TLS setup
      OffsetResolutionError     the cluster could not answer a resolution (unknown topic, timeout)
        DataLossError           offsets a range needs were deleted
        IntervalNotCompleteError  an open transaction holds back a timestamp stop (retryable)
      CommitError               consumer-group offsets could not be committed
      InternalTopicError        the ledger / pins topics could not be created or read
      KafkaReadError            a split could not be read (spark.errors)
      SchemaRegistryError       the Schema Registry could not answer (spark.errors)
      KafkaWriteError           the sink failed (spark.write_errors; delivery, transactions, ledger)
      SinkError                 a file sink could not swap in its staged output (sinks.base)

Configuration errors are raised before any side effect: nothing read, committed or written.
"""

from __future__ import annotations


class KafkaSparkError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigurationError(KafkaSparkError, ValueError):
    """A bad argument, option, Airflow connection or librdkafka config; raised before anything
    is read, committed or written."""


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


class DataLossError(OffsetResolutionError):
    """Offsets that a range needs were deleted (retention, ``delete_records``, compaction).

    ``lost`` maps ``(topic, partition)`` to the number of offsets that are gone.
    """

    def __init__(self, message: str, lost: dict[tuple[str, int], int]) -> None:
        super().__init__(message)
        self.lost = dict(lost)


class IntervalNotCompleteError(OffsetResolutionError):
    """A ``timestamp:`` stop is held back by an open transaction that began before it.

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
