"""Schedule on data in the real scheduler and triggerer: a DAG scheduled on a Kafka interval asset
(15-second intervals) gets exactly one run per complete interval, each started as soon as its
interval is complete (an open transaction inside an interval holds it back until it commits),
each resolving exactly its interval's offsets. The triggerer announces an interval while the
metadata DB cannot store the event (its ``asset_event`` table locked past the 5 s the watcher
used to wait before recording its position) and is SIGKILLed then: the triggerer started again
announces that interval again, and it and the one that completed meanwhile get exactly one run
each, none twice. A second announcement of an interval (posted through the REST API as the
triggerer would post it after a crash between storing it and recording its position) starts a
run whose resolve task finds the interval claimed and is skipped. A zero interval is an import
error of its DAG; an unknown topic is an error announcement whose run fails with the watcher's
message.

The DAG is the example ``kafka_hourly_on_data`` without its Spark tasks: what a run reads is the
resolve task's ranges (the ingest reads exactly those, as tests/dags and test_scheduled_run
show), and the records in them are read back here by offset. Four Spark jobs on the CI machine
would triple the test's time."""

from __future__ import annotations

import time
import urllib.parse
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from airflow_provider_kafka_spark.offsets.intervals import Interval, WatcherPosition, read_position
from tests.support.deployed import AirflowApi
from tools.airflow_stack import kill, relaunch
from tools.kafka_records import consume_all, produce, transactional_producer

pytestmark = [pytest.mark.deployed, pytest.mark.integration]

EVERY_S = 15
EVERY_MS = EVERY_S * 1000
SERVER = "localhost:9092"
LEAD_S = 10  # from writing the DAG files to the first interval's start; the watcher must start
# (parse, trigger created, picked up by the triggerer: about 15 s) before that interval ends
# How soon after its interval is complete a run must exist: the watcher polls every second,
# the scheduler creates the run on its next loop.
PROMPT_S = 12.0
# After the kill, the new triggerer takes over the watcher once the dead one's heartbeat is 30 s
# old (triggerer_health_check_threshold): that much later.
TAKEOVER_S = 50.0
OLD_HANDOFF_S = 5.0  # how long the watcher used to wait before recording its position

DAG_FILE = '''
import pendulum
from airflow.sdk import DAG
from airflow_provider_kafka_spark.assets import kafka_interval_asset
from airflow_provider_kafka_spark.operators import KafkaResolveOffsetsOperator

ASSET = kafka_interval_asset({topic!r}, server={server!r}, every={every!r}, start={start!r},
                             poll_interval=1)

with DAG({dag_id!r}, schedule=[ASSET], start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         catchup=False, is_paused_upon_creation=False):
    KafkaResolveOffsetsOperator(task_id="resolve_offsets", topics={topic!r})
'''


def iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def sleep_until(millis: int) -> None:
    time.sleep(max(0.0, millis / 1000 - time.time()))


def now_ms() -> int:
    return int(time.time() * 1000)


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def asset_events(airflow: AirflowApi, uri: str) -> tuple[int, list[dict[str, Any]]]:
    """The asset's id and its events, oldest first."""
    assets = airflow.call("GET", "/api/v2/assets?uri_pattern="
                                 + urllib.parse.quote(uri.split("?")[0], safe=""))["assets"]
    (found,) = [a for a in assets if a["uri"] == uri]
    events = airflow.call("GET", f"/api/v2/assets/events?asset_id={found['id']}"
                                 "&order_by=timestamp&limit=100")["asset_events"]
    return int(found["id"]), [dict(e) for e in events]


def runs(airflow: AirflowApi, dag_id: str) -> list[dict[str, Any]]:
    found = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after&limit=100")
    return [dict(r) for r in found["dag_runs"]]


def wait_for_runs(airflow: AirflowApi, dag_id: str, count: int,
                  timeout: float = 120.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(found := runs(airflow, dag_id)) < count:
        assert time.monotonic() < deadline, f"{dag_id}: {len(found)} run(s), not {count}"
        time.sleep(0.5)
    return found


def consumed_events(airflow: AirflowApi, dag_id: str, run: dict[str, Any]) -> list[int]:
    """The ids of the asset events that started ``run``."""
    return [int(e["id"]) for e in airflow.call(
        "GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
               "/upstreamAssetEvents")["asset_events"]]


def hold_asset_events(database: str) -> Any:
    """A transaction of the metadata DB (``database``: the stack's SQLAlchemy URL) holding its
    ``asset_event`` table in SHARE mode: Airflow reads asset events but stores none until it
    ends, a database too slow to store for as long as the test wants. End it with
    ``rollback()`` and ``close()``."""
    connection = psycopg2.connect(database.replace("postgresql+psycopg2://", "postgresql://"))
    connection.cursor().execute("LOCK TABLE asset_event IN SHARE MODE")
    return connection


def wait_for_blocked_store(connection: Any, timeout: float = 60.0) -> None:
    """Until some session waits to write ``asset_event`` (the triggerer storing an event)."""
    deadline = time.monotonic() + timeout
    cursor = connection.cursor()
    while True:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted "
                       "AND relation = 'asset_event'::regclass")
        if cursor.fetchone()[0]:
            return
        assert time.monotonic() < deadline, "no event was announced while the table was locked"
        time.sleep(0.3)


def wait_for_position(kafka_config: dict[str, Any], name: str, expected: WatcherPosition,
                      timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while (found := read_position(kafka_config, name)) != expected:
        assert time.monotonic() < deadline, f"the watcher {name} stands at {found}, not {expected}"
        time.sleep(0.3)


@pytest.mark.timeout(420)
def test_one_run_per_complete_interval_held_back_by_an_open_transaction_and_across_a_triggerer_kill(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any]) -> None:
    began = time.monotonic()
    topic = new_topic(partitions=2)
    suffix = topic.split("-")[-1]
    dag_id, missing_dag, zero_dag = (f"on_data_{suffix}", f"on_data_missing_{suffix}",
                                     f"on_data_zero_{suffix}")
    g0 = (now_ms() // 1000 + LEAD_S) * 1000 // EVERY_MS * EVERY_MS + EVERY_MS
    ends = [g0 + (k + 1) * EVERY_MS for k in range(5)]
    uri = f"kafka://{SERVER}/{topic}?interval=PT{EVERY_S}S"
    missing_topic = f"never-{uuid.uuid4().hex[:8]}"
    extra_dags = Path(str(airflow.stack.extra_dags))
    files = {
        dag_id: DAG_FILE.format(topic=topic, server=SERVER, every=EVERY_S, start=iso(g0),
                                dag_id=dag_id),
        missing_dag: DAG_FILE.format(topic=missing_topic, server=SERVER, every=EVERY_S,
                                     start=None, dag_id=missing_dag),
        zero_dag: DAG_FILE.format(topic=topic, server=SERVER, every=0, start=None,
                                  dag_id=zero_dag),
    }
    for name, text in files.items():
        (extra_dags / f"{name}.py").write_text(text)
    pid: int | None = None
    try:
        # The watcher starts (the DAG is active from its first parse) and records its anchor.
        wait_for_position(kafka_config, uri, WatcherPosition(g0), timeout=LEAD_S + 30)
        assert now_ms() < ends[0], "the watcher started after its first interval had ended"

        # Interval 0: one record per partition. It is complete once records stamped after its
        # end arrive, 2 s after it ended: its run starts then, not before.
        sleep_until(g0 + 1000)
        produce(kafka_config, topic, [(0, b"a0", b"a0", g0 + 1000), (1, b"b0", b"b0", g0 + 1000)])
        sleep_until(ends[0] + 2000)
        produce(kafka_config, topic, [(0, b"a1", b"a1", ends[0] + 1000),
                                      (1, b"b1", b"b1", ends[0] + 1000)])
        complete = [time.time()]
        # Interval 1: a transaction inside it stays open past its end, then commits.
        txn = transactional_producer(kafka_config)
        txn.begin_transaction()
        produce(kafka_config, topic, [(1, b"t1", b"t1", ends[0] + 3000)], producer=txn)
        assert txn.flush(30) == 0
        sleep_until(ends[1] + 2000)
        produce(kafka_config, topic, [(0, b"a2", b"a2", ends[1] + 1000),
                                      (1, b"b2", b"b2", ends[1] + 1000)])
        time.sleep(6.0)  # partition 0 is complete, partition 1 held by the open transaction
        assert len(runs(airflow, dag_id)) == 1, "interval 1 ran while a transaction was open"
        txn.commit_transaction(30)
        complete.append(time.time())
        # Interval 2 completes while the metadata DB cannot store events. The triggerer
        # announces it and waits, past the 5 s after which the watcher used to record its
        # position; its position stays before interval 2. Then the triggerer dies (SIGKILL),
        # the event unstored, and comes back.
        sleep_until(ends[2] + 2000)
        database = hold_asset_events(airflow.stack.database)
        try:
            produce(kafka_config, topic, [(0, b"a3", b"a3", ends[2] + 1000),
                                          (1, b"b3", b"b3", ends[2] + 1000)])
            complete.append(time.time())
            wait_for_blocked_store(database)
            time.sleep(OLD_HANDOFF_S + 1)
            assert read_position(kafka_config, uri) == WatcherPosition(ends[1]), \
                "the position moved past an event Airflow has not stored"
            pid = kill(airflow.stack, "triggerer")
            killed = time.time()
        finally:
            database.rollback()
            database.close()
        relaunch(airflow.stack, "triggerer")
        # Meanwhile interval 1 is announced a second time, as after a crash between storing
        # its event and recording the position: the event the triggerer would store, through
        # the REST API.
        asset_id, announced = asset_events(airflow, uri)
        assert len(announced) == 2 and len(runs(airflow, dag_id)) == 2
        again = airflow.call("POST", "/api/v2/assets/events", {"asset_id": asset_id, "extra": {
            "from_trigger": True, "payload": announced[1]["extra"]["payload"]}})
        # Interval 3 completes while no watcher runs. Interval 4 never completes (no record
        # after it): the last run is interval 3's.
        sleep_until(ends[3] + 2000)
        produce(kafka_config, topic, [(0, b"a4", b"a4", ends[3] + 1000),
                                      (1, b"b4", b"b4", ends[3] + 1000)])
        complete.append(time.time())
        found = wait_for_runs(airflow, dag_id, 5)
        finished = [airflow.wait(dag_id, r["dag_run_id"]) for r in found]
        _, events = asset_events(airflow, uri)
        found = runs(airflow, dag_id)
        missing_runs = wait_for_runs(airflow, missing_dag, 1)
        missing_run = airflow.wait(missing_dag, missing_runs[0]["dag_run_id"])
        import_errors = airflow.call("GET", "/api/v2/importErrors?limit=100")["import_errors"]
    finally:
        for name in files:
            (extra_dags / f"{name}.py").unlink(missing_ok=True)
    wall = time.monotonic() - began

    # The second announcement's run: its resolve task found interval 1 claimed and was skipped.
    assert [e["id"] for e in events if e["extra"].get("from_rest_api")] == [again["id"]]
    events = [e for e in events if e["id"] != again["id"]]
    (duplicate,) = [r for r in finished if consumed_events(airflow, dag_id, r) == [again["id"]]]
    finished = [r for r in finished if r is not duplicate]
    assert duplicate["state"] == "success"
    assert airflow.task_states(dag_id, duplicate["dag_run_id"]) == {"resolve_offsets": "skipped"}
    log = airflow.log(dag_id, duplicate["dag_run_id"], "resolve_offsets")
    assert "is read by the run that claimed it first" in log, log[-2000:]

    # Exactly one announcement and one run per complete interval, in order, none twice; each
    # announced as soon as complete, never before (interval 1 waited for the commit);
    # intervals 2 (again: its first event was never stored) and 3 by the restarted triggerer.
    assert [(e["extra"]["payload"]["start"], e["extra"]["payload"]["end"]) for e in events] == [
        (iso(g0), iso(ends[0])), (iso(ends[0]), iso(ends[1])), (iso(ends[1]), iso(ends[2])),
        (iso(ends[2]), iso(ends[3]))], events
    assert [e["extra"]["payload"]["partition_key"] for e in events] == [
        datetime.fromtimestamp(g0 / 1000 + k * EVERY_S, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        for k in range(4)]
    for k, event in enumerate(events):
        delay = stamp(event["timestamp"]) - complete[k]
        assert 0 < delay < PROMPT_S + (TAKEOVER_S if k >= 2 else 0), (k, delay, event)
    assert stamp(events[2]["timestamp"]) > killed
    assert len(found) == 5 and all(r["run_type"] == "asset_triggered" for r in found), found
    assert [r["state"] for r in finished] == ["success"] * 4, [
        airflow.failure_report(dag_id, r["dag_run_id"]) for r in finished]
    assert [consumed_events(airflow, dag_id, run) for run in finished] == [
        [e["id"]] for e in events]

    # Each run resolved exactly its interval: the offsets per partition, and the records in
    # them. Partition 1 holds b0 b1 t1 b2 <commit marker> b3 b4.
    expected = [((0, 0, 1), (1, 0, 1), [b"a0", b"b0"]),
                ((0, 1, 2), (1, 1, 3), [b"a1", b"b1", b"t1"]),
                ((0, 2, 3), (1, 3, 5), [b"a2", b"b2"]),
                ((0, 3, 4), (1, 5, 6), [b"a3", b"b3"])]
    records = consume_all(kafka_config, topic, 2, isolation_level="read_committed")
    for k, (run, (p0, p1, keys)) in enumerate(zip(finished, expected, strict=True)):
        ranges = airflow.xcom(dag_id, run["dag_run_id"], "resolve_offsets")
        assert [(r["partition"], r["start"], r["stop"]) for r in ranges["ranges"]] == [p0, p1]
        assert sorted(key for p, o, key, _v, _ts in records
                      if any(p == q and start <= o < stop for q, start, stop in (p0, p1))) == keys
        interval = airflow.xcom(dag_id, run["dag_run_id"], "resolve_offsets", key="interval")
        assert interval == {"start": iso(g0 + k * EVERY_MS), "end": iso(ends[k]),
                            "label": Interval(g0 + k * EVERY_MS, ends[k]).label,
                            "intervals": [[iso(g0 + k * EVERY_MS), iso(ends[k])]]}

    # An unknown topic: announced as an error (the asset's event), its run fails with it.
    assert missing_run["state"] == "failed"
    log = airflow.log(missing_dag, missing_run["dag_run_id"], "resolve_offsets")
    assert f"unknown topic(s) ['{missing_topic}']" in log, log[-2000:]
    assert "started by an error of the Kafka interval asset" in log
    # A zero interval: an import error of its DAG, with the argument and what to pass.
    (zero,) = [e for e in import_errors if e["filename"].endswith(f"{zero_dag}.py")]
    assert "kafka_interval_asset: every=0 is not a positive, finite duration; pass a positive " \
           "number of seconds or a timedelta" in zero["stack_trace"]
    assert pid is not None
    print(f"\nasset watcher test: {wall:.0f} s wall")
