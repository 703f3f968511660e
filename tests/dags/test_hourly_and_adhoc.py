"""``kafka_hourly_ingest`` and ``kafka_adhoc`` run with ``dag.test()`` against the real broker and
Spark: exact ranges in XCom, exact records in the output, idempotent re-runs, offsets that move
only after the sink, and clear errors before any side effect."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.dag_data import MS0, T0, T1, T2, arrange, ranges_of, rows
from tools.kafka_records import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_hourly_ingest_exact_idempotent_and_commits_only_after_the_sink(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], spark: Any,
        group_offsets: Any, tmp_path: Path) -> None:
    topic = new_topic(partitions=3)
    expected = arrange(kafka_config, topic)
    group = f"g-{topic}"
    conf = {"topics": topic, "output_root": str(tmp_path / "out"), "group_id": group}

    first = run_dag("kafka_hourly_ingest", logical_date=T1, conf=conf)
    assert first.state == "success", first.errors
    assert first.data_interval == (T0, T1)
    assert first.xcom["wait_for_interval"] == {
        "end": T1.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "idle": [[topic, 2]]}
    resolved = first.xcom["resolve_offsets"]
    assert ranges_of(resolved) == [(topic, 0, 3, 8), (topic, 1, 0, 4), (topic, 2, 2, 2)]
    assert resolved["group_id"] == group
    folder = tmp_path / "out" / T0.strftime("%Y-%m-%dT%H")
    assert rows(spark, folder) == sorted(expected["I1"])
    stats = first.xcom["ingest"]
    assert stats["records"] == 9
    assert [(p["partition"], p["records"], p["first_offset"], p["last_offset"])
            for p in stats["partitions"]] == [(0, 5, 3, 7), (1, 4, 0, 3), (2, 0, None, None)]
    assert stats["output"]["path"] == str(folder)
    manifest = json.loads((folder / "_kafka_spark_manifest.json").read_text())
    assert manifest["ranges"]["ranges"] == resolved["ranges"]
    assert manifest["records"] == 9
    assert group_offsets(group, topic, 3) == {0: 8, 1: 4, 2: 2}

    files_before = sorted(p.name for p in folder.iterdir())
    second = run_dag("kafka_hourly_ingest", logical_date=T1, conf=conf)
    assert second.state == "success", second.errors
    assert ranges_of(second.xcom["resolve_offsets"]) == ranges_of(resolved)
    assert rows(spark, folder) == sorted(expected["I1"])
    assert len(files_before) == len(list(folder.iterdir()))
    assert json.loads((folder / "_kafka_spark_manifest.json").read_text())["ranges"]["ranges"] \
        == resolved["ranges"]

    # I2 with a sink that cannot be written (its root is a file): offsets stay at I1's stops.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    failed = run_dag("kafka_hourly_ingest", logical_date=T2,
                     conf={**conf, "output_root": str(blocker)})
    assert failed.state == "failed"
    assert failed.task_states == {"wait_for_interval": "success", "resolve_offsets": "success",
                                  "ingest": "failed", "commit_offsets": "upstream_failed"}
    assert ranges_of(failed.xcom["resolve_offsets"]) == [
        (topic, 0, 8, 10), (topic, 1, 4, 7), (topic, 2, 2, 2)]
    assert "ingest" in failed.errors
    assert group_offsets(group, topic, 3) == {0: 8, 1: 4, 2: 2}


def test_adhoc_reads_the_param_range(run_dag: Any, new_topic: Any, kafka_config: dict[str, Any],
                                     spark: Any, tmp_path: Path) -> None:
    topic = new_topic(partitions=3)
    expected = arrange(kafka_config, topic)
    start = T0.isoformat()
    outcome = run_dag("kafka_adhoc", logical_date=None, conf={
        "topics": topic, "start": f"timestamp:{start}", "stop": "latest",
        "output_path": str(tmp_path / "adhoc"), "output_format": "orc"})
    assert outcome.state == "success", outcome.errors
    assert ranges_of(outcome.xcom["resolve_offsets"]) == [
        (topic, 0, 3, 11), (topic, 1, 0, 8), (topic, 2, 2, 2)]
    read = expected["I1"] + expected["I2"] + expected["after"]
    assert rows(spark, tmp_path / "adhoc", "orc") == sorted(read)
    assert outcome.xcom["ingest"]["records"] == len(read) == 16


@pytest.mark.parametrize(
    ("logical_date", "conf", "message"),
    [
        # A manual run with a logical date has a zero-width data interval.
        (T1, {}, "the run's data interval is zero-width"),
        # Without a logical date it has none.
        (None, {"stop": "latest"}, "no start offset spec: the run has no data interval"),
        (None, {"start": "yesterday", "stop": "latest"},
         "start: unknown offset spec 'yesterday'"),
        (None, {"start": "earliest", "stop": "timestamp:2024-13-01"},
         "stop: timestamp '2024-13-01' is neither epoch millis"),
    ],
)
def test_adhoc_bad_input_fails_before_any_side_effect(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path,
        logical_date: Any, conf: dict[str, str], message: str) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"x", MS0)])
    output = tmp_path / "never"
    outcome = run_dag("kafka_adhoc", logical_date=logical_date,
                      conf={"topics": topic, "output_path": str(output), **conf})
    assert outcome.state == "failed"
    assert outcome.task_states == {"resolve_offsets": "failed", "ingest": "upstream_failed"}
    assert message in outcome.errors["resolve_offsets"]
    assert not output.exists()


def test_a_bad_template_fails_the_task_before_writing(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path,
        group_offsets: Any) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, b"x", MS0 + 1)])
    group = f"g-{topic}"

    def break_template(dag: Any) -> None:
        dag.get_task("ingest").sink.path = "{{ params.output_root }}/{{ data_interval_start.nope() }}"

    outcome = run_dag("kafka_hourly_ingest", logical_date=T1, edit=break_template, conf={
        "topics": topic, "output_root": str(tmp_path / "out"), "group_id": group})
    assert outcome.task_states["ingest"] == "failed"
    assert outcome.task_states["commit_offsets"] == "upstream_failed"
    assert "nope" in outcome.errors["ingest"]
    assert not (tmp_path / "out").exists()
    assert group_offsets(group, topic, 1) == {}


def test_a_retried_ingest_reads_the_ranges_of_the_first_attempt(
        run_dag: Any, new_topic: Any, kafka_config: dict[str, Any], spark: Any,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_kafka_spark.errors import SinkError
    from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator

    topic = new_topic(partitions=3)
    expected = arrange(kafka_config, topic)
    output = tmp_path / "out"
    execute, tries = KafkaSparkIngestOperator.execute, []

    def fails_first(self: Any, context: Any) -> Any:
        # A failure a retry can get past (a store that did not answer): Airflow retries it.
        tries.append(context["ti"].try_number)
        if len(tries) == 1:
            raise SinkError("the output store did not answer (the test's first attempt)")
        return execute(self, context)

    monkeypatch.setattr(KafkaSparkIngestOperator, "execute", fails_first)

    def late_record(context: Any) -> None:
        # A record inside the interval arrives between the attempts; the retry must not see it.
        produce(kafka_config, topic, [(1, b"late", b"late", MS0 + 1)])

    def retry_once(dag: Any) -> None:
        ingest = dag.get_task("ingest")
        ingest.retries, ingest.retry_delay = 1, timedelta(0)
        ingest.on_retry_callback = [late_record]

    outcome = run_dag("kafka_hourly_ingest", logical_date=T1, edit=retry_once, conf={
        "topics": topic, "output_root": str(output), "group_id": f"g-{topic}"})
    assert outcome.state == "success", outcome.errors
    assert len(tries) == 2, tries
    assert ranges_of(outcome.xcom["resolve_offsets"]) == [
        (topic, 0, 3, 8), (topic, 1, 0, 4), (topic, 2, 2, 2)]
    assert rows(spark, output / T0.strftime("%Y-%m-%dT%H")) == sorted(expected["I1"])
