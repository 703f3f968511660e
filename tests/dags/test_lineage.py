"""OpenLineage events of the resolve, ingest and commit operators, written by the OpenLineage
provider's real listener through the openlineage client's file transport during ``dag.test()``
runs of ``kafka_hourly_ingest`` against the real broker and Spark."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.dag_data import T1, T2, arrange

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def events_of(log: Path, dag_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The task events in the transport's file, by (task id, event type)."""
    events = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        name = event["job"]["name"]
        if name.startswith(f"{dag_id}."):
            events[(name.removeprefix(f"{dag_id}."), event["eventType"])] = event
    return events


def offset_facet(dataset: dict[str, Any]) -> dict[str, Any]:
    facet = dict(dataset["inputFacets"]["kafkaOffsetRanges"])
    assert facet.pop("_producer")
    assert facet.pop("_schemaURL")
    return facet


@pytest.fixture
def openlineage_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file the OpenLineage provider's listener writes its events to (file transport).

    The provider's plugin registers its listener when Airflow loads plugins, once per process,
    only if a transport is configured then; here the transport is configured for this test
    alone, so the same listener is registered as the plugin would, and removed after."""
    from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
    from airflow.sdk.listener import get_listener_manager

    log = tmp_path / "openlineage.jsonl"
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(
        {"type": "file", "log_file_path": str(log), "append": True}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")
    manager, listener = get_listener_manager(), get_openlineage_listener()
    registered = manager.pm.is_registered(listener)
    manager.add_listener(listener)
    yield log
    if not registered:
        manager.pm.unregister(listener)


def test_resolve_ingest_and_commit_report_topics_ranges_and_output(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path,
        openlineage_log: Path) -> None:
    log = openlineage_log
    topic = new_topic(partitions=3)
    arrange(kafka_config, topic)
    conf = {"topics": topic, "output_root": str(tmp_path / "out"), "group_id": f"g-{topic}"}

    outcome = run_dag("kafka_hourly_ingest", logical_date=T1, conf=conf)

    assert outcome.state == "success", outcome.errors
    # The OpenLineage naming spec: the first of bootstrap.servers (KAFKA_BROKERS=3 lists three).
    namespace = f"kafka://{kafka_config['bootstrap.servers'].split(',')[0]}"
    ranges = {"isolationLevel": "read_committed", "partitions": [
        {"partition": 0, "start": 3, "stop": 8}, {"partition": 1, "start": 0, "stop": 4},
        {"partition": 2, "start": 2, "stop": 2}]}
    events = events_of(log, "kafka_hourly_ingest")
    assert {task for task, kind in events if kind == "COMPLETE"} >= {
        "resolve_offsets", "ingest", "commit_offsets"}

    start = events[("resolve_offsets", "START")]
    assert [(d["namespace"], d["name"]) for d in start["inputs"]] == [(namespace, topic)]
    assert start["outputs"] == []
    resolved = events[("resolve_offsets", "COMPLETE")]
    assert [(d["namespace"], d["name"]) for d in resolved["inputs"]] == [(namespace, topic)]
    assert offset_facet(resolved["inputs"][0]) == ranges

    folder = str(tmp_path / "out" / T1.subtract(hours=1).strftime("%Y-%m-%dT%H"))
    for kind in ("START", "COMPLETE"):
        ingest = events[("ingest", kind)]
        assert [(d["namespace"], d["name"]) for d in ingest["inputs"]] == [(namespace, topic)]
        assert offset_facet(ingest["inputs"][0]) == ranges
        assert [(d["namespace"], d["name"]) for d in ingest["outputs"]] == [("file", folder)]
    statistics = events[("ingest", "COMPLETE")]["inputs"][0]["inputFacets"]["inputStatistics"]
    assert statistics["rowCount"] == 9

    committed = events[("commit_offsets", "COMPLETE")]
    assert [(d["namespace"], d["name"]) for d in committed["inputs"]] == [(namespace, topic)]
    assert offset_facet(committed["inputs"][0]) == ranges
    assert committed["outputs"] == []

    # A failed ingest (its output root is a file) reports what it was to read and write.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    failed = run_dag("kafka_hourly_ingest", logical_date=T2,
                     conf={**conf, "output_root": str(blocker)})
    assert failed.task_states["ingest"] == "failed"
    events = events_of(log, "kafka_hourly_ingest")
    fail = events[("ingest", "FAIL")]
    assert [(d["namespace"], d["name"]) for d in fail["inputs"]] == [(namespace, topic)]
    assert offset_facet(fail["inputs"][0])["partitions"] == [
        {"partition": 0, "start": 8, "stop": 10}, {"partition": 1, "start": 4, "stop": 7},
        {"partition": 2, "start": 2, "stop": 2}]
    assert [(d["namespace"], d["name"]) for d in fail["outputs"]] == [
        ("file", str(blocker / T1.strftime("%Y-%m-%dT%H")))]


@pytest.fixture
def report_dag_unpaused(airflow_db: Path) -> Any:
    """The example DAGs in the metadata DB (as the dag-processor writes them), with
    ``kafka_hourly_report`` unpaused (new DAGs start paused); paused again after the test."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        sync_bag_to_db(BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path,
                                    bundle_name=bundle.name), bundle.name, bundle.version)

    def paused(value: bool) -> None:
        with create_session() as session:
            changed = session.execute(update(DagModel).where(
                DagModel.dag_id == "kafka_hourly_report").values(is_paused=value)).rowcount
            assert changed == 1

    paused(False)
    yield
    paused(True)


def test_under_dag_test_the_ingest_announces_no_asset_and_airflow_warns_of_none(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path,
        report_dag_unpaused: None, capfd: pytest.CaptureFixture[str]) -> None:
    """``dag.test()`` runs no scheduler: the ingest announces no output asset there (Airflow,
    which learns of an asset announced through an alias only from its first event, would warn
    that it has no such asset, then that it is inactive, once per hour written). With a
    scheduler the event is announced and runs the report DAG: tests/deployed/test_scheduled_run.
    """
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    topic = new_topic(partitions=3)
    arrange(kafka_config, topic)
    conf = {"topics": topic, "output_root": str(tmp_path / "out"), "group_id": f"g-{topic}"}

    outcome = run_dag("kafka_hourly_ingest", logical_date=T1, conf=conf)

    assert outcome.state == "success", outcome.errors
    assert outcome.xcom["ingest"]["records"] == 9
    folder = tmp_path / "out" / T1.subtract(hours=1).strftime("%Y-%m-%dT%H")
    assert folder.is_dir()
    with create_session() as session:
        assert session.scalars(select(AssetModel.uri).where(
            AssetModel.uri == f"file://{folder}")).all() == []
        assert session.scalars(select(AssetEvent.extra).where(
            AssetEvent.source_dag_id == "kafka_hourly_ingest")).all() == []
        assert session.scalars(select(AssetDagRunQueue.target_dag_id).where(
            AssetDagRunQueue.target_dag_id == "kafka_hourly_report")).all() == []
    printed = capfd.readouterr()
    for noise in ("cannot create asset event", "inactive AssetModel"):
        assert noise not in printed.out + printed.err
