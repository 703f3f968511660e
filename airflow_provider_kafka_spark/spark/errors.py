"""Errors of the Spark layer; all derive from ``offsets.KafkaSparkError``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_provider_kafka_spark.offsets.errors import (
    ConfigurationError,
    DataLossError,
    KafkaAuthenticationError,
    KafkaSparkError,
)


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


@contextmanager
def kafka_errors() -> Iterator[None]:
    """Re-raise executor-side failures of a Spark action as this package's exceptions.

    Spark reports an exception raised in a Python worker as a generic ``PythonException`` /
    ``Py4JJavaError`` carrying the traceback text. Inside ``with kafka_errors():`` a failure
    caused by one of this package's errors (:class:`DataLossError` with its ``lost`` counts,
    :class:`KafkaReadError`, :class:`KafkaAuthenticationError`, the ``write_kafka``
    errors) is raised as that class, chained to
    the original; anything else propagates unchanged::

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


def executor_error(text: str) -> KafkaSparkError | None:
    """The package error named last in the text of Spark's wrapping exception, or None."""
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
    from airflow_provider_kafka_spark.spark import write_errors

    classes: dict[str, type[KafkaSparkError]] = {
        "DataLossError": DataLossError, "KafkaReadError": KafkaReadError,
        "KafkaAuthenticationError": KafkaAuthenticationError,
        "SchemaRegistryError": SchemaRegistryError}
    for name in dir(write_errors):
        value = getattr(write_errors, name)
        if isinstance(value, type) and issubclass(value, write_errors.KafkaWriteError):
            classes[name] = value
    return classes
