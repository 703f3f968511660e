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


class CommitError(KafkaSparkError):
    """Consumer-group offsets could not be committed."""
