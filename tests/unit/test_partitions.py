"""A partitioned run's slice of Kafka (``partition_bounds``): Airflow's own timetables, each
error naming the key and what to pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow.sdk import CronPartitionTimetable, PartitionedAtRuntime

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets import Timestamp
from airflow_provider_kafka_spark.operators.partitions import (
    RunPartition,
    check_partition_slice,
    partition_bounds,
    unkeyed_run_of_partitioned_dag,
)

HOURLY = CronPartitionTimetable("0 * * * *", timezone="UTC")
BERLIN_DAILY = CronPartitionTimetable("0 0 * * *", timezone="Europe/Berlin",
                                      key_format="%Y-%m-%d")


def at(*fields: int) -> Timestamp:
    return Timestamp.from_datetime(datetime(*fields, tzinfo=UTC))  # type: ignore[misc]


@pytest.mark.parametrize(("timetable", "partition", "bounds"), [
    (HOURLY, RunPartition("2026-03-10T09:00:00", datetime(2026, 3, 10, 9, tzinfo=UTC)),
     (at(2026, 3, 10, 9), at(2026, 3, 10, 10))),
    # a key triggered through the REST API, without partition_date: read with key_format
    (HOURLY, RunPartition("2026-03-10T23:00:00", None),
     (at(2026, 3, 10, 23), at(2026, 3, 11, 0))),
    # Berlin's day of the spring change has 23 hours (00:00 CET = 23:00 UTC the day before)
    (BERLIN_DAILY, RunPartition("2026-03-29", None), (at(2026, 3, 28, 23), at(2026, 3, 29, 22))),
    (BERLIN_DAILY, RunPartition("2026-03-30", datetime(2026, 3, 29, 22, tzinfo=UTC)),
     (at(2026, 3, 29, 22), at(2026, 3, 30, 22))),
], ids=["hourly", "hourly-key-only", "berlin-23h-day", "berlin-24h-day"])
def test_a_cron_partition_reads_its_tick_to_the_next(timetable: Any, partition: RunPartition,
                                                     bounds: tuple[Timestamp, Timestamp]) -> None:
    assert partition_bounds("r", partition, timetable, None) == bounds


@pytest.mark.parametrize(("timetable", "key", "error"), [
    (HOURLY, "us|2026-03-10T09:00:00",
     r"^r: the run's partition key 'us\|2026-03-10T09:00:00' is not a time in the DAG's "
     r"key_format '%Y-%m-%dT%H:%M:%S'.*partition_slice="),
    (HOURLY, "2026-03-10T09:30:00", r"^r: the run's partition '2026-03-10T09:30:00' .* is not a "
     r"tick of the DAG's cron '0 \* \* \* \*'.*partition_slice="),
    (PartitionedAtRuntime(), "us", r"^r: the run's partition key 'us' does not say which slice "
     r"of Kafka to read: the DAG's timetable \(PartitionedAtRuntime\).*partition_slice="),
    (None, "2026-03-10T09:00:00", r"timetable \(NoneType\) has no partition length"),
], ids=["composite-key", "not-a-tick", "runtime-partitions", "no-timetable"])
def test_a_key_without_a_time_is_an_error_naming_it(timetable: Any, key: str,
                                                    error: str) -> None:
    with pytest.raises(ConfigurationError, match=error):
        partition_bounds("r", RunPartition(key, None), timetable, None)


def region_hour(key: str) -> tuple[Any, Any]:
    """``us|2026-03-10T09:00:00`` -> that hour."""
    start = datetime.fromisoformat(key.split("|")[1]).replace(tzinfo=UTC)
    return start, start + timedelta(hours=1)


def test_a_function_maps_keys_of_ones_own() -> None:
    partition = RunPartition("us|2026-03-10T09:00:00", None)
    assert partition_bounds("r", partition, PartitionedAtRuntime(), region_hour) == (
        at(2026, 3, 10, 9), at(2026, 3, 10, 10))
    assert partition_bounds("r", partition, HOURLY, lambda key: ("earliest", "latest")) == (
        "earliest", "latest")


@pytest.mark.parametrize(("function", "error"), [
    (region_hour, r"^r: partition_slice failed for the partition key 'us': IndexError"),
    (lambda key: "earliest", r"returned 'earliest': return a pair \(start, stop\)"),
    (lambda key: (datetime(2026, 3, 10, 9), "latest"), r"returned a start without a time zone"),
    (lambda key: ("earliest", 5), r"returned the stop 5: return an aware datetime"),
], ids=["raises", "not-a-pair", "naive", "not-a-spec"])
def test_a_bad_function_result_is_an_error_naming_the_key(function: Any, error: str) -> None:
    with pytest.raises(ConfigurationError, match=error):
        partition_bounds("r", RunPartition("us", None), HOURLY, function)


def test_partition_slice_is_a_function_or_none() -> None:
    assert check_partition_slice("r", None) is None
    assert check_partition_slice("r", region_hour) is region_hour
    with pytest.raises(ConfigurationError, match=r"^r: partition_slice='hourly' is not a "):
        check_partition_slice("r", "hourly")


def test_a_run_without_a_key_of_a_partitioned_dag_is_told_to_pass_one() -> None:
    from airflow.sdk import CronDataIntervalTimetable

    error = unkeyed_run_of_partitioned_dag("resolve", HOURLY)
    assert isinstance(error, ConfigurationError)
    assert str(error).startswith("resolve: this run of a partitioned DAG "
                                 "(CronPartitionTimetable) has no partition key")
    assert '"partition_key"' in str(error) and "Params 'start' and 'stop'" in str(error)
    assert unkeyed_run_of_partitioned_dag("resolve", CronDataIntervalTimetable(
        "0 * * * *", timezone="UTC")) == (None, None)
    assert unkeyed_run_of_partitioned_dag("resolve", None) == (None, None)
