"""The Kafka interval asset without a broker: bad arguments are errors when the DAG is parsed
(naming the argument, the value and what to pass), the interval grid, the asset's URI and name,
the trigger's serialization, the announcement payload, and how the resolve task's specs take
an announced interval."""

from __future__ import annotations

import importlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow.sdk import Asset

from airflow_provider_kafka_spark.assets import kafka_interval_asset
from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    Earliest,
    OffsetSpecError,
    Timestamp,
)
from airflow_provider_kafka_spark.offsets.intervals import Announcement, Interval
from airflow_provider_kafka_spark.operators import KafkaResolveOffsetsOperator
from airflow_provider_kafka_spark.operators.spec_sources import RunSpecs
from airflow_provider_kafka_spark.triggers import KafkaIntervalEventTrigger
from airflow_provider_kafka_spark.triggers.intervals import IntervalGrid

HOUR_MS = 3_600_000
T0 = datetime(2024, 5, 1, 10, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)


def asset(**kwargs: Any) -> Asset:
    return kafka_interval_asset(kwargs.pop("topics", "orders"), **{
        "server": "broker1:9092", "every": timedelta(hours=1), **kwargs})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"every": timedelta(0)}, "every=datetime.timedelta(0) is not a positive, finite duration; "
                              "pass a positive number of seconds or a timedelta"),
    ({"every": 0}, "every=0 is not a positive, finite duration"),
    ({"every": -60}, "every=-60 is not a positive, finite duration"),
    ({"every": True}, "every=True is a bool, not a number"),
    ({"every": 0.5}, "every=0.5 is not valid; pass at least one second, in whole milliseconds"),
    ({"every": "every hour"}, "every='every hour' is not a cron expression; pass a cron "
                              "expression (five fields, e.g. '0 * * * *' for hourly)"),
    ({"every": "0 0 30 2 *"}, "every='0 0 30 2 *' never fires"),
    ({"every": "0 0 * * *", "timezone": "Mars/Base"},
     "timezone='Mars/Base' is not valid; pass an IANA time zone name"),
    ({"timezone": "Europe/Paris"}, "timezone='Europe/Paris' does not apply to every=timedelta; "
                                   "a timedelta grid counts from the Unix epoch in UTC"),
    ({"start": "yesterday"}, "start='yesterday' is not valid; pass an aware datetime or an "
                             "ISO-8601 time with zone"),
    ({"start": datetime(2024, 5, 1)}, "has no time zone, so it is ambiguous"),
    ({"idle_timeout": 0}, "idle_timeout=0 is not a positive, finite duration"),
    ({"server": "kafka://broker1:9092"}, "server='kafka://broker1:9092' is not valid; pass "
                                         "host:port of one broker"),
    ({"server": " "}, "server=' ' is empty"),
    ({"poll_interval": 0}, "poll_interval=0 is not a positive, finite duration"),
    ({"kafka_conn_id": ""}, "kafka_conn_id='' is empty"),
    ({"state_topic": "no spaces"}, "state_topic='no spaces' is not a legal topic name"),
    ({"name": ""}, "name='' is empty"),
])
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        asset(**kwargs)
    assert message in str(caught.value)
    assert str(caught.value).startswith(("kafka_interval_asset: ", "KafkaIntervalEventTrigger: "))


@pytest.mark.parametrize("topics", ["", "a b", ["ok", ""]])
def test_bad_topics_fail_when_the_dag_is_parsed(topics: Any) -> None:
    with pytest.raises(OffsetSpecError, match="^kafka_interval_asset: topics"):
        asset(topics=topics)


def test_the_trigger_checks_its_own_arguments_too() -> None:
    with pytest.raises(ConfigurationError, match="^KafkaIntervalEventTrigger: every=0 "):
        KafkaIntervalEventTrigger(watcher="w", every=0, topics="a")
    with pytest.raises(ConfigurationError, match="^KafkaIntervalEventTrigger: watcher='' is empty"):
        KafkaIntervalEventTrigger(watcher="", every=60, topics="a")
    with pytest.raises(OffsetSpecError, match="^KafkaIntervalEventTrigger: pass exactly one of"):
        KafkaIntervalEventTrigger(watcher="w", every=60)


def test_the_asset_is_named_by_its_topics_and_grid_and_watched_by_the_trigger() -> None:
    hourly = asset(idle_timeout=timedelta(minutes=10), poll_interval=60)
    assert hourly.uri == "kafka://broker1:9092/orders?interval=PT1H"
    assert hourly.name == hourly.uri
    (watch,) = hourly.watchers
    trigger = watch.trigger
    assert isinstance(trigger, KafkaIntervalEventTrigger)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_kafka_spark.triggers.intervals.KafkaIntervalEventTrigger"
    assert kwargs == {
        "kafka_conn_id": "kafka_default", "topics": ["orders"], "poll_interval": 60.0,
        "watcher": hourly.name, "every": 3600.0, "timezone": "UTC", "start": None,
        "idle_timeout": 600.0, "state_topic": "_kafka_spark_watchers"}
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)

    daily = asset(topics=["orders", "refunds"], every="0 0 * * *", timezone="Europe/Paris",
                  name="orders daily", start="2024-05-01T00:00:00+02:00")
    assert daily.uri == "kafka://broker1:9092/orders,refunds?interval=0+0+%2A+%2A+%2A&tz=Europe%2FParis"
    assert daily.name == "orders daily"
    kwargs = daily.watchers[0].trigger.serialize()[1]
    assert (kwargs["watcher"], kwargs["every"], kwargs["start"]) == (
        "orders daily", "0 0 * * *", "2024-04-30T22:00:00.000Z")
    assert asset(every=90).uri.endswith("?interval=PT1M30S")
    assert asset(every=timedelta(days=1, seconds=1.5)).uri.endswith("?interval=P1DT1.5S")


def test_the_grid_counts_from_the_epoch_or_follows_the_cron_expression_in_its_zone() -> None:
    hourly = IntervalGrid(every_ms=HOUR_MS)
    assert hourly.floor(T0_MS) == T0_MS and hourly.floor(T0_MS + 1) == T0_MS
    assert hourly.next_after(T0_MS) == T0_MS + HOUR_MS
    assert hourly.next_after(T0_MS - 1) == T0_MS
    seventeen = IntervalGrid(every_ms=17_000)
    assert seventeen.floor(T0_MS) % 17_000 == 0
    assert seventeen.next_after(seventeen.floor(T0_MS)) - seventeen.floor(T0_MS) == 17_000

    # Local midnights in Paris across the switch to summer time (2024-03-31): 23 h that day.
    paris = IntervalGrid(cron="0 0 * * *", timezone="Europe/Paris")
    night = int(datetime(2024, 3, 30, 23, tzinfo=UTC).timestamp() * 1000)  # 00:00 +01:00
    assert paris.floor(night) == night and paris.floor(night + 1) == night
    assert paris.next_after(night) - night == 23 * HOUR_MS
    assert paris.floor(night - 1) == night - 24 * HOUR_MS


def test_an_announcement_round_trips_and_other_payloads_are_not_one() -> None:
    interval = Interval(T0_MS, T0_MS + HOUR_MS)
    announced = Announcement("w", "topics:orders", interval, idle=(("orders", 2),))
    payload = json.loads(json.dumps(announced.to_payload()))
    assert payload == {"kafka_spark_interval": 1, "watcher": "w", "subscription": "topics:orders",
                       "status": "complete", "start": "2024-05-01T10:00:00.000Z",
                       "end": "2024-05-01T11:00:00.000Z", "start_ms": T0_MS,
                       "end_ms": T0_MS + HOUR_MS, "partition_key": "2024-05-01T10:00:00",
                       "idle": [["orders", 2]]}
    assert Announcement.from_payload(payload) == announced
    error = Announcement("w", "topics:orders", error="unknown topic")
    assert Announcement.from_payload(error.to_payload()) == error
    for other in (None, "x", {"topic": "orders"}, {"from_trigger": True}):
        assert Announcement.from_payload(other) is None
    with pytest.raises(ConfigurationError, match="an interval announcement cannot be read"):
        Announcement.from_payload({**payload, "kafka_spark_interval": 9})
    with pytest.raises(ConfigurationError, match="start_ms=5 is not before end_ms=5"):
        Interval(5, 5)
    assert interval.label == "20240501T100000Z"
    assert Interval(T0_MS + 250, T0_MS + 1000).label == "20240501T100000.250Z"


def test_announced_intervals_give_the_specs_params_and_arguments_left_open() -> None:
    op = KafkaResolveOffsetsOperator(task_id="r", topics="orders")
    hours = [Interval(T0_MS, T0_MS + HOUR_MS), Interval(T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS)]
    context = {"params": {}, "data_interval_start": None, "data_interval_end": None}
    both = ("announced", "announced")
    assert op.specs(context, hours[:1]) == RunSpecs(Timestamp(T0_MS), Timestamp(T0_MS + HOUR_MS),
                                                    both)
    assert op.specs(context, hours) == RunSpecs(Timestamp(T0_MS), Timestamp(T0_MS + 2 * HOUR_MS),
                                                both)
    assert op.specs({**context, "params": {"start": "earliest"}}, hours) == RunSpecs(
        Earliest(), Timestamp(T0_MS + 2 * HOUR_MS), ("params", "announced"))
    with pytest.raises(OffsetSpecError, match="no data interval"):
        op.specs(context)
