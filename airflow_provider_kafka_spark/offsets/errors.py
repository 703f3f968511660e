"""Exceptions of the offset core. Every message says what was wrong, where, and what to do."""

from __future__ import annotations


class KafkaSparkError(Exception):
    """Base class of every error this package raises on purpose."""


class OffsetSpecError(KafkaSparkError, ValueError):
    """An offset spec, subscription or serialized range could not be understood."""


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
