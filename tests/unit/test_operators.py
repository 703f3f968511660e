"""Operators, sensors and triggers without a broker: argument checks, spec precedence,
serialization, the completeness rule, provider metadata."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest

from tests.support import airflow_env  # noqa: F401  (before Airflow is imported)

# isort: split

from airflow_provider_kafka_spark.arguments import subscription_from, subscription_kwargs
from airflow_provider_kafka_spark.get_provider_info import get_provider_info
from airflow_provider_kafka_spark.offsets import (
    ConfigurationError,
    Earliest,
    Latest,
    OffsetRanges,
    OffsetSpecError,
    PartitionRange,
    Subscription,
    Timestamp,
)
from airflow_provider_kafka_spark.offsets.completeness import late_partitions
from airflow_provider_kafka_spark.operators import (
    KafkaCommitOffsetsOperator,
    KafkaResolveOffsetsOperator,
    KafkaSparkIngestOperator,
)
from airflow_provider_kafka_spark.operators.base import ranges_table
from airflow_provider_kafka_spark.operators.sink_run import ledger_since, run_info
from airflow_provider_kafka_spark.operators.spec_sources import RunSpecs
from airflow_provider_kafka_spark.sensors import (
    KafkaIntervalCompleteSensor,
    KafkaPartitionsSensor,
)
from airflow_provider_kafka_spark.sinks import FileSink, KafkaSink
from airflow_provider_kafka_spark.sinks.kafka import default_write_id
from airflow_provider_kafka_spark.sinks.tables import IcebergSink
from airflow_provider_kafka_spark.triggers import (
    KafkaIntervalCompleteTrigger,
    KafkaPartitionsTrigger,
)

T0 = pendulum.datetime(2024, 5, 1, 10, tz="UTC")
T1 = pendulum.datetime(2024, 5, 1, 11, tz="UTC")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"topics": "orders"}, Subscription.topics(["orders"])),
        ({"topics": "orders, payments"}, Subscription.topics(["orders", "payments"])),
        ({"topics": ["b", "a"]}, Subscription.topics(["a", "b"])),
        ({"topic_pattern": "orders\\..*"}, Subscription.pattern("orders\\..*")),
        ({"partitions": [["orders", 1], ("orders", 0)]},
         Subscription.partitions([("orders", 0), ("orders", 1)])),
    ],
)
def test_subscription_arguments_round_trip(kwargs: dict, expected: Subscription) -> None:
    subscription = subscription_from(**kwargs)
    assert subscription == expected
    assert subscription_from(**json.loads(json.dumps(subscription_kwargs(subscription)))) \
        == expected


@pytest.mark.parametrize("kwargs", [{}, {"topics": "a", "topic_pattern": "a.*"}])
def test_exactly_one_subscription_argument_at_parse_time(kwargs: dict) -> None:
    for build in (KafkaResolveOffsetsOperator, KafkaPartitionsSensor,
                  KafkaIntervalCompleteSensor):
        with pytest.raises(OffsetSpecError, match="exactly one of topics="):
            build(task_id="t", **kwargs)


def test_bad_options_fail_at_parse_time() -> None:
    with pytest.raises(ConfigurationError, match="^r: isolation_level='dirty'"):
        KafkaResolveOffsetsOperator(task_id="r", topics="a", isolation_level="dirty")
    with pytest.raises(ConfigurationError, match="^r: on_data_loss='ignore'"):
        KafkaResolveOffsetsOperator(task_id="r", topics="a", on_data_loss="ignore")


def test_resolve_specs_default_to_the_data_interval() -> None:
    op = KafkaResolveOffsetsOperator(task_id="r", topics="a")
    context = {"params": {}, "data_interval_start": T0, "data_interval_end": T1}
    assert op.specs(context) == RunSpecs(Timestamp.from_datetime(T0), Timestamp.from_datetime(T1),
                                         ("data_interval", "data_interval"))


def test_resolve_params_override_arguments_and_interval() -> None:
    op = KafkaResolveOffsetsOperator(task_id="r", topics="a", start="earliest",
                                     stop="timestamp:2024-05-01T11:00:00Z")
    context = {"params": {"start": None, "stop": "latest"},
               "data_interval_start": T0, "data_interval_end": T0}
    assert op.specs(context) == RunSpecs(Earliest(), Latest(), ("arguments", "params"))


def test_zero_width_interval_is_an_error() -> None:
    op = KafkaResolveOffsetsOperator(task_id="r", topics="a")
    context = {"params": {}, "data_interval_start": T0, "data_interval_end": T0}
    with pytest.raises(OffsetSpecError, match="zero-width.*Params 'start' and 'stop'"):
        op.specs(context)


def test_missing_data_interval_is_an_error() -> None:
    op = KafkaResolveOffsetsOperator(task_id="r", topics="a")
    with pytest.raises(OffsetSpecError, match="no data interval.*Param 'start'"):
        op.specs({"params": {}, "data_interval_start": None, "data_interval_end": None})


def test_a_bad_spec_names_the_argument() -> None:
    with pytest.raises(OffsetSpecError, match="^r: start: unknown offset spec 'yesterday'"):
        KafkaResolveOffsetsOperator(task_id="r", topics="a", start="yesterday")
    op = KafkaResolveOffsetsOperator(task_id="r", topics="a")
    with pytest.raises(OffsetSpecError, match="^r: stop: unknown offset spec 'tomorrow'"):
        op.specs({"params": {"stop": "tomorrow"}, "data_interval_start": T0,
                  "data_interval_end": T1})


def test_commit_needs_a_group_and_valid_ranges() -> None:
    ranges = OffsetRanges((PartitionRange("a", 0, 0, 5),)).to_dict()
    with pytest.raises(ConfigurationError, match="^c: no consumer group to commit to"):
        KafkaCommitOffsetsOperator(task_id="c", ranges=ranges).execute({})
    with pytest.raises(OffsetSpecError, match="version"):
        KafkaCommitOffsetsOperator(task_id="c", ranges={"ranges": []}, group_id="g").execute({})


def test_ingest_needs_exactly_one_sink_and_one_transformation() -> None:
    # one sink= argument: no sink, or two sinks, is not a Sink
    with pytest.raises(TypeError, match="missing keyword argument 'sink'"):
        KafkaSparkIngestOperator(task_id="i", ranges={})
    with pytest.raises(ConfigurationError, match=r"^i: sink=None is not valid; pass a sink: "
                                                 r"FileSink\(path\)"):
        KafkaSparkIngestOperator(task_id="i", ranges={}, sink=None)
    with pytest.raises(ConfigurationError, match=r"^i: sink=\[FileSink\('/x'.*KafkaSink\('t'.*\] "
                                                 "is not valid; pass a sink"):
        KafkaSparkIngestOperator(task_id="i", ranges={}, sink=[FileSink("/x"), KafkaSink("t")])
    with pytest.raises(ConfigurationError, match=r"^i: sink=\(KafkaSink\('t'.*IcebergSink\("
                                                 r"'a.b.c'.*\) is not valid; pass a sink"):
        KafkaSparkIngestOperator(task_id="i", ranges={},
                                 sink=(KafkaSink("t"), IcebergSink("a.b.c")))
    with pytest.raises(ConfigurationError, match="^i: sink='/x' is not valid; pass a sink"):
        KafkaSparkIngestOperator(task_id="i", ranges={}, sink="/x")
    with pytest.raises(ConfigurationError, match="not both"):
        KafkaSparkIngestOperator(task_id="i", ranges={}, sink=FileSink("/x"), sql="SELECT 1",
                                 transform=lambda df: df)


def test_ingest_rejects_bad_ranges_and_empty_paths_before_spark() -> None:
    with pytest.raises(OffsetSpecError, match="^i: ranges=.*version"):
        KafkaSparkIngestOperator(task_id="i", ranges='{"ranges": []}', sink=FileSink("/x"))
    empty = OffsetRanges((PartitionRange("a", 0, 7, 7),)).to_dict()
    op = KafkaSparkIngestOperator(task_id="i", ranges=empty, sink=FileSink("{{ params.path }}"))
    op.sink.path = " "  # as rendered
    with pytest.raises(ConfigurationError, match="^i: FileSink: path=' ' is not valid; pass "
                                                 "the folder of the output"):
        op.execute({"run_id": "r"})
    stats = KafkaSparkIngestOperator(task_id="i", ranges=empty, sink=FileSink("/x/y")) \
        .execute({"run_id": "r"})
    assert stats["records"] == 0 and stats["partitions"][0]["start"] == 7
    assert stats["output"] == {"path": "/x/y", "format": "parquet",
                               "manifest": "/x/y/_kafka_spark_manifest.json"}


def test_a_run_with_empty_ranges_announces_no_output() -> None:
    """Empty ranges write nothing, so no asset event: the empty hours of a backfill announced
    the table, and two of them at once made Airflow create the asset twice (UniqueViolation on
    idx_asset_name_uri_unique), which it answers by failing the task (seen in the tables
    tier's backfill on PostgreSQL)."""
    from airflow.sdk import DAG

    class Events(dict):
        def __missing__(self, key: Any) -> list[Any]:
            self[key] = added = _Added()
            return added

    class _Added(list):
        def add(self, asset: Any, extra: Any = None) -> None:
            self.append((asset, extra))

    empty = OffsetRanges((PartitionRange("a", 0, 7, 7),)).to_dict()
    with DAG("d", schedule=None):
        op = KafkaSparkIngestOperator(task_id="i", ranges=empty, sink=FileSink("/x/y"))
    events = Events()
    stats = op.execute({"run_id": "r", "outlet_events": events})
    assert stats["records"] == 0
    assert dict(events) == {}


def test_default_write_id_is_stable_for_the_run_and_its_ranges() -> None:
    ranges = OffsetRanges((PartitionRange("a", 0, 0, 5),))
    again = OffsetRanges.from_json(ranges.to_json())
    other = OffsetRanges((PartitionRange("a", 0, 0, 6),))
    assert default_write_id("d", "t", "r1", ranges) == default_write_id("d", "t", "r1", again)
    assert default_write_id("d", "t", "r1", ranges).startswith("d/t/r1/")
    assert default_write_id("d", "t", "r1", ranges) != default_write_id("d", "t", "r1", other)


def test_a_table_run_is_rewritten_when_cleared_or_created_again_and_not_when_retried() -> None:
    """The generation in a table write id stays for the tries of one dag run and changes when
    Airflow clears the run (clear number + 1, new start) or deletes it and creates it again
    under the same run id (clear number 0 again, new start): so a retry finds its write, and
    a reprocessing replaces it (the table tier proves both against tables)."""
    ranges = OffsetRanges((PartitionRange("a", 0, 0, 5),))
    op = KafkaSparkIngestOperator(task_id="i", ranges=ranges.to_dict(),
                                  sink=IcebergSink("lake.db.t"))
    started = pendulum.datetime(2026, 11, 25, 21, 57, 13, 123456)

    def generation(clear_number: int, start_date: Any, try_number: int = 1) -> Any:
        context = {"run_id": "r", "dag_run": SimpleNamespace(clear_number=clear_number,
                                                             start_date=start_date),
                   "ti": SimpleNamespace(map_index=-1, try_number=try_number)}
        return op.sink.for_run(run_info(op, context, ranges)).generation

    first = generation(0, started)
    assert generation(0, started, try_number=2) == first  # a retry
    cleared = generation(1, started.add(hours=1))
    created_again = generation(0, started.add(hours=2))
    assert len({first, cleared, created_again}) == 3
    assert first == "0-20261125T215713123456Z"
    assert generation(0, None) == 0  # no start known (nothing to tell instances apart by)
    for bad in (-1, "", "1 2", 1.0, True):
        with pytest.raises(ConfigurationError, match="generation=.*whole number >= 0"):
            IcebergSink("lake.db.t", application="a", run="r", generation=bad)


def test_triggers_serialize_by_module_and_qualname() -> None:
    triggers = [
        KafkaPartitionsTrigger(topic_pattern="a.*", min_partitions=4, poll_interval=2),
        KafkaIntervalCompleteTrigger(kafka_conn_id="other", partitions=[["a", 1]],
                                     end_ms=1_714_557_600_000, idle_timeout=300),
    ]
    for trigger in triggers:
        classpath, kwargs = trigger.serialize()
        module, _, name = classpath.rpartition(".")
        assert getattr(importlib.import_module(module), name) is type(trigger)
        kwargs = json.loads(json.dumps(kwargs))
        assert type(trigger)(**kwargs).serialize() == (classpath, kwargs)
    assert triggers[1].serialize()[1] == {
        "kafka_conn_id": "other", "partitions": [["a", 1]], "poll_interval": 30.0,
        "end_ms": 1_714_557_600_000, "idle_timeout": 300.0,
    }


def test_sensor_end_and_idle_timeout() -> None:
    sensor = KafkaIntervalCompleteSensor(task_id="s", topics="a",
                                         idle_timeout=timedelta(minutes=5))
    assert sensor.idle_timeout == 300.0
    millis = Timestamp.from_datetime(T1).millis
    assert sensor.end_ms({"data_interval_end": T1}) == millis
    for end in (T1, "2024-05-01 11:00:00+00:00", "timestamp:2024-05-01T11:00:00Z"):
        sensor.end = end
        assert sensor.end_ms({}) == millis
    sensor.end = None
    with pytest.raises(ConfigurationError, match="^s: end=None and the run has no data interval"):
        sensor.end_ms({"data_interval_end": None})


def test_late_partitions() -> None:
    end, now = 90_000, 100_000
    newest = {("a", 0): 90_000, ("a", 1): 89_999, ("a", 2): -1, ("a", 3): None,
              ("a", 4): 50_000}
    late, idle = late_partitions(newest, end, idle_timeout=None, now_ms=now)
    assert sorted(late) == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert "has no record" in late[("a", 2)] and "did not answer" in late[("a", 3)]
    assert idle == []
    # 30 s idle: newest records before 70_000, and empty partitions, count as idle.
    late, idle = late_partitions(newest, end, idle_timeout=30, now_ms=now)
    assert sorted(late) == [("a", 1), ("a", 3)]
    assert idle == [("a", 2), ("a", 4)]


def test_ranges_table() -> None:
    ranges = OffsetRanges((PartitionRange("orders", 0, 5, 15), PartitionRange("orders", 1, 0, 0)),
                          lag={("orders", 0): 7, ("orders", 1): 0})
    assert ranges_table(ranges).splitlines() == [
        "topic   partition  start  stop  offsets  lag",
        "orders          0      5    15       10    7",
        "orders          1      0     0        0    0",
        "total: 10 offset(s), lag 7",
    ]
    unrecorded = OffsetRanges((PartitionRange("orders", 0, 5, 15),))  # pinned before lag existed
    assert ranges_table(unrecorded).splitlines()[1:] == [
        "orders          0      5    15       10", "total: 10 offset(s), lag 0"]


def test_provider_info_lists_importable_modules() -> None:
    info = get_provider_info()
    modules = [m for kind in ("hooks", "operators", "sensors", "triggers")
               for entry in info[kind] for m in entry["python-modules"]]
    assert len(modules) == 9
    for module in modules:
        importlib.import_module(module)
    assert "connection-types" not in info


def test_importing_the_airflow_layer_does_not_import_spark() -> None:
    code = ("import sys, airflow_provider_kafka_spark.operators, airflow_provider_kafka_spark.sensors,"
            " airflow_provider_kafka_spark.hooks, airflow_provider_kafka_spark.triggers;"
            " print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_kafka_sinks_ledger_is_read_from_the_earlier_of_the_first_resolution_and_run_after(
) -> None:
    resolved = pendulum.datetime(2026, 5, 1, 10, tz="UTC")
    ranges = OffsetRanges((PartitionRange("a", 0, 0, 5),), resolved_at=resolved)
    earlier, later = resolved - timedelta(hours=1), resolved + timedelta(hours=1)
    assert ledger_since({"dag_run": SimpleNamespace(run_after=earlier)}, ranges) == earlier
    assert ledger_since({"dag_run": SimpleNamespace(run_after=later)}, ranges) == resolved
    assert ledger_since({}, ranges) == resolved  # no run: the ranges' first resolution


def test_a_partition_reprocessed_as_a_new_run_is_the_same_run_to_the_sinks() -> None:
    """Airflow 3.3 reprocesses a partition (``airflow backfill create --reprocess-behavior
    completed``) as a new run with a new run id beside the old one. The sinks must see the
    same run: the Kafka sink's default write id is the same (its ledger skips what the first
    run wrote), a table sink's run is the same with another generation (its commit replaces
    the first run's rows), and the Kafka ledger is read from the partition's start."""
    ranges = OffsetRanges((PartitionRange("a", 0, 0, 5),),
                          resolved_at=pendulum.datetime(2026, 11, 27, 13, tz="UTC"))
    hour = pendulum.datetime(2026, 11, 25, 8, tz="UTC")

    def info(op: KafkaSparkIngestOperator, run_id: str, started: Any) -> Any:
        context = {"run_id": run_id, "partition_key": "2026-11-25T08:00:00",
                   "partition_date": hour,
                   "dag_run": SimpleNamespace(clear_number=0, start_date=started,
                                              run_after=started),
                   "ti": SimpleNamespace(map_index=-1, try_number=1)}
        return op.sink.for_run(run_info(op, context, ranges))

    kafka = KafkaSparkIngestOperator(task_id="i", ranges=ranges.to_dict(),
                                     sink=KafkaSink("out", kafka_config={"bootstrap.servers": "b"}))
    first = info(kafka, "backfill__2026-11-25T08:00:00+00:00__x1", hour.add(days=2))
    again = info(kafka, "backfill__2026-11-25T08:00:00+00:00__x2", hour.add(days=2, hours=1))
    assert first.write_id == again.write_id == default_write_id(
        kafka.dag_id, "i", "partition=2026-11-25T08:00:00", ranges)
    assert again.ledger_since == hour

    table = KafkaSparkIngestOperator(task_id="i", ranges=ranges.to_dict(),
                                     sink=IcebergSink("lake.db.t"))
    first = info(table, "backfill__2026-11-25T08:00:00+00:00__x1", hour.add(days=2))
    again = info(table, "backfill__2026-11-25T08:00:00+00:00__x2", hour.add(days=2, hours=1))
    assert first.run == again.run == "partition=2026-11-25T08:00:00"
    assert first.generation != again.generation
