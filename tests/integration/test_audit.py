"""The audit of what a task read, against a real broker: real records, real pins (pin_ranges),
one random DAG id per test; and the command ``python -m airflow_provider_kafka_spark audit``
run as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from airflow_provider_kafka_spark.offsets import (
    OffsetRanges,
    PartitionRange,
    SpecificOffsets,
    Subscription,
    audit,
    commit_offsets,
    resolve_offsets,
)
from airflow_provider_kafka_spark.offsets.pins import RunKey, pin_ranges
from tools.kafka_records import produce

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TASK = "resolve"
REQUEST = {"subscription": "topics:audited", "start": "offsets", "stop": "offsets"}


@pytest.fixture
def dag_id() -> str:
    return f"audit-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def since() -> datetime:
    """Before every pin of the test (the pins carry the broker host's clock, as this one)."""
    return datetime.now(UTC) - timedelta(minutes=1)


def fill(kafka_config: dict[str, Any], topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records into partition ``p`` (offsets 0 .. counts[p] - 1)."""
    now = int(datetime.now(UTC).timestamp() * 1000)
    produce(kafka_config, topic, [(p, None, f"{p}-{i}".encode(), now)
                                  for p, n in counts.items() for i in range(n)])


def pin(kafka_config: dict[str, Any], dag_id: str, run_id: str, topic: str,
        spans: dict[int, tuple[int, int]], **metadata: Any) -> None:
    ranges = OffsetRanges(tuple(PartitionRange(topic, p, s, e) for p, (s, e) in spans.items()),
                          **metadata)
    pin_ranges(kafka_config, RunKey(dag_id, TASK, run_id), ranges, REQUEST)


def test_24_runs_that_tile_have_no_gap_and_no_overlap(kafka_config, new_topic, dag_id,
                                                      since) -> None:
    topic = new_topic(partitions=2)
    sizes = {0: [(i * 7) % 5 for i in range(24)], 1: [3] * 24}  # partition 0 has empty runs
    fill(kafka_config, topic, {p: sum(n) for p, n in sizes.items()})
    runs = {f"scheduled__2026-05-01T{i:02d}:00:00+00:00":
            {p: (sum(sizes[p][:i]), sum(sizes[p][:i + 1])) for p in (0, 1)} for i in range(24)}
    # Pinned 8 at a time (a pin waits most of its ~0.6 s on new clients): in no particular
    # order, which the audit does not care about.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: pin(kafka_config, dag_id, item[0], topic, item[1]),
                      runs.items()))

    result = audit(kafka_config, dag_id, TASK, since=since)
    assert sorted(run.run_id for run in result.runs) == sorted(runs)
    assert [run.pinned_at for run in result.runs] == sorted(run.pinned_at for run in result.runs)
    assert [(p.topic, p.partition, p.log_start, p.covered) for p in result.partitions] == [
        (topic, 0, 0, ((0, sum(sizes[0])),)), (topic, 1, 0, ((0, 72),))]
    assert (result.gaps, result.overlaps, result.ok) == ((), (), True)
    document = result.to_dict()
    assert (document["gaps"], document["unexplained_gaps"], document["overlaps"],
            document["ok"]) == (0, 0, 0, True)


def test_a_run_re_pinned_with_an_earlier_start_overlaps_the_run_before(
        kafka_config, new_topic, dag_id, since) -> None:
    topic = new_topic(partitions=1)
    fill(kafka_config, topic, {0: 30})
    for i in range(3):
        pin(kafka_config, dag_id, f"r{i}", topic, {0: (i * 10, i * 10 + 10)})
    pin(kafka_config, dag_id, "r2", topic, {0: (15, 30)})  # re-resolved: the newest pin counts

    result = audit(kafka_config, dag_id, TASK, since=since)
    assert [run.run_id for run in result.runs] == ["r0", "r1", "r2"]
    assert result.gaps == ()
    (overlap,) = result.overlaps
    assert (overlap.topic, overlap.partition, overlap.start, overlap.stop) == (topic, 0, 15, 20)
    assert [run.run_id for run in overlap.runs] == ["r1", "r2"]
    assert not result.ok
    assert result.to_dict()["partitions"][0]["overlaps"] == [
        {"start": 15, "stop": 20, "runs": ["r1", "r2"]}]


def test_a_run_that_skipped_10_offsets_leaves_an_unexplained_gap(kafka_config, new_topic,
                                                                 dag_id, since) -> None:
    topic = new_topic(partitions=1)
    fill(kafka_config, topic, {0: 40})
    pin(kafka_config, dag_id, "r0", topic, {0: (0, 10)})
    pin(kafka_config, dag_id, "r1", topic, {0: (10, 20)})
    pin(kafka_config, dag_id, "r2", topic, {0: (30, 40)})  # explicit offsets: 20..29 skipped

    result = audit(kafka_config, dag_id, TASK, since=since)
    (gap,) = result.gaps
    assert (gap.topic, gap.partition, gap.start, gap.stop, gap.deleted, gap.explained) == (
        topic, 0, 20, 30, 0, False)
    assert (gap.after_run.run_id, gap.before_run.run_id) == ("r1", "r2")
    assert result.overlaps == () and not result.ok
    assert f'start {{"{topic}":{{"0":20}}}}, stop {{"{topic}":{{"0":30}}}}' in gap.reason


def test_a_gap_of_deleted_records_that_the_next_run_recorded_is_explained(
        kafka_config, kafka_admin, new_topic, dag_id, since) -> None:
    topic = new_topic(partitions=1)
    fill(kafka_config, topic, {0: 40})
    pin(kafka_config, dag_id, "r0", topic, {0: (0, 10)})
    for future in kafka_admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        future.result(timeout=30)
    # The next run starts where r0 stopped; 10..19 are gone: it skips them and records it.
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]),
                             SpecificOffsets({(topic, 0): 10}), "latest", on_data_loss="skip")
    assert (list(ranges), dict(ranges.lost)) == ([PartitionRange(topic, 0, 20, 40)],
                                                 {(topic, 0): 10})
    pin_ranges(kafka_config, RunKey(dag_id, TASK, "r1"), ranges, REQUEST)

    result = audit(kafka_config, dag_id, TASK, since=since)
    (partition,) = result.partitions
    assert (partition.log_start, partition.covered) == (20, ((0, 10), (20, 40)))
    (gap,) = partition.gaps
    assert (gap.start, gap.stop, gap.deleted, gap.explained) == (10, 20, 10, True)
    assert (gap.after_run.run_id, gap.before_run.run_id) == ("r0", "r1")
    assert result.ok
    assert result.to_dict()["partitions"][0]["gaps"] == [{
        "start": 10, "stop": 20, "after_run": "r0", "before_run": "r1", "deleted": 10,
        "explained": True,
        "reason": f"run r1 recorded 10 offset(s) of {topic}/0 as lost to deletion when it "
                  "resolved (on_data_loss='skip'); all 10 are deleted now (below the log start "
                  "offset 20)."}]


def test_runs_of_other_tasks_and_pins_before_since_are_not_audited(kafka_config, new_topic,
                                                                   dag_id, since) -> None:
    topic = new_topic(partitions=1)
    fill(kafka_config, topic, {0: 20})
    pin(kafka_config, dag_id, "r0", topic, {0: (0, 10)})
    pin_ranges(kafka_config, RunKey(dag_id, "other", "r0"),
               OffsetRanges((PartitionRange(topic, 0, 5, 15),)), REQUEST)
    assert audit(kafka_config, dag_id, TASK, since=since).ok
    later = audit(kafka_config, dag_id, TASK, since=datetime.now(UTC) + timedelta(seconds=1))
    assert (later.runs, later.partitions, later.ok) == ((), (), True)


# The command, as a process.


def command(*args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_kafka_spark", "audit", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env, check=False)


def test_the_command_exits_0_on_a_clean_audit_and_1_on_a_gap_with_the_json(
        kafka_config, new_topic, dag_id, since) -> None:
    topic = new_topic(partitions=1)
    fill(kafka_config, topic, {0: 30})
    pin(kafka_config, dag_id, "r0", topic, {0: (0, 10)})
    pin(kafka_config, dag_id, "r1", topic, {0: (10, 20)})
    cluster = ["--bootstrap-servers", kafka_config["bootstrap.servers"]]
    where = ["--dag-id", dag_id, "--task-id", TASK, "--since", since.isoformat()]

    clean = command(*where, *cluster)
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.splitlines()[-1] == "OK: 0 gap(s), 0 unexplained, 0 overlap(s)."
    assert f"  {topic}/0: read [0, 20) (log start 0)" in clean.stdout

    pin(kafka_config, dag_id, "r2", topic, {0: (25, 30)})
    gap = command(*where, *cluster, "--json")
    assert gap.returncode == 1, gap.stderr
    document = json.loads(gap.stdout)
    assert document == audit(kafka_config, dag_id, TASK, since=since).to_dict()
    assert (document["gaps"], document["unexplained_gaps"], document["overlaps"],
            document["ok"]) == (1, 1, 0, False)
    assert [{k: g[k] for k in ("start", "stop", "after_run", "before_run", "deleted",
                                "explained")} for g in document["partitions"][0]["gaps"]] == [
        {"start": 20, "stop": 25, "after_run": "r1", "before_run": "r2", "deleted": 0,
         "explained": False}]
    summary = command(*where, *cluster)
    assert summary.returncode == 1
    assert summary.stdout.splitlines()[-1] == "NOT OK: 1 gap(s), 1 unexplained, 0 overlap(s)."


def test_the_groups_committed_offsets_are_reported_beside_where_the_runs_end(
        kafka_config, new_topic, dag_id, since) -> None:
    """A commit task commits each run's stops: after the newest run's commit the group is where
    the runs end (p0); a group moved apart (p1, reset by hand) shows, and does not change ok."""
    topic = new_topic(partitions=2)
    fill(kafka_config, topic, {0: 20, 1: 20})
    pin(kafka_config, dag_id, "r0", topic, {0: (0, 10), 1: (0, 10)})
    pin(kafka_config, dag_id, "r1", topic, {0: (10, 20), 1: (10, 20)})
    group = f"audit-group-{uuid.uuid4().hex[:8]}"
    commit_offsets(kafka_config, group, OffsetRanges((PartitionRange(topic, 0, 10, 20),
                                                      PartitionRange(topic, 1, 0, 4))))

    result = audit(kafka_config, dag_id, TASK, since=since, group_id=group)
    assert result.ok and result.group_id == group
    assert [(p.partition, p.last, p.committed) for p in result.partitions] == [
        (0, 20, 20), (1, 20, 4)]
    assert audit(kafka_config, dag_id, TASK, since=since).partitions[0].committed is None
    summary = command("--dag-id", dag_id, "--task-id", TASK, "--since", since.isoformat(),
                      "--bootstrap-servers", kafka_config["bootstrap.servers"],
                      "--group-id", group)
    assert summary.returncode == 0, summary.stderr
    assert f"  {topic}/0: read [0, 20) (log start 0; the group is at 20)" in summary.stdout
    assert (f"  {topic}/1: read [0, 20) (log start 0; the group is at 4, NOT where the runs "
            "end (20))") in summary.stdout


def test_the_command_reads_an_airflow_connection(kafka_config, new_topic, dag_id,
                                                 since) -> None:
    topic = new_topic(partitions=1)
    fill(kafka_config, topic, {0: 10})
    pin(kafka_config, dag_id, "r0", topic, {0: (0, 10)})
    connection = {"conn_type": "kafka", "extra": {**kafka_config}}
    env = {**os.environ, "AIRFLOW_CONN_AUDIT_KAFKA": json.dumps(connection)}
    done = command("--dag-id", dag_id, "--task-id", TASK, "--since", since.isoformat(),
                   "--conn-id", "audit_kafka", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partitions"][0]["covered"] == [[0, 10]]

    missing = command("--dag-id", dag_id, "--task-id", TASK, "--conn-id", "audit_nowhere",
                      env=env)
    assert missing.returncode == 2
    assert "Airflow connection 'audit_nowhere' is not defined" in missing.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "yesterday"], "audit: error: --since 'yesterday' is neither a time nor a "
                               "duration; pass an ISO-8601 time with a zone"),
    (["--since", "2026-05-01T00:00:00"], "audit: error: --since '2026-05-01T00:00:00' has no "
                                         "zone"),
    (["--timeout", "-1"], "audit: error: --timeout '-1' is not a number of seconds"),
    (["--conn-id", "kafka_default"], "audit: error: both --bootstrap-servers and --conn-id"),
])
def test_the_command_refuses_bad_arguments_with_2_before_contacting_the_cluster(
        args: list[str], message: str) -> None:
    # Nothing listens on port 1: a cluster call would fail with 3 after the timeout.
    done = command("--dag-id", "d", "--task-id", "t", "--bootstrap-servers", "127.0.0.1:1",
                   "--timeout", "60", *args, timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(message), done.stderr


def test_the_command_without_a_dag_id_is_refused_by_argparse() -> None:
    done = command("--task-id", "t", "--bootstrap-servers", "127.0.0.1:1", timeout=30)
    assert done.returncode == 2
    assert "the following arguments are required: --dag-id" in done.stderr


def test_the_command_exits_3_when_the_pins_topic_does_not_exist(kafka_config,
                                                                kafka_admin) -> None:
    missing = f"_kafka_spark_pins_{uuid.uuid4().hex[:8]}"
    done = command("--dag-id", "d", "--task-id", "t", "--bootstrap-servers",
                   kafka_config["bootstrap.servers"], "--pins-topic", missing)
    assert done.returncode == 3, done.stderr
    assert f"the pins topic {missing!r} does not exist" in done.stderr
    assert missing not in kafka_admin.list_topics(timeout=30).topics  # the audit created none
