"""Exactly once by the table's state, in the real scheduler: ``airflow backfill create`` over 24
hours run newest first (4 at a time), a task that fails right after its table commit and is
retried by Airflow, a clear of an earlier hour through the REST API, then the whole day again
with ``--reprocess-behavior completed``. The Iceberg table holds each record of the day exactly
once all along; every run is one table commit each time it runs, and reprocessing leaves the
same rows with one new commit per run.

A real Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor) under
``.venv-tables``, on a PostgreSQL metadata DB of its own as in ``tests/deployed``
(``tests/support/deployed.deployed_airflow``), on the tier's broker, with ``tests/tables/dags``
as its DAGs folder; the tasks start their own Spark 4.1 drivers with the tier's jars and the
Iceberg catalog ``lake`` in the tier's warehouse, which the test reads through
``table_spark``. The topic is the one of
``tests/deployed/test_backfill.py`` (``tests/support/backfill.py``): four hours hold records.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.backfill import (
    BACKFILL_TIMEOUT_S,
    HOURS,
    T0,
    backfill,
    check_runs,
    produce_hours,
    records_by_hour,
    run_ranges,
)
from tests.support.deployed import AirflowApi, deployed_airflow
from tests.tables.cases import Table, create
from tools.airflow_stack import ROOT
from tools.table_killpoint import table_conf
from tools.tables_jars import fetch_table_jars

pytestmark = [pytest.mark.tables, pytest.mark.deployed, pytest.mark.integration]

DAGS = ROOT / "tests" / "tables" / "dags"
DAG_ID = "kafka_backfill_into_table"
COLUMNS = ("topic STRING, `partition` INT, `offset` BIGINT, `timestamp` TIMESTAMP, key STRING, "
           "value STRING")
CLEAR_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def table_airflow(kafka_bootstrap: str, warehouses: Any,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowApi]:
    """The real Airflow of this module, running ``tests/tables/dags``; stopped at the end."""
    spark_conf = {**table_conf(warehouses.lake),
                  "spark.jars": ",".join(str(jar) for jar in fetch_table_jars())}
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
           "KAFKA_SPARK_TEST_SPARK_CONF": json.dumps(spark_conf)}
    with deployed_airflow(tmp_path_factory.mktemp("airflow-tables"), bootstrap=kafka_bootstrap,
                          extra_env=env, dags=(DAG_ID,)) as airflow:
        yield airflow


def hour_of(h: int) -> str:
    return (T0 + timedelta(hours=h)).strftime("%Y-%m-%dT%H")


def task_instance(airflow: AirflowApi, run: dict[str, Any], task_id: str) -> dict[str, Any]:
    run_id = urllib.parse.quote(run["dag_run_id"], safe="")
    return dict(airflow.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/"
                                    f"{task_id}"))


def outputs(airflow: AirflowApi, runs: list[dict[str, Any]], hours: Any) -> dict[int, Any]:
    """Hour -> what its ingest's XCom says of the table commit."""
    return {h: airflow.xcom(DAG_ID, runs[h]["dag_run_id"], "ingest")["output"] for h in hours}


def table_state(spark: Any, table: Table) -> tuple[Counter[Any], Counter[str], list[Any]]:
    """The rows (exact multiset), rows per write id, and the sink's commit records (newest
    first), as any reader sees them now."""
    spark.sql(f"REFRESH TABLE {table.name}")  # other drivers committed since
    return table.rows(spark), table.writes(spark), table.records(spark)


@pytest.mark.timeout(2 * BACKFILL_TIMEOUT_S + CLEAR_TIMEOUT_S + 300)
def test_backfills_a_retry_and_a_clear_leave_each_record_once_in_the_table(
        table_airflow: AirflowApi, table_spark: Any, warehouses: Any, new_topic: Any,
        kafka_config: dict[str, Any], kafka_admin: Any) -> None:
    airflow = table_airflow
    # Its metadata DB is PostgreSQL, as in tests/deployed: on SQLite, under load, a task
    # that had written its table commit and pushed its XCom was marked failed.
    assert airflow.stack.database.startswith("postgresql+psycopg2://"), airflow.stack.database
    topic = new_topic(partitions=3, **{"retention.ms": "-1"})
    produce_hours(kafka_config, kafka_admin, topic)
    by_hour = records_by_hour(kafka_config, topic)
    assert {h: len(rows) for h, rows in by_hour.items()} == {0: 3, 11: 6, 21: 2, 23: 4}
    hours = sorted(by_hour)
    expected = Counter((p, o, k.decode(), v.decode())
                       for rows in by_hour.values() for p, o, k, v, _ in rows)
    table = create(table_spark, "iceberg-hadoop", warehouses.lake, columns=COLUMNS,
                   partitioned_by="hours(`timestamp`)")
    conf = {"topics": topic, "table": table.name, "fail_after_commit": [hour_of(21)]}

    try:
        # 1. The day, newest hour first, 4 runs at a time; hour 21's ingest fails right after
        #    its commit and Airflow retries it.
        began, before = time.monotonic(), datetime.now(UTC)
        first = backfill(airflow, DAG_ID, conf, "--run-backwards")
        first_seconds = time.monotonic() - began
        check_runs(airflow, DAG_ID, first, after=before)
        run_ids = {h: first[h]["dag_run_id"] for h in hours}
        rows, writes, records = table_state(table_spark, table)
        assert rows == expected
        assert Counter(r.run for r in records) == Counter(run_ids.values())
        assert table.commit_count(table_spark) == len(hours)  # no other commit
        # Out of order: hour 0 was committed after hour 23 (records are newest first).
        order = [r.run for r in records]
        assert order.index(run_ids[0]) < order.index(run_ids[23])
        written = outputs(airflow, first, hours)
        for h in hours:
            assert writes[written[h]["write_id"]] == len(by_hour[h]), h
        # The retry found its run's write in the table and wrote nothing.
        assert task_instance(airflow, first[21], "ingest")["try_number"] == 2
        assert (written[21]["committed"], written[21]["skipped"]) == (False, True)
        committed = {h: o for h, o in written.items() if h != 21}
        assert {h: (o["committed"], o["records_written"], o["replaced"])
                for h, o in committed.items()} == {
            h: (True, len(by_hour[h]), []) for h in committed}
        ranges = run_ranges(airflow, DAG_ID, first)
        for earlier, later in zip(ranges, ranges[1:], strict=False):
            assert {p: stop for p, (_, stop) in earlier.items()} == \
                {p: start for p, (start, _) in later.items()}

        # 2. An earlier hour again: hour 0 cleared through the REST API re-reads its pinned
        #    ranges and replaces its rows in one commit.
        cleared = airflow.call("POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances", {
            "dry_run": False, "dag_run_id": run_ids[0], "only_failed": False,
            "reset_dag_runs": True})
        assert {ti["task_id"] for ti in cleared["task_instances"]} == {"resolve_offsets", "ingest"}
        again = airflow.wait(DAG_ID, run_ids[0], timeout=CLEAR_TIMEOUT_S)
        assert again["state"] == "success", airflow.failure_report(DAG_ID, run_ids[0])
        redone = airflow.xcom(DAG_ID, run_ids[0], "ingest")["output"]
        assert (redone["committed"], redone["records_written"], redone["replaced"]) == \
            (True, 3, [written[0]["write_id"]])
        rows, writes, records = table_state(table_spark, table)
        assert rows == expected
        assert writes[redone["write_id"]] == 3 and writes[written[0]["write_id"]] == 0
        assert records[0].run == run_ids[0]
        assert Counter(r.run for r in records) == Counter(run_ids.values()) + Counter([run_ids[0]])

        # 3. The day again, reprocessing every run: the same rows, one new commit per run.
        conf["fail_after_commit"] = []
        began, before = time.monotonic(), datetime.now(UTC)
        second = backfill(airflow, DAG_ID, conf, "--reprocess-behavior", "completed")
        second_seconds = time.monotonic() - began
        check_runs(airflow, DAG_ID, second, after=before)
    finally:
        airflow.pause(DAG_ID)
    print(f"backfill into {table.name}: first {first_seconds:.0f}s, "
          f"reprocessed {second_seconds:.0f}s")

    assert [r["dag_run_id"] for r in second] == [r["dag_run_id"] for r in first]
    assert run_ranges(airflow, DAG_ID, second) == ranges
    rewritten = outputs(airflow, second, hours)
    previous = {**{h: written[h]["write_id"] for h in hours}, 0: redone["write_id"]}
    # Every run's rows are replaced in one new commit.
    assert {h: (o["committed"], o["skipped"], o["records_written"], o["replaced"])
            for h, o in rewritten.items()} == {
        h: (True, False, len(by_hour[h]), [previous[h]]) for h in hours}
    rows, writes, records = table_state(table_spark, table)
    assert rows == expected
    assert writes == Counter({rewritten[h]["write_id"]: len(by_hour[h]) for h in hours})
    assert Counter(r.run for r in records) == \
        Counter(run_ids.values()) + Counter(run_ids.values()) + Counter([run_ids[0]])
    assert table.commit_count(table_spark) == 2 * len(hours) + 1
    assert len(second) == HOURS
