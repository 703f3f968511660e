"""The audit's arithmetic on plain data (offsets.audit.audit_ranges, Audit.to_dict), and the
command's argument checks: no broker."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_kafka_spark import cli
from airflow_provider_kafka_spark.offsets.audit import Audit, AuditedRun, audit_ranges
from airflow_provider_kafka_spark.offsets.pins import PINS_TOPIC
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def run(run_id: str, *spans: tuple[int, int], minute: int = 0, partition: int = 0,
        lost: int | None = None, map_index: int = -1, topic: str = "orders") -> AuditedRun:
    ranges = OffsetRanges(tuple(PartitionRange(topic, partition, s, e) for s, e in spans),
                          resolved_at=T0 + timedelta(minutes=minute),
                          lost={} if lost is None else {(topic, partition): lost})
    return AuditedRun(run_id, map_index, T0 + timedelta(minutes=minute, seconds=1), ranges)


def only(runs: list[AuditedRun], log_start: int | None = 0):
    (partition,) = audit_ranges(runs, {("orders", 0): log_start})
    return partition


def test_tiling_runs_cover_one_range_without_gaps_or_overlaps() -> None:
    runs = [run(f"r{i}", (i * 10, i * 10 + 10), minute=i) for i in range(5)]
    partition = only(runs)
    assert partition.covered == ((0, 50),)
    assert (partition.first, partition.last) == (0, 50)
    assert partition.gaps == () and partition.overlaps == ()


def test_the_order_of_pinning_does_not_matter_only_offsets() -> None:
    partition = only([run("late", (10, 20), minute=0), run("early", (0, 10), minute=1)])
    assert partition.covered == ((0, 20),) and partition.gaps == ()


def test_an_overlap_names_both_runs_and_the_offsets() -> None:
    a, b = run("a", (0, 10), minute=0), run("b", (5, 15), minute=1)
    partition = only([a, b])
    assert [(o.start, o.stop, o.runs) for o in partition.overlaps] == [(5, 10, (a, b))]
    assert partition.overlaps[0].size == 5
    assert partition.covered == ((0, 15),)


def test_overlaps_of_three_runs_are_split_where_the_set_of_runs_changes() -> None:
    a, b, c = run("a", (0, 100), minute=0), run("b", (10, 20), minute=1), run("c", (15, 30),
                                                                                minute=2)
    partition = only([a, b, c])
    assert [(o.start, o.stop, [str(r) for r in o.runs]) for o in partition.overlaps] == [
        (10, 15, ["a", "b"]), (15, 20, ["a", "b", "c"]), (20, 30, ["a", "c"])]


def test_two_runs_with_the_same_range_overlap_on_all_of_it() -> None:
    partition = only([run("a", (3, 9)), run("b", (3, 9), minute=1)])
    assert [(o.start, o.stop) for o in partition.overlaps] == [(3, 9)]


def test_a_gap_nobody_recorded_is_unexplained_and_says_how_to_read_it() -> None:
    a, b = run("a", (0, 10)), run("b", (20, 30), minute=1)
    (gap,) = only([a, b], log_start=0).gaps
    assert (gap.start, gap.stop, gap.size, gap.deleted, gap.explained) == (10, 20, 10, 0, False)
    assert (gap.after_run, gap.before_run) == (a, b)
    assert gap.reason == (
        "no run read offsets [10, 20) of orders/0 and run b, which starts after them, recorded "
        "no loss; none is deleted (the log starts at 0); [10, 20) can still be read, e.g. with "
        'the explicit offsets start {"orders":{"0":10}}, stop {"orders":{"0":20}}.')


def test_a_gap_the_next_run_recorded_as_lost_is_explained() -> None:
    a, b = run("a", (0, 10)), run("b", (20, 30), minute=1, lost=10)
    (gap,) = only([a, b], log_start=20).gaps
    assert (gap.deleted, gap.explained) == (10, True)
    assert gap.reason == (
        "run b recorded 10 offset(s) of orders/0 as lost to deletion when it resolved "
        "(on_data_loss='skip'); all 10 are deleted now (below the log start offset 20).")


def test_a_recorded_loss_smaller_than_the_gap_does_not_explain_it() -> None:
    (gap,) = only([run("a", (0, 10)), run("b", (20, 30), minute=1, lost=4)], log_start=14).gaps
    assert (gap.deleted, gap.explained) == (4, False)
    assert gap.reason.startswith("no run read offsets [10, 20) of orders/0; run b, which starts "
                                 "after them, recorded 4 lost offset(s), fewer than the gap's 10")
    assert "4 of the 10 are deleted now (below the log start offset 14); [14, 20) can still" \
        in gap.reason


def test_an_empty_range_that_recorded_the_loss_explains_the_gap() -> None:
    """Everything after ``a`` was deleted when ``e`` resolved: its range is empty, its loss
    recorded; ``b`` goes on from there."""
    a, e, b = run("a", (0, 10)), run("e", (20, 20), minute=1, lost=10), run("b", (20, 30),
                                                                            minute=2)
    partition = only([a, e, b], log_start=20)
    (gap,) = partition.gaps
    assert (gap.before_run, gap.explained, gap.deleted) == (e, True, 10)
    assert partition.overlaps == ()


def test_empty_ranges_neither_cover_nor_overlap() -> None:
    partition = only([run("a", (0, 10)), run("e", (5, 5), minute=1)])
    assert partition.covered == ((0, 10),) and partition.overlaps == ()
    nothing = only([run("e", (7, 7))])
    assert (nothing.covered, nothing.first, nothing.last, nothing.gaps) == ((), None, None, ())


def test_a_partition_that_no_longer_exists_has_every_gap_offset_deleted() -> None:
    (gap,) = only([run("a", (0, 10)), run("b", (15, 30), minute=1)], log_start=None).gaps
    assert gap.deleted == 5 and gap.reason.endswith("the partition no longer exists.")


def test_map_indexes_of_a_mapped_task_tile_together_per_partition() -> None:
    runs = [run("r1", (0, 10), map_index=0), run("r1", (10, 20), map_index=1, minute=1),
            run("r1", (0, 7), map_index=0, partition=1, minute=2)]
    partitions = audit_ranges(runs, {("orders", 0): 0, ("orders", 1): 0})
    assert [(p.partition, p.covered, p.gaps, p.overlaps) for p in partitions] == [
        (0, ((0, 20),), (), ()), (1, ((0, 7),), (), ())]
    clash = only([run("r1", (0, 10), map_index=0), run("r1", (5, 12), map_index=1, minute=1)])
    assert [str(r) for r in clash.overlaps[0].runs] == ["r1[0]", "r1[1]"]


def test_audit_to_dict_has_the_documented_shape() -> None:
    a = run("a", (0, 10))
    b = run("b", (20, 30), minute=1, lost=10)
    c = run("c", (25, 40), minute=2)
    since = T0 - timedelta(days=1)
    result = Audit("d", "t", since, PINS_TOPIC, (a, b, c),
                   audit_ranges([a, b, c], {("orders", 0): 20}))
    assert not result.ok
    document = result.to_dict()
    assert document["runs"][1] == {
        "run_id": "b", "map_index": -1, "pinned_at": "2026-05-01T00:01:01+00:00",
        "resolved_at": "2026-05-01T00:01:00+00:00", "starting": "", "stopping": "",
        "offsets": 10, "lost": [{"topic": "orders", "partition": 0, "offsets": 10}], "lag": [],
        "ranges": [{"topic": "orders", "partition": 0, "start": 20, "stop": 30}]}
    del document["runs"]
    reason = result.partitions[0].gaps[0].reason
    assert document == {
        "dag_id": "d", "task_id": "t", "since": "2026-04-30T00:00:00+00:00",
        "pins_topic": "_kafka_spark_pins", "group_id": None,
        "partitions": [{
            "topic": "orders", "partition": 0, "log_start": 20, "first": 0, "last": 40,
            "covered": [[0, 10], [20, 40]],
            "gaps": [{"start": 10, "stop": 20, "after_run": "a", "before_run": "b",
                      "deleted": 10, "explained": True, "reason": reason}],
            "overlaps": [{"start": 25, "stop": 30, "runs": ["b", "c"]}],
            "committed": None}],
        "gaps": 1, "unexplained_gaps": 0, "overlaps": 1, "ok": False}


# The command's argument checks (no cluster contacted).

NOW = datetime(2026, 5, 8, 12, tzinfo=UTC)


def args(**given: object) -> argparse.Namespace:
    values: dict[str, object] = {"dag_id": "d", "task_id": "t", "since": "7d",
                                 "bootstrap_servers": "localhost:9092", "conn_id": None,
                                 "pins_topic": cli.DEFAULT_PINS_TOPIC, "timeout": "30",
                                 "as_json": False}
    return argparse.Namespace(**{**values, **given})


def test_the_command_spells_the_default_pins_topic_of_the_core() -> None:
    assert cli.DEFAULT_PINS_TOPIC == PINS_TOPIC


@pytest.mark.parametrize(("text", "since"), [
    ("7d", NOW - timedelta(days=7)),
    ("24h", NOW - timedelta(hours=24)),
    ("1w2d", NOW - timedelta(days=9)),
    ("90m", NOW - timedelta(minutes=90)),
    ("2026-05-01T00:00:00Z", datetime(2026, 5, 1, tzinfo=UTC)),
    ("2026-05-01T02:00:00+02:00", datetime(2026, 5, 1, tzinfo=UTC)),
])
def test_since_is_a_zoned_time_or_a_duration_back_from_now(text: str, since: datetime) -> None:
    assert cli.parse_since(text, now=NOW) == since


@pytest.mark.parametrize(("text", "message"), [
    ("2026-05-01", "--since '2026-05-01' has no zone; add one, e.g. --since "
                   "2026-05-01T00:00:00Z (UTC) or +02:00."),
    ("seven days", "--since 'seven days' is neither a time nor a duration; pass an ISO-8601 "
                   "time with a zone, e.g. --since 2024-05-01T00:00:00Z, or a duration back "
                   "from now, e.g. --since 7d (w, d, h, m, s)."),
    ("0d", "--since '0d' is no time at all"),
    ("1d1d", "--since '1d1d' gives a unit twice"),
    ("99999999w", "--since '99999999w' is before the year 1"),
    ("2027-01-01T00:00:00Z", "--since '2027-01-01T00:00:00Z' is in the future"),
])
def test_a_bad_since_is_refused_with_what_to_pass(text: str, message: str) -> None:
    with pytest.raises(cli.UsageError) as refused:
        cli.parse_since(text, now=NOW)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize(("given", "message"), [
    ({"bootstrap_servers": None}, "no cluster given; pass --bootstrap-servers HOST:PORT"),
    ({"conn_id": "kafka_default"}, "both --bootstrap-servers and --conn-id given"),
    ({"bootstrap_servers": "localhost"}, "--bootstrap-servers 'localhost' is not HOST:PORT"),
    ({"bootstrap_servers": "a:9092,b:70000"}, "--bootstrap-servers 'b:70000' is not HOST:PORT"),
    ({"dag_id": " "}, "--dag-id is empty"),
    ({"pins_topic": "no/slash"}, "--pins-topic 'no/slash' is not a Kafka topic name"),
    ({"timeout": "0"}, "--timeout '0' is not a number of seconds"),
    ({"timeout": "nan"}, "--timeout 'nan' is not a number of seconds"),
])
def test_bad_arguments_are_refused_before_any_cluster_call(given: dict[str, object],
                                                           message: str) -> None:
    with pytest.raises(cli.UsageError) as refused:
        cli.check_audit_arguments(args(**given), now=NOW)
    assert str(refused.value).startswith(message)


def test_good_arguments_are_checked_into_a_request() -> None:
    request = cli.check_audit_arguments(args(bootstrap_servers=" a:1,[::1]:9092 ",
                                             timeout="2.5", as_json=True), now=NOW)
    assert request == cli.AuditRequest("d", "t", NOW - timedelta(days=7), "a:1,[::1]:9092",
                                       None, PINS_TOPIC, 2.5, True)


def test_the_provider_adds_airflow_kafka_spark_audit_with_the_same_options() -> None:
    from airflow_provider_kafka_spark.get_provider_info import get_provider_info

    assert get_provider_info()["cli"] == [
        "airflow_provider_kafka_spark.cli.get_airflow_cli_commands"]
    (group,) = cli.get_airflow_cli_commands()
    (command,) = group.subcommands
    assert (group.name, command.name) == ("kafka-spark", "audit")
    assert [arg.flags for arg in command.args] == [o.flags for o in cli.AUDIT_OPTIONS]
