"""The offsets view's page: server-rendered HTML (inline CSS and SVG, no script) from an audit.

Plain functions on plain data, no Airflow or FastAPI import: the input is the dict of
:meth:`airflow_provider_kafka_spark.offsets.audit.Audit.to_dict` (optionally narrowed to one
topic by :func:`only_topic`) and the records the ingest tasks read; the output is one HTML
document. :mod:`.offsets_view` serves it in the Airflow UI; the benchmark renders it directly.

The page shows, for one resolve task (``dag_id``, ``task_id``) and the runs pinned since a
moment:

* a summary: runs, partitions, gaps (unexplained ones apart), overlaps, and whether the runs
  tile (``ok``);
* per partition, the offsets covered as a bar, the gaps (red: unexplained, amber: explained by
  a recorded loss) and overlaps (orange), each with its exact offsets ``[start, stop)``;
* the timeline: one row per run (ordered by its offsets), one column per partition, each cell
  the run's range ``[start, stop)`` with its offsets, the records its ingest read, its lag at
  resolution and the offsets it recorded as lost; a gap is a row of its own, just before the
  run that starts after it. Every run links to its Airflow run page. A run that read offsets
  but whose ingest returned no statistics (not run yet, running, or failed: its sink never
  completed) shows ``none`` records, and the summary counts such runs.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

DEFAULT_SINCE = "7d"
"""The form's default ``since``: runs pinned in the last seven days."""

Key = tuple[str, int]
RecordsRead = Mapping[tuple[str, str, int, int, int], int]
"""Records an ingest task read: ``(run_id, topic, partition, start, stop) -> records``; only
counts of exactly the run's pinned range are shown."""

_RELATIVE = re.compile(r"^\s*(\d{1,5})\s*([dh])\s*$")
_BAR_WIDTH = 480
_CHUNK_ROWS = 25
_FINDINGS = 100  # gaps and overlaps listed by the partitions (the timeline shows them all)


@dataclass(frozen=True)
class Query:
    """What the form asks for (as typed; ``since`` as typed, e.g. ``7d`` or an ISO time)."""

    dag_id: str = ""
    task_id: str = ""
    since: str = DEFAULT_SINCE
    conn_id: str = "kafka_default"
    topic: str = ""

    def params(self, **changes: str) -> str:
        """The query string of this query with ``changes`` (empty fields left out)."""
        values = {"dag_id": self.dag_id, "task_id": self.task_id, "topic": self.topic,
                  "since": self.since, "conn_id": self.conn_id, **changes}
        return urlencode({k: v for k, v in values.items() if v})


def parse_since(text: str, now: datetime) -> datetime:
    """``since`` as typed: ``<n>d`` or ``<n>h`` before ``now``, or an ISO-8601 date or time
    (UTC when it names no offset). Empty means :data:`DEFAULT_SINCE`.

    Raises:
        ValueError: anything else; the message says what to type.
    """
    text = text.strip() or DEFAULT_SINCE
    relative = _RELATIVE.match(text)
    if relative:
        amount, unit = int(relative[1]), relative[2]
        return now - (timedelta(days=amount) if unit == "d" else timedelta(hours=amount))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"since={text!r} is neither a duration such as '7d' or '12h' nor an "
                         "ISO-8601 time such as '2024-05-01T00:00:00Z'.") from None
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def only_topic(audit: Mapping[str, Any], topic: str) -> dict[str, Any]:
    """The audit narrowed to one topic: its partitions, the runs with a range on it (their
    ranges, lag and loss of that topic only) and the counts recomputed. Gaps and overlaps are
    per partition, so they are exactly those of the topic's partitions."""
    partitions = [p for p in audit["partitions"] if p["topic"] == topic]
    runs = []
    for run in audit["runs"]:
        ranges = [r for r in run["ranges"] if r["topic"] == topic]
        if ranges:
            runs.append({**run, "ranges": ranges,
                         "offsets": sum(r["stop"] - r["start"] for r in ranges),
                         "lost": [x for x in run["lost"] if x["topic"] == topic],
                         "lag": [x for x in run["lag"] if x["topic"] == topic]})
    gaps = [g for p in partitions for g in p["gaps"]]
    unexplained = sum(1 for g in gaps if not g["explained"])
    overlaps = sum(len(p["overlaps"]) for p in partitions)
    return {**audit, "runs": runs, "partitions": partitions, "gaps": len(gaps),
            "unexplained_gaps": unexplained, "overlaps": overlaps,
            "ok": not unexplained and not overlaps}


def run_href(dag_id: str, run_id: str, prefix: str = "../") -> str:
    """The Airflow UI's page of a run, relative to the offsets view's page (so it works under
    any ``[api] base_url`` path)."""
    return f"{prefix}dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def render_page(query: Query, *, since: datetime | None = None,
                audit: Mapping[str, Any] | None = None, records: RecordsRead | None = None,
                choices: Sequence[tuple[str, str]] = (), error: str | None = None,
                json_href: str | None = None,
                link: Callable[[str, str], str] = run_href) -> str:
    """The whole page: the form, then ``error`` or the audit (when given).

    ``since``: the moment ``query.since`` stands for (shown beside the form). ``choices``:
    known ``(dag_id, task_id)`` pairs of resolve tasks, offered in the form and as links.
    ``json_href``: where the same audit is as JSON. ``link(dag_id, run_id)``: a run's page.
    """
    parts = [_HEAD, '<main>', '<h1>Kafka offsets</h1>', _form(query, since, choices)]
    if error:
        parts.append(f'<p class="error" role="alert">{escape(error)}</p>')
    elif audit is not None:
        parts.append(_audit(audit, records or {}, query, json_href, link))
    elif choices:
        parts.append(_known(query, choices))
    parts.append(f"</main>{_SCRIPT}</body></html>")
    return "".join(parts)


def _form(query: Query, since: datetime | None, choices: Sequence[tuple[str, str]]) -> str:
    dags = sorted({dag for dag, _ in choices})
    tasks = sorted({task for dag, task in choices if not query.dag_id or dag == query.dag_id})
    since_note = (f'<span class="note">since {escape(_time(since))}</span>'
                  if since is not None else "")

    def field(name: str, label: str, value: str, extra: str = "") -> str:
        return (f'<div class="field"><label for="{name}">{label}</label><input id="{name}" '
                f'name="{name}" value="{escape(value)}"{extra}></div>')

    return "".join([
        '<form method="get" action="" class="query" aria-label="Query">',
        field("dag_id", "DAG", query.dag_id, ' list="dag-ids" required'),
        field("task_id", "Task", query.task_id, ' list="task-ids" required'),
        field("topic", "Topic (optional)", query.topic, ' placeholder="all topics"'),
        field("since", "Pinned since", query.since,
              ' placeholder="7d, 12h or 2024-05-01T00:00:00Z"'),
        field("conn_id", "Kafka connection", query.conn_id),
        '<button type="submit">Show</button>', since_note, "</form>",
        _datalist("dag-ids", dags), _datalist("task-ids", tasks),
    ])


def _datalist(list_id: str, values: Iterable[str]) -> str:
    options = "".join(f'<option value="{escape(v)}">' for v in values)
    return f'<datalist id="{list_id}">{options}</datalist>'


def _known(query: Query, choices: Sequence[tuple[str, str]]) -> str:
    items = "".join(
        f'<li><a href="?{escape(query.params(dag_id=dag, task_id=task))}">'
        f'{escape(dag)} / {escape(task)}</a></li>' for dag, task in choices)
    return ('<section><h2>Resolve tasks with runs since then</h2>'
            f'<ul class="known">{items}</ul></section>')


def _audit(audit: Mapping[str, Any], records: RecordsRead, query: Query,
           json_href: str | None, link: Callable[[str, str], str]) -> str:
    partitions = audit["partitions"]
    runs = audit["runs"]
    ok = bool(audit["ok"])
    badge = ('<span class="badge ok">runs tile: no unexplained gap, no overlap</span>' if ok
             else '<span class="badge bad">runs do not tile</span>')
    topic = f" · topic {escape(query.topic)}" if query.topic else ""
    landed = {run_id for run_id, *_ in records}
    unlanded = sum(1 for run in runs if run["offsets"] > 0 and run["run_id"] not in landed)
    not_landed = (f' · <span data-count="not-landed" class="bad">{unlanded} run(s) whose '
                  'ingest has no result</span>' if unlanded else "")
    summary = (
        f'<section class="summary" aria-label="Summary"><h2>{escape(audit["dag_id"])} / '
        f'{escape(audit["task_id"])}{topic}</h2><p>{badge} '
        f'<span data-count="runs">{len(runs)} run(s)</span> · '
        f'<span data-count="partitions">{len(partitions)} partition(s)</span> · '
        f'<span data-count="gaps" class="{"bad" if audit["unexplained_gaps"] else ""}">'
        f'{audit["gaps"]} gap(s), {audit["unexplained_gaps"]} unexplained</span> · '
        f'<span data-count="overlaps" class="{"warn" if audit["overlaps"] else ""}">'
        f'{audit["overlaps"]} overlap(s)</span>{not_landed}</p>'
        f'<p class="note">Pinned since {escape(_time(audit["since"]))} in '
        f'{escape(audit["pins_topic"])}'
        + (f' · <a href="{escape(json_href)}">as JSON</a>' if json_href else "")
        + "</p></section>")
    if not runs:
        return summary + '<p class="empty">No run of this task pinned ranges since then.</p>'
    return summary + _partitions(partitions) + _timeline(audit, records, link)


def _partitions(partitions: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    notes = []
    for p in partitions:
        name = f'{p["topic"]}/{p["partition"]}'
        gaps, overlaps = p["gaps"], p["overlaps"]
        rows.append(
            f'<tr data-partition="{escape(name)}"><th scope="row">{escape(name)}</th>'
            f'<td>{_bar(p)}</td><td class="num">{_offset(p["first"])}</td>'
            f'<td class="num">{_offset(p["last"])}</td><td class="num">{_offset(p["log_start"])}'
            f'</td><td class="num{" bad" if gaps else ""}">{len(gaps)}</td>'
            f'<td class="num{" warn" if overlaps else ""}">{len(overlaps)}</td></tr>')
        for gap in gaps:
            kind, deleted = _gap_words(gap)
            notes.append(
                f'<li class="gap {kind}" data-partition="{escape(name)}" '
                f'data-gap="{gap["start"]}-{gap["stop"]}"><strong>gap {escape(name)} '
                f'[{gap["start"]}, {gap["stop"]})</strong> · {gap["stop"] - gap["start"]} '
                f'offset(s) · {kind}{deleted} · after run {escape(gap["after_run"])}, before run '
                f'{escape(gap["before_run"])}<br><span class="note">{escape(gap["reason"])}'
                '</span></li>')
        for overlap in overlaps:
            notes.append(
                f'<li class="overlap" data-partition="{escape(name)}" '
                f'data-overlap="{overlap["start"]}-{overlap["stop"]}"><strong>overlap '
                f'{escape(name)} [{overlap["start"]}, {overlap["stop"]})</strong> · '
                f'{overlap["stop"] - overlap["start"]} offset(s) read by '
                f'{escape(", ".join(overlap["runs"]))}</li>')
    more = (f'<p class="note">and {len(notes) - _FINDINGS} more: the timeline marks every one, '
            'the JSON lists them all.</p>' if len(notes) > _FINDINGS else "")
    listing = (f'<ul class="findings">{"".join(notes[:_FINDINGS])}</ul>{more}' if notes else "")
    return ('<section aria-label="Partitions"><h2>Partitions</h2>'
            '<table class="partitions"><thead><tr><th scope="col">partition</th>'
            '<th scope="col">offsets read (green), gaps (red; amber: explained), '
            'overlaps (orange)</th><th scope="col">first</th><th scope="col">last (excl.)</th>'
            '<th scope="col">log start now</th><th scope="col">gaps</th>'
            '<th scope="col">overlaps</th></tr></thead><tbody>' + "".join(rows)
            + "</tbody></table>" + listing + "</section>")


def _bar(p: Mapping[str, Any]) -> str:
    """The partition's offsets from ``first`` to ``last`` as an inline SVG bar."""
    low, high = p["first"], p["last"]
    if low is None or high is None or high <= low:
        return '<span class="note">nothing read</span>'
    scale = _BAR_WIDTH / (high - low)

    def rect(start: int, stop: int, css: str, title: str, y: int = 0, h: int = 14) -> str:
        x = (start - low) * scale
        w = max((stop - start) * scale, 2.0)
        return (f'<rect class="{css}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h}">'
                f"<title>{escape(title)}</title></rect>")

    shapes = [rect(s, e, "cov", f"read [{s}, {e})") for s, e in p["covered"]]
    shapes += [rect(g["start"], g["stop"], "g-ok" if g["explained"] else "g-bad",
                    f'gap [{g["start"]}, {g["stop"]})') for g in p["gaps"]]
    shapes += [rect(o["start"], o["stop"], "ov", f'overlap [{o["start"]}, {o["stop"]})', 3, 8)
               for o in p["overlaps"]]
    return (f'<svg class="bar" width="{_BAR_WIDTH}" height="14" role="img" '
            f'aria-label="offsets {low} to {high}">{"".join(shapes)}</svg>')


def _timeline(audit: Mapping[str, Any], records: RecordsRead,
              link: Callable[[str, str], str]) -> str:
    dag_id = audit["dag_id"]
    keys: list[Key] = [(p["topic"], p["partition"]) for p in audit["partitions"]]
    runs = audit["runs"]
    ranges = [{(r["topic"], r["partition"]): (r["start"], r["stop"]) for r in run["ranges"]}
              for run in runs]
    # Runs in the order of their offsets (partition by partition), then as they were pinned.
    order = sorted(range(len(runs)), key=lambda i: (
        tuple(ranges[i][k][0] if k in ranges[i] else math.inf for k in keys), i))

    # Overlaps are named by run id: mark every row of that run whose range meets them.
    overlap_notes: dict[tuple[int, Key], list[str]] = defaultdict(list)
    rows_of: dict[str, list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        rows_of[run["run_id"]].append(i)
    for p in audit["partitions"]:
        key = (p["topic"], p["partition"])
        for overlap in p["overlaps"]:
            for run_id in overlap["runs"]:
                others = [r for r in overlap["runs"] if r != run_id] or [run_id]
                for i in rows_of.get(run_id, ()):
                    start, stop = ranges[i].get(key, (0, 0))
                    if start < overlap["stop"] and stop > overlap["start"]:
                        overlap_notes[(i, key)].append(
                            f'overlap [{overlap["start"]}, {overlap["stop"]}) with '
                            + ", ".join(others))
    # A gap goes in a row of its own before the run starting where it stops.
    starting: dict[tuple[str, Key, int], int] = {}
    for i in order:
        for key, (start, _) in ranges[i].items():
            starting.setdefault((runs[i]["run_id"], key, start), i)
    gaps_before: dict[int, dict[Key, Mapping[str, Any]]] = defaultdict(dict)
    trailing: list[dict[Key, Mapping[str, Any]]] = []  # gaps whose run is not found: at the end
    for p in audit["partitions"]:
        key = (p["topic"], p["partition"])
        for gap in p["gaps"]:
            row = starting.get((gap["before_run"], key, gap["stop"]))
            if row is None or key in gaps_before[row]:
                trailing.append({key: gap})
            else:
                gaps_before[row][key] = gap

    columns = _columns(runs, ranges, keys)
    head = "".join(f'<div role="columnheader" data-partition="{escape(f"{t}/{p}")}">'
                   f"{escape(t)}/{p}</div>" for t, p in keys)
    body: list[str] = []
    landed = {run_id for run_id, *_ in records}
    for i in order:
        if i in gaps_before:
            body.append(_gap_row(gaps_before[i], keys))
        body.append(_run_row(runs[i], ranges[i], keys, dag_id, records, overlap_notes, i,
                             link, landed))
    body.extend(_gap_row(gap, keys) for gap in trailing)
    # Rows in chunks the browser lays out only when near the screen (content-visibility):
    # 1,000 runs x 12 partitions are 13,000 cells.
    chunks = "".join(f'<div class="chunk" style="contain-intrinsic-size:auto '
                     f'{len(body[c:c + _CHUNK_ROWS]) * 46}px">{"".join(body[c:c + _CHUNK_ROWS])}'
                     "</div>" for c in range(0, len(body), _CHUNK_ROWS))
    return ('<section aria-label="Timeline"><h2>Timeline: runs × partitions</h2>'
            '<p class="note">A cell is the run\'s range <code>[start, stop)</code> of the '
            'partition: its offsets, the records its ingest read, its lag at resolution '
            '(offsets past the stop) and the offsets it recorded as lost to deletion.</p>'
            f'<div id="timeline" class="timeline" role="table" aria-label="Runs by partition" '
            f'style="--cols:{columns}"><div class="row head" role="row">'
            '<div role="columnheader">run</div><div role="columnheader">start → stop</div>'
            '<div role="columnheader">offsets</div>'
            '<div role="columnheader">records</div><div role="columnheader">lag</div>'
            f'<div role="columnheader">lost</div>{head}</div>'
            f'<div role="rowgroup">{chunks}</div></div></section>')


def _columns(runs: Sequence[Mapping[str, Any]], ranges: Sequence[Mapping[Key, tuple[int, int]]],
             keys: list[Key]) -> str:
    """The grid's column widths (every row is its own grid, so they are fixed): the run ids'
    and the partitions' longest texts, in pixels at the page's font."""
    run_chars = max((len(r["run_id"]) + (4 if r["map_index"] >= 0 else 0) for r in runs),
                    default=10)

    def digits(values: Iterable[int], header: str) -> int:
        return max(max((len(str(v)) for v in values), default=1) * 8 + 16, len(header) * 8 + 14)

    offsets = digits((r["offsets"] for r in runs), "offsets")
    spec_chars = max((max(len(r["starting"]), len(r["stopping"]) + 2) for r in runs), default=12)
    widths = [min(max(int(run_chars * 8.0) + 16, 210), 480),
              min(max(int(spec_chars * 6.3) + 16, 120), 280), offsets,
              max(offsets, digits((), "records")),
              digits((sum(x["offsets"] for x in r["lag"]) for r in runs), "lag"),
              digits((sum(x["offsets"] for x in r["lost"]) for r in runs), "lost")]
    lags = [{(x["topic"], x["partition"]): x["offsets"] for x in r["lag"]} for r in runs]
    for key in keys:
        heading = len(f"{key[0]}/{key[1]}") * 8.2  # bold, 13px
        first = max((len(f"[{a}, {b})") * 8.2 for spans in ranges if key in spans
                     for a, b in [spans[key]]), default=0)
        # "<n> offset(s) · <n> read · lag <n>" at 11px
        second = max((len(f"{b - a} offset(s) · {b - a} read · lag {lag.get(key, 0)}") * 6.2
                      for spans, lag in zip(ranges, lags, strict=True) if key in spans
                      for a, b in [spans[key]]), default=0)
        widths.append(min(max(int(max(heading, first, second)) + 16, 150), 420))
    return " ".join(f"{w}px" for w in widths)


def _run_row(run: Mapping[str, Any], ranges: Mapping[Key, tuple[int, int]], keys: list[Key],
             dag_id: str, records: RecordsRead, overlap_notes: Mapping[tuple[int, Key], list[str]],
             index: int, link: Callable[[str, str], str], landed: Set[str]) -> str:
    run_id = run["run_id"]
    lag = {(x["topic"], x["partition"]): x["offsets"] for x in run["lag"]}
    lost = {(x["topic"], x["partition"]): x["offsets"] for x in run["lost"]}
    read = {key: records[(run_id, *key, *span)] for key, span in ranges.items()
            if (run_id, *key, *span) in records}
    mapped = f'[{run["map_index"]}]' if run["map_index"] >= 0 else ""
    cells = []
    for key in keys:
        if key not in ranges:
            cells.append('<div role="cell" class="none"></div>')
            continue
        start, stop = ranges[key]
        details = [f"{stop - start} offset(s)"]
        if key in read:
            details.append(f"{read[key]} read")
        if lag.get(key):
            details.append(f"lag {lag[key]}")
        if lost.get(key):
            details.append(f'<span class="bad">lost {lost[key]}</span>')
        notes = overlap_notes.get((index, key), [])
        css = "r ov" if notes else ("r empty" if start == stop else "r")
        extra = "".join(f'<span class="warn">{escape(n)}</span>' for n in notes)
        cells.append(f'<div role="cell" class="{css}">[{start}, {stop})<br>{" · ".join(details)}'
                     f'{extra}</div>')
    total_read = str(sum(read.values())) if read else "—"
    if not read and run["offsets"] > 0 and run_id not in landed:
        total_read = ('<span class="bad" data-not-landed title="No ingest task of this run '
                      'returned its statistics: it has not run yet, is running, or failed; '
                      'its sink never completed.">none</span>')
    total_lost = sum(lost.values())
    return (f'<div class="row run" role="row" data-run="{escape(run_id)}">'
            f'<div role="rowheader" class="runid"><a href="{escape(link(dag_id, run_id))}" '
            f'target="_top" data-airflow-page>{escape(run_id)}</a>{mapped}<br>'
            f'<span title="pinned {escape(_time(run["pinned_at"]))}">resolved '
            f'{escape(_time(run["resolved_at"]))}</span></div>'
            f'<div role="cell" class="spec">{escape(run["starting"])}<br>'
            f'→ {escape(run["stopping"])}</div>'
            f'<div role="cell" class="num">{run["offsets"]}</div>'
            f'<div role="cell" class="num">{total_read}</div>'
            f'<div role="cell" class="num">{sum(lag.values())}</div>'
            f'<div role="cell" class="num{" bad" if total_lost else ""}">{total_lost}</div>'
            + "".join(cells) + "</div>")


def _gap_words(gap: Mapping[str, Any]) -> tuple[str, str]:
    """A gap's kind (``explained``/``unexplained``, also its CSS class) and its deletion note."""
    return ("explained" if gap["explained"] else "unexplained",
            f' · {gap["deleted"]} deleted now' if gap["deleted"] else "")


def _gap_row(gaps: Mapping[Key, Mapping[str, Any]], keys: list[Key]) -> str:
    cells = []
    for key in keys:
        gap = gaps.get(key)
        if gap is None:
            cells.append('<div role="cell" class="none"></div>')
            continue
        kind, deleted = _gap_words(gap)
        cells.append(
            f'<div role="cell" class="gap {kind}" data-partition="{escape(f"{key[0]}/{key[1]}")}" '
            f'data-gap="{gap["start"]}-{gap["stop"]}" title="{escape(gap["reason"])}">'
            f'gap [{gap["start"]}, {gap["stop"]})<br>{gap["stop"] - gap["start"]} '
            f'offset(s) no run read · {kind}{deleted}</div>')
    names = ", ".join(f"{t}/{p}" for t, p in keys if (t, p) in gaps)
    return (f'<div class="row gap-row" role="row"><div role="rowheader" class="gaphead">gap in '
            f'{escape(names)}: offsets no run read</div>' + "".join(cells) + "</div>")


def _offset(value: int | None) -> str:
    return "—" if value is None else str(value)


def _time(value: datetime | str | None) -> str:
    """A time as ``YYYY-MM-DD HH:MM:SSZ`` (UTC)."""
    if value is None:
        return "—"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


# Inside the Airflow UI the page is an iframe sandboxed without top navigation, so a run link
# cannot replace the UI's page. The UI's own router can: the link's address is pushed onto the
# UI's history and the router told (popstate), as its back button would. Outside an iframe, or
# when the UI is not reachable (another origin), the link works as a plain link.
_SCRIPT = """<script>
document.addEventListener("click", function (event) {
  var link = event.target.closest && event.target.closest("a[data-airflow-page]");
  if (!link || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey ||
      event.altKey || window.top === window) return;
  try {
    var top = window.top, url = new URL(link.href);
    if (url.origin !== top.location.origin) return;
    var state = top.history.state || {};
    top.history.pushState({usr: null, key: Math.random().toString(36).slice(2, 10),
                           idx: (typeof state.idx === "number" ? state.idx : 0) + 1}, "",
                          url.pathname + url.search + url.hash);
    top.dispatchEvent(new top.PopStateEvent("popstate", {state: top.history.state}));
    event.preventDefault();
  } catch (error) { /* not the UI's origin: leave the link alone */ }
});
</script>"""

_HEAD = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Kafka offsets</title><style>
:root{--fg:#1a202c;--muted:#5a6474;--line:#d9dee5;--ok:#2f855a;--okbg:#e6f4ea;--bad:#c53030;
--badbg:#fde8e8;--amber:#b7791f;--amberbg:#fdf3d8;--warn:#c05621;--warnbg:#feebc8}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);
background:#fff}
main{padding:16px 20px}h1{font-size:20px;margin:0 0 12px}h2{font-size:16px;margin:18px 0 8px}
.query{display:flex;flex-wrap:wrap;gap:6px 10px;align-items:end;padding:10px;
border:1px solid var(--line);border-radius:6px;background:#f7f9fb}
.query label{font-size:12px;color:var(--muted);display:block;margin-bottom:2px}
.query input{display:block;padding:5px 7px;border:1px solid var(--line);border-radius:4px;
font:inherit;min-width:180px}
button{padding:6px 14px;border-radius:4px;border:1px solid #2b6cb0;background:#2b6cb0;
color:#fff;font:inherit;cursor:pointer}
.note{color:var(--muted);font-size:12px}.error{color:var(--bad);background:var(--badbg);
padding:8px 10px;border-radius:4px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600}
.badge.ok{background:var(--okbg);color:var(--ok)}.badge.bad{background:var(--badbg);
color:var(--bad)}
.bad{color:var(--bad);font-weight:600}.warn{color:var(--warn);font-weight:600}
table{border-collapse:collapse}th,td{border:1px solid var(--line);padding:3px 6px;
text-align:left;vertical-align:top}thead th{background:#f1f4f8;font-weight:600;
position:sticky;top:0;z-index:1}
.num{text-align:right;font-variant-numeric:tabular-nums}
.bar rect.cov{fill:var(--ok)}.bar rect.g-bad{fill:var(--bad)}.bar rect.g-ok{fill:var(--amber)}
.bar rect.ov{fill:var(--warn)}.bar{background:#edf0f4;border-radius:2px;vertical-align:middle}
.findings{padding-left:18px}.findings li{margin:4px 0}.findings li.unexplained strong{
color:var(--bad)}.findings li.explained strong{color:var(--amber)}
.findings li.overlap strong{color:var(--warn)}
.timeline{width:max-content;font-size:13px}
.timeline .row{display:grid;grid-template-columns:var(--cols)}
.timeline .row>div{border:1px solid var(--line);margin:0 -1px -1px 0;padding:3px 6px;
overflow:hidden;text-overflow:ellipsis}
.timeline .head{position:sticky;top:0;z-index:1}
.timeline .head>div{background:#f1f4f8;font-weight:600;white-space:nowrap}
.timeline .chunk{content-visibility:auto}
.timeline .r{background:var(--okbg);font-size:11px;color:var(--muted)}
.timeline .r::first-line{font-size:13px;font-weight:600;color:var(--fg)}
.timeline .r.empty{background:#f4f6f8}.timeline .r.ov{background:var(--warnbg)}
.timeline .r>span.warn{display:block;color:var(--warn)}.timeline .r>span.bad{color:var(--bad)}
.timeline .runid,.timeline .spec{white-space:nowrap}
.timeline .runid span,.timeline .spec{font-size:11px;color:var(--muted)}
.timeline .gaphead{grid-column:1 / span 6;background:var(--badbg);color:var(--bad);
font-weight:600}
.timeline .gap.unexplained{background:var(--badbg);color:var(--bad);
box-shadow:inset 0 0 0 2px var(--bad)}
.timeline .gap.explained{background:var(--amberbg);color:var(--amber);
box-shadow:inset 0 0 0 2px var(--amber)}
.timeline .gap{font-size:11px}.timeline .gap::first-line{font-size:13px;font-weight:600}
.known li{margin:3px 0}
</style></head><body>"""
