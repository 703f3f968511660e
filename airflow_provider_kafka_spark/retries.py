"""Which failures Airflow retries: an error of this package whose class says a retry cannot
help (:attr:`~airflow_provider_kafka_spark.errors.KafkaSparkError.retryable` is False: bad
configuration, specs, partition keys, schemas, credentials, undecodable records, deleted
offsets) ends the task at once, without its retries; every other error keeps them.

The exception raised is the same object, with its class made a subclass of both its own class
and Airflow's ``AirflowFailException`` (the SDK's way to say "do not retry"), named as before:
``except ConfigurationError`` still catches it, and the task log shows the same class and
message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_kafka_spark.errors import KafkaSparkError

F = TypeVar("F", bound=Callable[..., Any])

_NOT_RETRIED: dict[type[KafkaSparkError], type[KafkaSparkError]] = {}


def not_retried(exc: KafkaSparkError) -> KafkaSparkError:
    """``exc``, made an ``AirflowFailException`` too (its class, message and attributes kept)."""
    cls = type(exc)
    if isinstance(exc, AirflowFailException):
        return exc
    if cls not in _NOT_RETRIED:
        _NOT_RETRIED[cls] = type(cls.__name__, (cls, AirflowFailException),
                                 {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                  "__doc__": cls.__doc__})
    exc.__class__ = _NOT_RETRIED[cls]
    return exc


def fail_at_once_when_certain(method: F) -> F:
    """Decorate an operator's or sensor's ``execute`` (``poke``, ``execute_complete``): an error
    of this package that a retry cannot fix is raised as :func:`not_retried`."""
    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except KafkaSparkError as exc:
            if not exc.retryable:
                not_retried(exc)
            raise
    return run  # type: ignore[return-value]
