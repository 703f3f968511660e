"""The offsets view without a broker or a running Airflow: the page rendered from a real
``Audit`` (``audit_ranges`` on plain runs), the topic filter, ``since``, and the plugin's
registration (entry point, lazy app, Airflow's authentication on both endpoints).

The deployed test (tests/deployed/test_offsets_view.py) drives the page in the real UI."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets.audit import Audit, AuditedRun, audit_ranges
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.plugins.offsets_page import (
    Query,
    only_topic,
    parse_since,
    render_page,
    run_href,
)

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def run(run_id: str, minute: int, *spans: tuple[str, int, int, int], lost: dict | None = None,
        lag: dict | None = None, map_index: int = -1) -> AuditedRun:
    ranges = OffsetRanges(tuple(PartitionRange(*span) for span in spans), starting="s",
                          stopping="e", resolved_at=T0 + timedelta(minutes=minute),
                          lost=lost or {}, lag=lag or {})
    return AuditedRun(run_id, map_index, T0 + timedelta(minutes=minute, seconds=1), ranges)


def audit_of(*runs: AuditedRun, log_starts: dict | None = None) -> dict[str, Any]:
    """The audit of ``runs``; every partition's log starts at 0 unless ``log_starts`` says."""
    if log_starts is None:
        log_starts = {(r.topic, r.partition): 0 for each in runs for r in each.ranges}
    partitions = audit_ranges(runs, log_starts)
    return Audit("d", "resolve", T0, "_kafka_spark_pins", tuple(runs), partitions).to_dict()


class Rows(HTMLParser):
    """The timeline's rows: (data-run, or 'gap' for a gap's row, [cell texts])."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        role, css = found.get("role"), (found.get("class") or "").split()
        if tag == "div" and role == "row" and ("run" in css or "gap-row" in css):
            self.rows.append((found.get("data-run") or "gap", []))
        elif tag == "div" and role in ("cell", "rowheader") and self.rows:
            self._cell = []
        elif tag in ("br", "span") and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self._cell is not None:  # a cell holds no div
            self.rows[-1][1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def rows_of(html: str) -> list[tuple[str, list[str]]]:
    parser = Rows()
    parser.feed(html)
    return parser.rows


def test_the_timeline_orders_runs_by_offsets_and_puts_each_gap_before_the_run_after_it() -> None:
    # Pinned out of order (a backfill in parallel); t/0 misses [5, 7) between b and c, and c
    # and d overlap on [8, 9); t/1 tiles, b's range of it is empty.
    audit = audit_of(
        run("c", 1, ("t", 0, 7, 9), ("t", 1, 2, 4), lag={("t", 0): 3}),
        run("a", 2, ("t", 0, 0, 3), ("t", 1, 0, 2)),
        run("b", 3, ("t", 0, 3, 5), ("t", 1, 2, 2)),
        run("d", 4, ("t", 0, 8, 12), ("t", 1, 4, 5), lost={("t", 1): 2}),
    )
    records = {("a", "t", 0, 0, 3): 3, ("a", "t", 1, 0, 2): 1, ("c", "t", 0, 7, 9): 2,
               ("c", "t", 0, 0, 99): 50}  # another range's count: not shown
    html = render_page(Query("d", "resolve"), audit=audit, records=records)

    # Runs: offsets, records read, lag, lost, then one cell per partition; a gap row: what and
    # where, then one cell per partition.
    assert [(name, cells[2:] if name != "gap" else cells) for name, cells in rows_of(html)] == [
        ("a", ["5", "4", "0", "0", "[0, 3) 3 offset(s) · 3 read", "[0, 2) 2 offset(s) · 1 read"]),
        ("b", ["2", "none", "0", "0", "[3, 5) 2 offset(s)", "[2, 2) 0 offset(s)"]),
        ("gap", ["gap in t/0: offsets no run read",
                 "gap [5, 7) 2 offset(s) no run read · unexplained", ""]),
        ("c", ["4", "2", "3", "0", "[7, 9) 2 offset(s) · 2 read · lag 3 "
                                   "overlap [8, 9) with d", "[2, 4) 2 offset(s)"]),
        ("d", ["5", "none", "0", "2", "[8, 12) 4 offset(s) overlap [8, 9) with c",
               "[4, 5) 1 offset(s) · lost 2"]),
    ]
    assert 'data-count="gaps" class="bad">1 gap(s), 1 unexplained' in html
    # Runs b and d read offsets, but no ingest task of theirs returned a result: not landed.
    assert 'data-count="not-landed" class="bad">2 run(s) whose ingest has no result' in html
    assert html.count("data-not-landed") == 2
    assert "runs do not tile" in html
    assert 'data-gap="5-7"' in html and 'data-overlap="8-9"' in html
    # Every run links to its run page in the UI, relative to the view (any base_url path).
    assert '<a href="../dags/d/runs/a" target="_top" data-airflow-page>a</a>' in html


def test_a_gap_the_next_run_recorded_as_lost_is_explained_and_a_tiling_task_is_ok() -> None:
    explained = audit_of(run("a", 1, ("t", 0, 0, 3)),
                         run("b", 2, ("t", 0, 10, 12), lost={("t", 0): 7}),
                         log_starts={("t", 0): 10})
    html = render_page(Query("d", "resolve"), audit=explained)
    assert 'class="gap explained"' in html and "7 deleted now" in html
    assert "runs tile: no unexplained gap, no overlap" in html

    tiled = render_page(Query("d", "resolve"),
                        audit=audit_of(run("a", 1, ("t", 0, 0, 3)), run("b", 2, ("t", 0, 3, 4))))
    assert [name for name, _ in rows_of(tiled)] == ["a", "b"]
    assert "gap" not in "".join(cells[-1] for _, cells in rows_of(tiled))
    assert "runs tile" in tiled


def test_ids_and_texts_are_escaped_and_run_links_quoted() -> None:
    tricky = 'manual__2024-05-01T00:00:00+00:00<script>"'
    html = render_page(Query('d"<x>', "resolve"),
                       audit={**audit_of(run(tricky, 1, ("t", 0, 0, 1))), "dag_id": 'd"<x>'},
                       json_href="audit.json?a=1&b=2")
    assert "<script>\"" not in html and "&lt;script&gt;&quot;" in html
    assert run_href('d"<x>', tricky) == \
        "../dags/d%22%3Cx%3E/runs/manual__2024-05-01T00%3A00%3A00%2B00%3A00%3Cscript%3E%22"
    assert 'href="audit.json?a=1&amp;b=2"' in html
    assert 'value="d&quot;&lt;x&gt;"' in html


def test_only_topic_keeps_the_topics_partitions_and_runs_and_recounts() -> None:
    audit = audit_of(run("a", 1, ("t", 0, 0, 3), ("u", 0, 0, 1), lag={("u", 0): 4}),
                     run("b", 2, ("t", 0, 5, 6)), run("c", 3, ("u", 0, 1, 2)))
    assert (audit["gaps"], audit["ok"]) == (1, False)
    u = only_topic(audit, "u")
    assert [r["run_id"] for r in u["runs"]] == ["a", "c"]
    assert u["runs"][0]["ranges"] == [{"topic": "u", "partition": 0, "start": 0, "stop": 1}]
    assert (u["runs"][0]["offsets"], u["runs"][0]["lag"]) == (1, [
        {"topic": "u", "partition": 0, "offsets": 4}])
    assert [(p["topic"], p["partition"]) for p in u["partitions"]] == [("u", 0)]
    assert (u["gaps"], u["unexplained_gaps"], u["overlaps"], u["ok"]) == (0, 0, 0, True)
    t = only_topic(audit, "t")
    assert (t["gaps"], t["unexplained_gaps"], t["ok"]) == (1, 1, False)
    assert only_topic(audit, "v")["runs"] == []


def test_no_run_and_no_query_pages() -> None:
    empty = render_page(Query("d", "resolve"), audit=audit_of())
    assert "No run of this task pinned ranges since then." in empty
    chooser = render_page(Query(), since=T0, choices=[("d", "resolve"), ("e", "r")])
    assert '<a href="?dag_id=d&amp;task_id=resolve&amp;since=7d&amp;conn_id=kafka_default">' \
           "d / resolve</a>" in chooser
    assert "since 2024-05-01 00:00:00Z" in chooser
    assert 'role="alert">bad since</p>' in render_page(Query(), error="bad since")


@pytest.mark.parametrize(("text", "expected"), [
    ("", T0 - timedelta(days=7)), ("7d", T0 - timedelta(days=7)), (" 12h ", T0 - timedelta(hours=12)),
    ("2024-04-30T10:00:00Z", datetime(2024, 4, 30, 10, tzinfo=UTC)),
    ("2024-04-30T10:00:00", datetime(2024, 4, 30, 10, tzinfo=UTC)),
    ("2024-04-30", datetime(2024, 4, 30, tzinfo=UTC)),
])
def test_since_is_a_duration_or_an_iso_time(text: str, expected: datetime) -> None:
    assert parse_since(text, T0) == expected


def test_since_refuses_anything_else_saying_what_to_type() -> None:
    with pytest.raises(ValueError, match=re.escape("since='last week' is neither a duration "
                                                   "such as '7d' or '12h' nor an ISO-8601 time")):
        parse_since("last week", T0)


def test_the_plugin_is_registered_by_entry_point_and_costs_task_processes_no_fastapi() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    target = "airflow_provider_kafka_spark.plugins.offsets_view:KafkaOffsetsViewPlugin"
    assert declared["airflow.plugins"] == {"kafka_spark_offsets_view": target}
    installed = {e.name: e.value for e in entry_points(group="airflow.plugins")}
    assert installed.get("kafka_spark_offsets_view") == target, \
        "the installed metadata predates the entry point: reinstall (make setup)"
    code = ("import sys; import airflow_provider_kafka_spark.plugins.offsets_view as v; "
            "from airflow._shared.plugins_manager import is_valid_plugin; "
            "print(is_valid_plugin(v.KafkaOffsetsViewPlugin), sorted(m for m in sys.modules if "
            "m.split('.')[0] in ('fastapi', 'confluent_kafka', 'pyspark') "
            "or m.startswith('airflow.api_fastapi')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "[]"]


def test_the_view_and_its_json_need_a_logged_in_user() -> None:
    from fastapi.testclient import TestClient

    from airflow_provider_kafka_spark.plugins.offsets_view import (
        URL_ROUTE,
        KafkaOffsetsViewPlugin,
        create_app,
    )

    client = TestClient(create_app())
    for path in ("/", "/audit.json?dag_id=d&task_id=resolve"):
        answer = client.get(path)
        assert (answer.status_code, answer.json()) == (401, {"detail": "Not authenticated"})
    [view] = KafkaOffsetsViewPlugin.external_views
    assert (view["url_route"], view["destination"], view["category"]) == \
        (URL_ROUTE, "nav", "browse")
    assert [a["url_prefix"] for a in KafkaOffsetsViewPlugin.fastapi_apps] == ["/kafka-spark-offsets"]
