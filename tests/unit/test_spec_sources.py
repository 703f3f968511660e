"""Where a resolve run's specs come from (``choose_specs``): the precedence table, row by row,
on plain values (no Airflow context)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    Earliest,
    Latest,
    OffsetSpecError,
    Timestamp,
)
from airflow_provider_kafka_spark.offsets.intervals import Interval
from airflow_provider_kafka_spark.operators.spec_sources import (
    RunSpecs,
    SpecSources,
    choose_specs,
)

T0 = datetime(2024, 5, 1, 10, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 11, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
HOUR_MS = 3_600_000
HOURS = (Interval(T0_MS + 5 * HOUR_MS, T0_MS + 6 * HOUR_MS),
         Interval(T0_MS + 6 * HOUR_MS, T0_MS + 7 * HOUR_MS))
INTERVAL = (T0, T1)
AT_T0, AT_T1 = Timestamp.from_datetime(T0), Timestamp.from_datetime(T1)
FIRST, LAST = Timestamp(T0_MS + 5 * HOUR_MS), Timestamp(T0_MS + 7 * HOUR_MS)

PARTITION = ("timestamp:2024-05-01T12:00:00+00:00", "timestamp:2024-05-01T13:00:00+00:00")
AT_12, AT_13 = Timestamp(T0_MS + 2 * HOUR_MS), Timestamp(T0_MS + 3 * HOUR_MS)
NO_SLICE = ConfigurationError("r: the run's partition key 'us' does not say which slice")

# params, arguments, partition, announced, data interval -> start, stop, sources
NONE = (None, None)
CASES: list[tuple[str, dict[str, Any], tuple[Any, Any], Any, tuple[Interval, ...],
                  tuple[Any, Any], RunSpecs]] = [
    ("data interval only", {}, (None, None), NONE, (), INTERVAL,
     RunSpecs(AT_T0, AT_T1, ("data_interval", "data_interval"))),
    ("arguments over the data interval", {}, ("earliest", "latest"), NONE, (), INTERVAL,
     RunSpecs(Earliest(), Latest(), ("arguments", "arguments"))),
    ("params over arguments, side by side", {"start": None, "stop": "latest"},
     ("earliest", "timestamp:2024-05-01T11:00:00Z"), NONE, (), (T0, T0),
     RunSpecs(Earliest(), Latest(), ("arguments", "params"))),
    ("params over everything", {"start": "earliest", "stop": "latest"},
     ("timestamp:2024-05-01T10:00:00Z", "timestamp:2024-05-01T11:00:00Z"), PARTITION, HOURS,
     INTERVAL,
     RunSpecs(Earliest(), Latest(), ("params", "params"))),
    ("an empty Param is not set", {"start": "", "stop": ""}, (None, None), NONE, (), INTERVAL,
     RunSpecs(AT_T0, AT_T1, ("data_interval", "data_interval"))),
    ("announcements over the data interval", {}, (None, None), NONE, HOURS, INTERVAL,
     RunSpecs(FIRST, LAST, ("announced", "announced"))),
    ("announcements without a data interval", {}, (None, None), NONE, HOURS[:1], (None, None),
     RunSpecs(FIRST, Timestamp(T0_MS + 6 * HOUR_MS), ("announced", "announced"))),
    ("a Param start over an announced start", {"start": "earliest"}, (None, None), NONE, HOURS,
     (None, None), RunSpecs(Earliest(), LAST, ("params", "announced"))),
    ("an argument stop over an announced stop", {}, (None, "latest"), NONE, HOURS, INTERVAL,
     RunSpecs(FIRST, Latest(), ("announced", "arguments"))),
    ("the partition without a data interval", {}, (None, None), PARTITION, (), (None, None),
     RunSpecs(AT_12, AT_13, ("partition", "partition"))),
    ("the partition over announcements and the data interval", {}, (None, None), PARTITION,
     HOURS, INTERVAL, RunSpecs(AT_12, AT_13, ("partition", "partition"))),
    ("arguments over the partition, side by side", {}, ("earliest", None), PARTITION, (),
     (None, None), RunSpecs(Earliest(), AT_13, ("arguments", "partition"))),
    ("Params over a partition without bounds", {"start": "earliest", "stop": "latest"},
     (None, None), NO_SLICE, (), (None, None),
     RunSpecs(Earliest(), Latest(), ("params", "params"))),
]


@pytest.mark.parametrize(("params", "arguments", "partition", "announced", "interval",
                          "expected"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_side_comes_from_the_first_source_that_gives_it(
        params: dict[str, Any], arguments: tuple[Any, Any], partition: Any,
        announced: tuple[Interval, ...], interval: tuple[Any, Any], expected: RunSpecs) -> None:
    offered = SpecSources(params, arguments, partition, announced, interval)
    assert choose_specs("r", offered) == expected


ERRORS: list[tuple[str, SpecSources, str]] = [
    ("no source for the start", SpecSources({}, (None, "latest")),
     r"^r: no start offset spec: the run has no data interval.*Param 'start'"),
    ("no source at all", SpecSources({}), r"^r: no start offset spec"),
    ("no source for the stop", SpecSources({"start": "earliest"}),
     r"^r: no stop offset spec.*pass stop= to the operator"),
    ("a zero-width data interval", SpecSources({}, data_interval=(T0, T0)),
     r"zero-width.*Params 'start' and 'stop'"),
    ("a bad Param, named", SpecSources({"stop": "tomorrow"}, data_interval=INTERVAL),
     r"^r: stop: unknown offset spec 'tomorrow'"),
    ("a bad argument, named", SpecSources({}, ("yesterday", None), data_interval=INTERVAL),
     r"^r: start: unknown offset spec 'yesterday'"),
]


@pytest.mark.parametrize(("offered", "error"), [case[1:] for case in ERRORS],
                         ids=[case[0] for case in ERRORS])
def test_a_run_without_usable_specs_is_an_error_never_an_empty_read(
        offered: SpecSources, error: str) -> None:
    with pytest.raises(OffsetSpecError, match=error):
        choose_specs("r", offered)


def test_a_partition_without_bounds_is_its_error_when_a_side_needs_it() -> None:
    with pytest.raises(ConfigurationError, match="partition key 'us' does not say"):
        choose_specs("r", SpecSources({"start": "earliest"}, partition=NO_SLICE,
                                      data_interval=INTERVAL))
