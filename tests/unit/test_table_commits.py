"""What a table sink records per commit, and how an application's stops are read back from
the newest commits only (plain Python: no Spark, no table)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange, parse_offset_spec
from airflow_provider_kafka_spark.offsets.specs import FromTable
from airflow_provider_kafka_spark.sinks.tables.commits import (
    CommitRecord,
    application_offsets,
    merged,
    run_prefix,
    write_id,
)

RANGES = OffsetRanges((PartitionRange("orders", 0, 10, 20), PartitionRange("orders", 1, 5, 7)))


def test_the_table_spec_parses_and_prints_back() -> None:
    assert parse_offset_spec("table") == FromTable()
    assert parse_offset_spec(" TABLE:earliest ") == FromTable("earliest")
    for text in ("table", "table:earliest", "table:latest"):
        assert str(parse_offset_spec(text)) == text


def test_write_ids_are_stable_per_write_and_never_share_another_runs_prefix() -> None:
    first = write_id("dag.ingest", "scheduled__2024-05-01T00:00:00+00:00", 0, RANGES)
    assert first == write_id("dag.ingest", "scheduled__2024-05-01T00:00:00+00:00", 0, RANGES)
    assert first.startswith(run_prefix("dag.ingest", "scheduled__2024-05-01T00:00:00+00:00"))
    assert write_id("dag.ingest", "scheduled__2024-05-01T00:00:00+00:00", 1, RANGES) != first
    other = OffsetRanges((PartitionRange("orders", 0, 10, 21),))
    assert write_id("dag.ingest", "scheduled__2024-05-01T00:00:00+00:00", 0, other) != first
    # A run whose id contains '/' cannot look like a prefix of another run's writes.
    assert not write_id("a", "r/b", 0, RANGES).startswith(run_prefix("a", "r"))
    assert "'" not in write_id("a'b", "it's", 0, RANGES)  # safe inside SQL quotes


def record(application: str, wid: str, offsets: Mapping[tuple[str, int], int],
           base: str | None) -> dict[str, str]:
    return CommitRecord(application, "run", wid, (("orders", 0, 0, 1),), offsets, base,
                        {"dag-id": "dag"}).to_properties()


def test_a_record_reads_back_as_written_and_foreign_commits_are_not_records() -> None:
    properties = record("app", "w1", {("orders", 0): 20, ("orders", 1): 7}, "42")
    back = CommitRecord.from_properties({**properties, "added-records": "3"})
    assert back == CommitRecord("app", "run", "w1", (("orders", 0, 0, 1),),
                                {("orders", 0): 20, ("orders", 1): 7}, "42", {"dag-id": "dag"})
    assert CommitRecord.from_properties({"added-records": "3"}) is None
    assert CommitRecord.from_properties(None) is None
    assert CommitRecord.from_properties({**properties, "kafka-spark.offsets": "{bad"}) is None


def test_merged_keeps_the_highest_stop() -> None:
    assert merged({("orders", 0): 25, ("orders", 9): 3}, RANGES) == {
        ("orders", 0): 25, ("orders", 1): 7, ("orders", 9): 3}


def lazy(commits: list[tuple[str, dict[str, str] | None]], read: list[str]
         ) -> Iterator[tuple[str, dict[str, str] | None]]:
    for commit_id, properties in commits:
        read.append(commit_id)
        yield commit_id, properties


def test_sequential_commits_are_read_back_to_the_newest_ones_base_only() -> None:
    history = [  # newest first; each commit saw the previous one of the application
        ("5", record("app", "w5", {("orders", 0): 50, ("orders", 1): 9}, "3")),
        ("4", {"operation": "compaction"}),
        ("3", record("app", "w3", {("orders", 0): 30, ("orders", 1): 9}, "1")),
        ("2", record("other", "x", {("orders", 0): 999}, None)),
        ("1", record("app", "w1", {("orders", 0): 10}, None)),
    ]
    read: list[str] = []
    state = application_offsets(lazy(history, read), "app")
    assert state.offsets == {("orders", 0): 50, ("orders", 1): 9}
    assert state.newest == "5" and state.head == "5"
    assert read == ["5", "4", "3"]  # stops at the base of the newest commit


def test_the_head_is_the_tables_newest_commit_whoever_made_it() -> None:
    history = [("7", {"operation": "compaction"}),
               ("6", record("app", "w6", {("orders", 0): 60}, None))]
    state = application_offsets(iter(history), "app")
    assert (state.head, state.newest) == ("7", "6")
    assert application_offsets(iter([]), "app").head is None


def test_concurrent_commits_that_saw_the_same_base_are_both_counted() -> None:
    # Two runs (hours 3 and 5) committed concurrently: each saw commit "1" only.
    history = [
        ("3", record("app", "hour3", {("orders", 0): 30, ("orders", 1): 4}, "1")),
        ("2", record("app", "hour5", {("orders", 0): 50, ("orders", 1): 2}, "1")),
        ("1", record("app", "w1", {("orders", 0): 10, ("orders", 1): 1}, None)),
        ("0", record("app", "w0", {("orders", 0): 5}, None)),
    ]
    read: list[str] = []
    state = application_offsets(lazy(history, read), "app")
    assert state.offsets == {("orders", 0): 50, ("orders", 1): 4}
    assert read == ["3", "2", "1"]


def test_an_application_that_never_committed_reads_everything_and_finds_nothing() -> None:
    history = [("2", record("other", "x", {("orders", 0): 9}, "1")), ("1", None)]
    state = application_offsets(iter(history), "app")
    assert state.offsets == {} and state.newest is None and state.commits_read == 2
    assert state.head == "2"


@pytest.mark.parametrize("name", ["", None, 3])
def test_an_application_name_must_be_given(name: Any) -> None:
    from airflow_provider_kafka_spark.offsets import ConfigurationError

    with pytest.raises(ConfigurationError, match="application=.* is not valid"):
        application_offsets(iter([]), name)
