"""``kafka_adhoc`` triggered from the Airflow UI's trigger form in a real browser (Debian's
chromium, driven by Playwright): log in, open the form, type the Params, submit; then exact
ranges in XCom and exact records on disk. A value of the wrong shape is refused by the form
with a message naming the field, and no run is created.

Screenshots go to ``.cache/test-artifacts/ui/``: the filled form, the finished run, and the
page at the moment of any failure.
"""

from __future__ import annotations

import re
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.browser import (
    Timer,
    browser_page,
    form_field,
    log_in,
    open_trigger_form,
    screenshot,
    type_into,
)
from tests.support.deployed import AirflowApi
from tools.kafka_records import MINUTE_MS, produce

pytestmark = [pytest.mark.deployed, pytest.mark.browser, pytest.mark.integration]

DAG_ID = "kafka_adhoc"
# Recent timestamps: the broker's retention (7 days) would delete records from long ago.
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
MS0 = int(T0.timestamp() * 1000)
# A Spark job on a small machine shared with other work: minutes, not seconds.
RUN_TIMEOUT_S = 420.0
RUN_URL = re.compile(rf"/dags/{DAG_ID}/runs/(?P<run_id>[^/?#]+)")


def runs_writing(airflow: AirflowApi, output: Path) -> list[str]:
    """The ids of the DAG's runs whose conf names ``output`` as their output folder."""
    runs = airflow.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]
    return [r["dag_run_id"] for r in runs if (r.get("conf") or {}).get("output_path") == str(output)]


@pytest.mark.timeout(600)
def test_a_run_triggered_from_the_form_reads_exactly_the_typed_range(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    topic = new_topic(partitions=2)
    # partition 0: minutes 0..4, partition 1: minutes 0..2; the form's start is minute 1.
    records = [(0, f"k{i}".encode(), f"p0-{i}".encode(), MS0 + i * MINUTE_MS) for i in range(5)]
    records += [(1, None, f"p1-{i}".encode(), MS0 + i * MINUTE_MS) for i in range(3)]
    produce(kafka_config, topic, records)
    start = f"timestamp:{(T0 + timedelta(minutes=1)).isoformat()}"
    output = tmp_path / "from-the-form"
    timer = Timer()

    with browser_page("trigger-form") as page:
        log_in(page, airflow.stack)
        dialog = open_trigger_form(page, airflow.stack, DAG_ID)
        timer.step("log in and open the form")
        type_into(form_field(dialog, "Topics"), topic)
        type_into(form_field(dialog, "Start offset (inclusive)"), start)
        type_into(form_field(dialog, "Stop offset (exclusive)"), "latest")
        type_into(form_field(dialog, "Output folder"), str(output))
        trigger = dialog.get_by_role("button", name="Trigger")
        trigger.wait_for()
        assert trigger.is_enabled()
        screenshot(dialog, "trigger-form-filled")
        timer.step("type the Params")
        trigger.click()
        # The UI goes to the new run's page.
        page.wait_for_url(RUN_URL)
        run_id = urllib.parse.unquote(RUN_URL.search(page.url)["run_id"])
        timer.step("submit")

        run = airflow.wait(DAG_ID, run_id, timeout=RUN_TIMEOUT_S)
        timer.step("run")
        assert run["state"] == "success", airflow.failure_report(DAG_ID, run_id)
        page.reload()
        page.get_by_role("heading", name=run_id).wait_for()
        page.get_by_text("Success", exact=True).first.wait_for()
        screenshot(page, "trigger-form-run-finished")
        timer.step("finished run page")
    print(f"UI trigger form timings: {timer.report()}")

    assert run["conf"] == {"topics": topic, "start": start, "stop": "latest",
                           "output_path": str(output), "output_format": "parquet",
                           "re_resolve": False}
    assert airflow.task_states(DAG_ID, run_id) == {"resolve_offsets": "success", "ingest": "success"}
    ranges = airflow.xcom(DAG_ID, run_id, "resolve_offsets")
    assert [(r["topic"], r["partition"], r["start"], r["stop"]) for r in ranges["ranges"]] == [
        (topic, 0, 1, 5), (topic, 1, 1, 3)]
    rows = pq.read_table(output, columns=["partition", "offset", "key", "value"]).to_pylist()
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows) == [
        (0, 1, b"k1", b"p0-1"), (0, 2, b"k2", b"p0-2"), (0, 3, b"k3", b"p0-3"),
        (0, 4, b"k4", b"p0-4"), (1, 1, None, b"p1-1"), (1, 2, None, b"p1-2")]
    assert airflow.xcom(DAG_ID, run_id, "ingest")["records"] == 6


@pytest.mark.parametrize(("title", "param", "typed"), [
    # Common slips: a bare time without "timestamp:", topics separated by a space.
    ("Start offset (inclusive)", "start", "2024-05-01T00:00:00Z"),
    ("Topics", "topics", "orders refunds"),
])
def test_the_form_refuses_a_value_of_the_wrong_shape_naming_the_field(
        airflow: AirflowApi, new_topic: Any, tmp_path: Path, title: str, param: str,
        typed: str) -> None:
    values = {"Topics": new_topic(partitions=1), "Start offset (inclusive)": "earliest",
              "Stop offset (exclusive)": "latest", "Output folder": str(tmp_path / "never"),
              title: typed}
    timer = Timer()

    with browser_page(f"trigger-form-refused-{param}") as page:
        log_in(page, airflow.stack)
        dialog = open_trigger_form(page, airflow.stack, DAG_ID)
        for field_title, text in values.items():
            type_into(form_field(dialog, field_title), text)
        dialog.get_by_role("button", name="Trigger").click()
        message = dialog.get_by_text(f"Invalid input for param {param}:")
        message.wait_for()
        screenshot(dialog, f"trigger-form-refused-{param}")
        timer.step("refused")
        assert f"'{typed}' does not match" in message.inner_text()
        # The form stays open with what was typed, and no run page is opened.
        assert form_field(dialog, title).input_value() == typed
        assert not RUN_URL.search(page.url)
    print(f"UI refused trigger timings: {timer.report()}")

    assert runs_writing(airflow, tmp_path / "never") == []
    assert not (tmp_path / "never").exists()
