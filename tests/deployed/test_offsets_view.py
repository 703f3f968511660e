"""The offsets view (Browse > Kafka offsets, the provider's Airflow plugin) in a real browser,
after a real backfill with a hole in it.

``kafka_backfill_by_time`` backfills hours 0 and 1 of a fresh 2-partition topic with
``airflow backfill create``; hour 3 is a run triggered through the REST API; hour 2 never
runs. So no run read hour 2's records of partition 0: offsets ``[2, 4)``, a gap between the
backfill's hour 0 and the triggered hour 3 (hour 1 holds no record: its ranges are empty and
its ingest starts no Spark job). Partition 1 has no record in hours 1 and 2: it tiles.

The test opens the view through the UI's navigation, chooses the DAG, the task, the topic and
the moment the test began, and reads the timeline: exactly the three runs (in offset order)
and the two partitions, each run's exact ranges, records read and lag, the gap with its exact
offsets; then a run's link opens that run's page in the UI.

Screenshots go to ``.cache/test-artifacts/ui/``: ``offsets-view.png``, the view in the UI
(``docs/images/offsets-view.png`` is a copy of one), and the page at any failure.
"""

from __future__ import annotations

import re
import urllib.parse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.backfill import backfill
from tests.support.browser import ARTIFACTS, VIEWPORT, Timer, browser_page, log_in
from tests.support.deployed import AirflowApi
from tools.kafka_records import MINUTE_MS, produce

pytestmark = [pytest.mark.deployed, pytest.mark.browser, pytest.mark.integration]

DAG_ID = "kafka_backfill_by_time"
TASK_ID = "resolve_offsets"
HOUR_MS = 60 * MINUTE_MS
# Hours before any other test's, including the manual run's logical date (T0 + 4 h): a DAG
# has one run per logical date, and tests/deployed/test_backfill.py backfills 8 hours across a
# midnight that end at the latest 2 hours before the current one (logical dates at most 33
# hours ago: tests/support/backfill.py's across_midnight).
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=40)
MS0 = int(T0.timestamp() * 1000)
RUN_TIMEOUT_S = 420.0


def at(hour: int, minute: int) -> int:
    return MS0 + hour * HOUR_MS + minute * MINUTE_MS


def cells(row: Any) -> list[str]:
    """The texts of a table row's cells, whitespace collapsed."""
    return [" ".join(text.split())
            for text in row.locator("[role=rowheader], [role=cell]").all_inner_texts()]


@pytest.mark.timeout(900)
def test_the_offsets_view_shows_the_backfills_runs_and_its_gap_with_exact_offsets(
        airflow: AirflowApi, new_topic: Any, kafka_config: dict[str, Any]) -> None:
    began = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    topic = new_topic(partitions=2, **{"retention.ms": "-1"})
    # p0: hour 0 -> offsets 0, 1; hour 2 -> 2, 3 (never read); hour 3 -> 4.
    # p1: hour 0 -> 0; hour 3 -> 1.
    produce(kafka_config, topic, [
        (0, b"k", b"h0a", at(0, 10)), (0, b"k", b"h0b", at(0, 20)), (0, b"k", b"h2a", at(2, 10)),
        (0, b"k", b"h2b", at(2, 20)), (0, b"k", b"h3", at(3, 10)),
        (1, b"k", b"h0", at(0, 30)), (1, b"k", b"h3", at(3, 30))])
    conf = {"topics": topic, "output_root": str(airflow.stack.output_root / f"offsets-{topic}")}
    timer = Timer()

    try:
        # Queued while the DAG is paused; backfill() unpauses it once the backfill exists.
        airflow.pause(DAG_ID)
        manual = airflow.trigger(DAG_ID, conf, logical_date=(T0 + timedelta(hours=4)).isoformat())
        backfilled = backfill(airflow, DAG_ID, conf, start=T0, hours=2)
        hour3 = airflow.wait(DAG_ID, manual, timeout=RUN_TIMEOUT_S)
    finally:
        airflow.pause(DAG_ID)
    timer.step("backfill and the triggered run")
    runs = [*backfilled, hour3]
    for run in runs:
        assert run["state"] == "success", airflow.failure_report(DAG_ID, run["dag_run_id"])
    assert [datetime.fromisoformat(r["data_interval_start"]) for r in runs] == \
        [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=3)]
    assert [r["run_type"] for r in runs] == ["backfill", "backfill", "manual"]
    run_ids = [r["dag_run_id"] for r in runs]

    with browser_page("offsets-view") as page:
        log_in(page, airflow.stack)
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Kafka offsets").click()
        page.wait_for_url(re.compile(r"/plugin/kafka-offsets"))
        view = page.frame_locator("iframe[title='Kafka offsets']")
        view.get_by_label("DAG", exact=True).fill(DAG_ID)
        view.get_by_label("Task", exact=True).fill(TASK_ID)
        view.get_by_label("Topic (optional)").fill(topic)
        view.get_by_label("Pinned since").fill(began.isoformat())
        view.get_by_role("button", name="Show").click()
        timeline = view.locator("#timeline")
        timeline.wait_for()
        timer.step("open the view")

        assert view.locator("[data-count]").all_inner_texts() == [
            "3 run(s)", "2 partition(s)", "1 gap(s), 1 unexplained", "0 overlap(s)"]
        assert view.get_by_text("runs do not tile").is_visible()
        header = timeline.locator("[role=columnheader]").all_inner_texts()
        assert header[6:] == [f"{topic}/0", f"{topic}/1"]
        rows = timeline.locator(".row.run, .row.gap-row")
        assert [r.get_attribute("data-run") for r in rows.all()] == \
            [run_ids[0], run_ids[1], None, run_ids[2]]
        # Per run: offsets, records read, lag, lost; then its range of each partition.
        expected = [
            [3, 3, 4, 0, "[0, 2) 2 offset(s) · 2 read · lag 3", "[0, 1) 1 offset(s) · 1 read · lag 1"],
            [0, 0, 4, 0, "[2, 2) 0 offset(s) · 0 read · lag 3", "[1, 1) 0 offset(s) · 0 read · lag 1"],
            None,
            [2, 2, 0, 0, "[4, 5) 1 offset(s) · 1 read", "[1, 2) 1 offset(s) · 1 read"],
        ]
        for row, want in zip(rows.all(), expected, strict=True):
            if want is None:
                assert cells(row) == [f"gap in {topic}/0: offsets no run read",
                                      "gap [2, 4) 2 offset(s) no run read · unexplained", ""]
                continue
            got = cells(row)
            assert [int(x) for x in got[2:6]] == want[:4], got
            assert got[6:] == want[4:], got
        gap = view.locator(f'li.gap[data-partition="{topic}/0"]')
        assert gap.get_attribute("data-gap") == "2-4"
        assert f"gap {topic}/0 [2, 4) · 2 offset(s) · unexplained · after run {run_ids[0]}, " \
               f"before run {run_ids[2]}" in " ".join(gap.inner_text().split())
        timer.step("read the timeline")
        # The view in the UI, down to the timeline's last row.
        bottom = rows.last.bounding_box()
        assert bottom is not None
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "offsets-view.png"), clip={
            "x": 0, "y": 0, "width": VIEWPORT["width"],
            "height": min(VIEWPORT["height"], bottom["y"] + bottom["height"] + 16)})

        view.get_by_role("link", name=run_ids[2], exact=True).click()
        page.wait_for_url(re.compile(rf"/dags/{DAG_ID}/runs/[^/?#]+$"))
        page.get_by_role("heading", name=run_ids[2]).wait_for()
        timer.step("open a run's page")
    # Unpausing the DAG also starts its own scheduled run (its latest hour, on demo.events, a
    # third Spark job) unless it ran that hour already: the main cost of this test when it does.
    others = [r["dag_run_id"] for r in airflow.call(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns?"
               + urllib.parse.urlencode({"start_date_gte": began.isoformat(), "limit": 100})
    )["dag_runs"] if r["dag_run_id"] not in run_ids]
    print(f"offsets view timings: {timer.report()}; other runs meanwhile: {others}")
