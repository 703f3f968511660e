"""The package's option values and argument checks, in one place, importable without Spark or
Airflow (DAG files are parsed with them; the Spark layer checks the same values).

Option constants name every choice a user can pass (engines, delivery guarantees, decode
formats, ``on_corrupt``, ``on_data_loss``, isolation levels); the ``check_*`` functions turn a
bad argument into a :class:`ConfigurationError` that names the owner (task, trigger or
function), the argument, the value and what to pass instead, e.g.::

    ingest: max_records_per_split=0 is not valid; pass a positive int (the most offsets one
    Spark partition reads), e.g. 100000, or None for the default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from airflow_provider_kafka_spark.errors import ConfigurationError

ENGINES: tuple[str, ...] = ("python", "spark-kafka")
"""``read_kafka``'s engines: the package's ``kafka_bounded`` data source, or Spark's own."""
Engine = Literal["python", "spark-kafka"]
DELIVERY_GUARANTEES: tuple[str, ...] = ("none", "at_least_once", "exactly_once")
"""``write_kafka``'s delivery guarantees."""
DeliveryGuarantee = Literal["none", "at_least_once", "exactly_once"]
DATA_LOSS_CHOICES: tuple[str, ...] = ("fail", "skip")
"""``on_data_loss``: what a read does with offsets deleted since resolution."""
REGISTRY_FORMATS: tuple[str, ...] = ("avro", "protobuf", "json_schema")
"""The Schema Registry formats (Confluent wire format)."""
DECODE_FORMATS: tuple[str, ...] = ("bytes", "string", "json", *REGISTRY_FORMATS)
"""``decode_kafka``'s ``key_format`` / ``value_format``."""
ON_CORRUPT: tuple[str, ...] = ("fail", "skip", "dead_letter")
DEAD_LETTER_FOLDER = "_dead_letter"
"""The folder of undecodable records inside a file sink's output folder (Parquet; skipped by
readers of the output, like every name starting with ``_``)."""
"""``on_corrupt``: what decoding does with a record it cannot decode."""
ISOLATION_LEVELS: tuple[str, ...] = ("read_committed", "read_uncommitted")
"""Kafka's isolation levels, as librdkafka's ``isolation.level`` spells them."""
IsolationLevel = Literal["read_committed", "read_uncommitted"]
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""A legal Kafka topic name (Kafka's own rule; ``.`` and ``..`` excepted)."""
DATA_SOURCE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
"""A Spark data source name (``parquet``, ``delta``, ``org.apache.spark.sql.avro``...)."""
SQL_VIEW = "kafka"
"""The temporary view an ingest's ``sql=`` queries: the records read, in the Kafka source's
schema (decoded when the ingest decodes)."""

_INT_TEXT = re.compile(r"\s*\+?\d+\s*")


def is_topic_name(value: object) -> bool:
    """Whether ``value`` is a string Kafka accepts as a topic name."""
    return isinstance(value, str) and bool(TOPIC_NAME.fullmatch(value)) \
        and value not in (".", "..")


def shown(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters for the error message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def bad_argument(owner: str, name: str, value: Any, expected: str,
                 problem: str = "is not valid") -> ConfigurationError:
    """``<owner>: <name>=<value> <problem>; <expected>.`` as a :class:`ConfigurationError`."""
    return ConfigurationError(f"{owner}: {name}={shown(value)} {problem}; {expected.rstrip('.')}.")


def check_bool(owner: str, name: str, value: Any) -> bool:
    """``value`` if it is a bool (``0``, ``1``, ``"false"``... are not)."""
    if not isinstance(value, bool):
        raise bad_argument(owner, name, value, f"pass True or False (a bool, not "
                                               f"{type(value).__name__})")
    return value


def check_choice(owner: str, name: str, value: Any, choices: Collection[str], *,
                 ignore_case: bool = False) -> str:
    """``value`` (lower-cased with ``ignore_case``) if it is one of ``choices``."""
    found = value.lower() if ignore_case and isinstance(value, str) else value
    if not isinstance(found, str) or found not in choices:
        raise bad_argument(owner, name, value,
                           f"pass one of {', '.join(repr(c) for c in choices)}")
    return found


def check_positive_int(owner: str, name: str, value: Any, *, meaning: str, example: int,
                       allow_none: bool = False, allow_text: bool = False) -> int | None:
    """``value`` as an int ``>= 1``; ``None`` passes with ``allow_none``; a string of digits
    (what a template renders to) with ``allow_text``. Bools and floats never pass."""
    if value is None and allow_none:
        return None
    if allow_text and isinstance(value, str) and _INT_TEXT.fullmatch(value):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    expected = f"pass a positive int ({meaning}), e.g. {name}={example}"
    if allow_none:
        expected += ", or None for the default"
    problem = ("is a bool, not a number" if isinstance(value, bool)
               else "is not a whole number" if isinstance(value, float) else "is not valid")
    raise bad_argument(owner, name, value, expected, problem)


def check_seconds(owner: str, name: str, value: Any, *, meaning: str, example: float,
                  allow_none: bool = False) -> float | None:
    """``value`` as seconds ``> 0`` (an int, a float or a ``timedelta``); ``None`` passes with
    ``allow_none``. Bools, strings, NaN and infinity never pass.

    For the duration arguments of tasks and triggers (``poke_interval``, ``idle_timeout``, an
    operator's ``timeout``), checked when the DAG is parsed, with no upper bound. The time
    limit of a cluster call in the offset core, which librdkafka bounds to an hour, is
    :func:`airflow_provider_kafka_spark.offsets.config.check_timeout`."""
    if value is None and allow_none:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) \
            and math.isfinite(seconds) and seconds > 0:
        return float(seconds)
    expected = f"pass a positive number of seconds or a timedelta ({meaning}), e.g. {name}={example}"
    if allow_none:
        expected += ", or None"
    problem = ("is a bool, not a number" if isinstance(value, bool)
               else "is not a number" if not isinstance(seconds, int | float)
               else "is not a positive, finite duration")
    raise bad_argument(owner, name, value, expected, problem)


def check_progress_every(owner: str, value: Any) -> float | None:
    """``progress_every`` as seconds between progress lines, or None for none (None or 0)."""
    if value is None or (value == 0 and not isinstance(value, bool)):
        return None
    return check_seconds(owner, "progress_every", value, allow_none=True, example=30,
                         meaning="how often a long write logs its progress")


def check_text(owner: str, name: str, value: Any, *, meaning: str,
               allow_none: bool = False) -> str | None:
    """``value`` stripped, if it is a non-empty string; ``None`` passes with ``allow_none``."""
    if value is None and allow_none:
        return None
    if isinstance(value, str) and value.strip():
        return value.strip()
    expected = f"pass {meaning}" + (", or None" if allow_none else "")
    raise bad_argument(owner, name, value, expected,
                       "is empty" if isinstance(value, str) else "is not a string")


def check_topic_name(owner: str, name: str, value: Any) -> str:
    """``value`` stripped, if it is a legal Kafka topic name."""
    topic = check_text(owner, name, value, meaning="a Kafka topic name")
    assert topic is not None
    if not is_topic_name(topic):
        raise bad_argument(owner, name, value, "a Kafka topic name is 1 to 249 letters, digits, "
                                               "'.', '_' or '-'", "is not a legal topic name")
    return topic


def check_mapping(owner: str, name: str, value: Any, *, meaning: str,
                  allow_none: bool = True) -> dict[str, Any]:
    """``value`` as a dict with non-empty string keys; ``None`` is ``{}`` with ``allow_none``."""
    if value is None and allow_none:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise bad_argument(owner, name, value, f"pass a dict of {meaning} with string keys"
                                               + (", or None" if allow_none else ""))
    return dict(value)


WRITER_OPTION_TYPES = (str, int, float, bool)
"""The types a Spark writer option's value may have."""


def check_data_source_name(owner: str, name: str, value: Any) -> str:
    """``value`` stripped, if it looks like a Spark data source name (:data:`DATA_SOURCE_NAME`;
    whether the session has it is checked by the session)."""
    if not isinstance(value, str) or not DATA_SOURCE_NAME.fullmatch(value.strip()):
        raise bad_argument(owner, name, value,
                           "pass a Spark data source name such as 'parquet', 'json', 'csv', "
                           "'orc', or 'avro' (with its package)")
    return value.strip()


def check_writer_options(owner: str, name: str, value: Any) -> dict[str, Any]:
    """``value`` as a dict of Spark writer options (non-empty string keys; str, int, float or
    bool values); ``None`` is ``{}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and k and isinstance(v, WRITER_OPTION_TYPES)
            for k, v in value.items()):
        raise bad_argument(owner, name, value,
                           "pass a dict of Spark writer options with string keys, or None; pass "
                           "option values as str, int, float or bool, e.g. {'compression': 'zstd'}")
    return dict(value)


def check_column_names(owner: str, name: str, value: Any) -> tuple[str, ...]:
    """``value`` (a list or tuple of non-empty column names, stripped) as a tuple; ``None`` is
    ``()``. A bare string is refused: it would be read as one name per character."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple) or not all(
            isinstance(c, str) and c.strip() for c in value):
        raise bad_argument(owner, name, value,
                           f"pass a list of column names, e.g. {name}=['event_date'] (a list even "
                           "for one column)")
    return tuple(c.strip() for c in value)


@dataclass(frozen=True)
class ReadOptions:
    """How a bounded read reads, checked once when built: ``read_kafka``'s options that
    ``ingest`` and the ingest operator pass on.

    :param engine: ``python`` (the package's ``kafka_bounded`` source) or ``spark-kafka``.
    :param max_records_per_split: Spark partitions of at most this many offsets (None: the
        reader's default).
    :param include_headers: read the ``headers`` column.
    :param on_data_loss: ``fail`` or ``skip`` offsets deleted since resolution.
    :param owner: the name error messages start with (not part of the value).

    Raises:
        ConfigurationError: an option that is not valid, named with its value and a remedy.
    """

    engine: str = "python"
    max_records_per_split: int | None = None
    include_headers: bool = True
    on_data_loss: str = "fail"
    owner: str = field(default="read", compare=False, repr=False)

    def __post_init__(self) -> None:
        check_choice(self.owner, "engine", self.engine, ENGINES)
        check_positive_int(self.owner, "max_records_per_split", self.max_records_per_split,
                           meaning="the most offsets one Spark partition reads",
                           example=100_000, allow_none=True)
        check_bool(self.owner, "include_headers", self.include_headers)
        check_choice(self.owner, "on_data_loss", self.on_data_loss, DATA_LOSS_CHOICES)
