"""A workflow report as one self-contained HTML page.

The page must open from a file, an e-mail attachment or an air-gapped cluster, so
everything is inline: CSS, a little JavaScript (table sorting, a time cursor) and SVG
charts; there is no network reference of any kind. Every string that came from the
workflow (span names, keys, worker addresses) is escaped (:func:`markup.escape`:
control characters made visible, lone surrogates replaced), and no such string ever
reaches the script: the script only reads the DOM.

The sections with a drawing of their own have a module each: the timeline
(:mod:`.waterfall`), the task-group graph (:mod:`.graph`) and the flame graphs
(:mod:`.flame`); the tables and cards are here. Table lengths are capped, saying how
many rows were left out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from importlib import resources

from otel_spans.analysis.model import SpanTimes, Workflow
from otel_spans.analysis.workflow import Analysis
from otel_spans.records import Finding
from otel_spans.report import flame, graph, memory, waterfall
from otel_spans.report.load import LoadedProfile
from otel_spans.report.markup import (
    anchor,
    bar,
    colour,
    escape,
    more,
    percent,
    seconds,
    short,
    table,
)
from otel_spans.report.waterfall import LABEL_W, WIDTH, Scale

_CRITICAL = "#d62728"


def render(
    workflow: Workflow,
    analysis: Analysis,
    spans: Iterable[SpanTimes] = (),
    *,
    max_groups: int = 80,
    max_spans: int = 150,
    max_rows: int = 25,
    max_path_rows: int = 300,
    granularity: str = "tasks",
    profiles: Sequence[LoadedProfile] = (),
    memory_evidence: memory.MemoryEvidence | None = None,
    findings: Sequence[Finding] = (),
) -> str:
    """The report page for ``workflow`` and ``analyse(workflow)``.

    Parameters
    ----------
    granularity
        What the analysis's runs are: ``"tasks"``, or ``"task groups"`` when task spans
        were sampled (each run then stands for its group and its task count).
    spans
        Dask spans as ``(tags root first, start_ns, end_ns)``; task groups are drawn
        under the span their tasks ran in.
    max_groups, max_spans
        Waterfall rows: the groups with the most compute time and the first spans in
        tree order are kept.
    max_rows
        Rows of the bottleneck and straggler tables.
    max_path_rows
        Rows of the critical path table.
    profiles
        The workflow's ``dask.profile`` records (``otel-spans.profile``): flame graphs.
    memory_evidence
        What its spans and groups held, spilled, paused and lost: the memory section.
    findings
        The workflow's diagnosis (:func:`otel_spans.report.diagnose.findings`), each
        linked to its group's or span's row in the timeline and node in the graph.
    """
    spans = list(spans)
    scale = Scale.of(workflow, spans)
    parts = [
        _header(workflow, analysis),
        _diagnosis(findings),
        waterfall.section(workflow, analysis, spans, scale, max_groups, max_spans),
        _critical_path(analysis, scale, max_path_rows, granularity),
        graph.section(workflow.tasks, analysis),
        _activity(analysis),
        _bottlenecks(analysis, max_rows),
        _stragglers(analysis, scale, max_rows),
        *([memory.section(memory_evidence)] if memory_evidence is not None else []),
        flame.section(profiles),
    ]
    title = escape(workflow.name) or "workflow"
    style, script = _assets()
    return _PAGE.format(title=title, style=style, body="\n".join(parts), script=script)


# -- sections -----------------------------------------------------------------------


def _header(workflow: Workflow, analysis: Analysis) -> str:
    eff, path = analysis.efficiency, analysis.critical_path
    speedup = "n/a" if eff.speedup is None else f"{eff.speedup:.2f}×"
    idle = "n/a" if eff.idle_s is None else seconds(eff.idle_s)
    of_wall = f"{path.length_s / path.wall_s * 100:.0f} % of wall, " if path.wall_s else ""
    of_wall += f"{len(path.steps):,} nodes"
    cards = [
        ("Wall time", seconds(eff.wall_s), f"{workflow.task_count:,} tasks"),
        ("Parallel efficiency", percent(eff.efficiency), f"idle {idle} ({eff.basis})"),
        ("Speedup", speedup, f"peak {eff.peak_threads} threads"),
        ("Critical path", seconds(path.length_s), of_wall),
        ("Sequential time", seconds(eff.sequential_s), "sum of task compute"),
    ]
    items = "".join(
        f'<div class="card"><div class="label">{label}</div>'
        f'<div class="value">{value}</div><div class="note">{note}</div></div>'
        for label, value, note in cards
    )
    return (
        f'<header><h1 id="title">{escape(workflow.name)}</h1>'
        f'<p class="sub">otel-spans workflow report</p><div class="cards">{items}</div></header>'
    )


def _diagnosis(findings: Sequence[Finding]) -> str:
    if not findings:
        return (
            '<section id="diagnosis"><h2>Diagnosis</h2><p>Nothing found: no rule explains'
            " 5 % or more of the wall time.</p></section>"
        )
    items = []
    for f in findings:
        if f.subject_kind == "group":
            where = (
                f'<a href="#{anchor("group", f.subject)}">timeline</a> · '
                f'<a href="#{anchor("node", f.subject)}">graph</a>'
            )
        elif f.subject_kind == "span":
            where = f'<a href="#{anchor("span", f.subject)}">timeline</a>'
        else:
            where = '<a href="#waterfall">timeline</a>'
        numbers = ", ".join(f"{escape(k)} = {escape(str(v))}" for k, v in f.evidence)
        items.append(
            f'<li class="finding {escape(f.severity)}"><b>{escape(f.id)}</b>'
            f' <span class="severity">{escape(f.severity)}</span>'
            f" {percent(f.share)} of the wall time, {escape(f.subject_kind)}"
            f" <code>{escape(short(f.subject, 80))}</code> ({where})"
            f'<div class="note">{numbers}</div><div>{escape(f.advice)}</div></li>'
        )
    return (
        '<section id="diagnosis"><h2>Diagnosis</h2>'
        '<p class="note">Why it took this long, most severe first; shares of the wall time'
        f" are never counted twice.</p><ol>{''.join(items)}</ol></section>"
    )


def _critical_path(analysis: Analysis, scale: Scale, max_rows: int, granularity: str) -> str:
    path = analysis.critical_path
    if not path.steps:
        return '<section id="critical-path"><h2>Critical path</h2><p>No tasks ran.</p></section>'
    steps_are = granularity.removesuffix("s") if len(path.steps) == 1 else granularity
    summary = (
        f"<p>{len(path.steps):,} {steps_are}, {seconds(path.length_s)} long "
        f"({seconds(path.compute_s)} compute, {seconds(path.transfer_s)} transfers) "
        f"in {seconds(path.wall_s)} of wall time; {seconds(path.gap_s)} waiting: "
        f"{seconds(path.client_s)} on the client between a result and the next "
        f"submission, {seconds(path.scheduling_s)} scheduling and queueing, "
        f"{seconds(path.tail_s)} after the last task.</p>"
    )
    shares = [
        [
            ("name", escape(s.name)),
            ("num", f"{s.tasks:,}"),
            ("num", seconds(s.seconds)),
            ("", bar(s.share, colour(s.name))),
        ]
        for s in path.prefixes[:max_rows]
    ]
    if path.transfer_s:
        share = path.transfer_s / path.length_s
        shares.append(
            [
                ("name", "<em>transfers</em>"),
                ("num", ""),
                ("num", seconds(path.transfer_s)),
                ("", bar(share, "#999")),
            ]
        )
    steps = [
        [
            ("num", str(n + 1)),
            ("name", escape(step.task.key)),
            ("name", escape(step.task.prefix)),
            ("name", escape(step.task.worker)),
            ("num", scale.offset(step.task.start_ns)),
            ("num", seconds(step.wait_s)),
            ("num", seconds(step.transfer_s)),
            ("num", seconds(step.compute_s)),
        ]
        for n, step in enumerate(path.steps[:max_rows])
    ]
    return (
        f'<section id="critical-path"><h2>Critical path</h2>{summary}'
        "<h3>Share of the path by prefix</h3>"
        + table(
            [("", "prefix"), ("num", granularity), ("num", "time"), ("", "share of path")],
            shares,
        )
        + "<h3>Steps</h3>"
        + table(
            [
                ("num", "#"),
                ("", "key"),
                ("", "prefix"),
                ("", "worker"),
                ("num", "start"),
                ("num", "waited"),
                ("num", "transfer"),
                ("num", "compute"),
            ],
            steps,
            row_attrs=[f' data-cp="{n}"' for n in range(len(steps))],
        )
        + more(len(path.steps) - max_rows, "steps")
        + "</section>"
    )


def _activity(analysis: Analysis) -> str:
    activities = analysis.activities
    if not activities:
        return (
            '<section id="activity"><h2>Where the time went</h2>'
            "<p>No worker activity metrics were recorded.</p></section>"
        )
    top = max(a.seconds for a in activities) or 1
    bar_w = WIDTH - LABEL_W - 200
    rows = []
    for n, a in enumerate(activities):
        y = n * 24
        width = max(a.seconds, 0) / top * bar_w
        rows.append(
            f'<text class="group" x="{LABEL_W - 10}" y="{y + 16}" text-anchor="end">'
            f"{escape(short(a.name, 40))}</text>"
            f'<rect class="activity" x="{LABEL_W}" y="{y + 4}" width="{width:.1f}" height="16"'
            f' fill="{colour(a.name)}"><title>{escape(a.name)}</title></rect>'
            f'<text class="value" x="{LABEL_W + width + 6:.1f}" y="{y + 16}">'
            f"{seconds(a.seconds)} · {percent(a.share)}</text>"
        )
    height = len(activities) * 24 + 6
    return (
        '<section id="activity"><h2>Where the time went</h2>'
        '<p class="note">Time by activity from the workers\' fine performance metrics.</p>'
        f'<svg viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img"'
        f' aria-label="activity breakdown">{"".join(rows)}</svg></section>'
    )


def _bottlenecks(analysis: Analysis, max_rows: int) -> str:
    if not analysis.bottlenecks:
        return ""
    rows = [
        [
            ("name", escape(b.prefix)),
            ("num", f"{b.tasks:,}"),
            ("num", seconds(b.seconds)),
            ("", bar(b.share, colour(b.prefix))),
            ("num", seconds(b.critical_seconds)),
            ("", bar(b.critical_share, _CRITICAL)),
            ("num", percent(b.wall_share)),
            ("num", seconds(b.median_s)),
            ("num", seconds(b.max_s)),
        ]
        for b in analysis.bottlenecks[:max_rows]
    ]
    headers = [
        ("", "prefix"),
        ("num", "tasks"),
        ("num", "compute"),
        ("", "share of compute"),
        ("num", "on critical path"),
        ("", "share of path"),
        ("num", "of wall time"),
        ("num", "median"),
        ("num", "max"),
    ]
    return (
        '<section id="bottlenecks"><h2>Bottlenecks</h2>'
        + table(headers, rows)
        + more(len(analysis.bottlenecks) - max_rows, "prefixes")
        + "</section>"
    )


def _stragglers(analysis: Analysis, scale: Scale, max_rows: int) -> str:
    found = analysis.stragglers
    if not found:
        return (
            '<section id="stragglers"><h2>Stragglers</h2>'
            "<p>No task ran much longer than its prefix's median.</p></section>"
        )
    rows = [
        [
            ("name", escape(s.task.key)),
            ("name", escape(s.task.prefix)),
            ("name", escape(s.task.worker)),
            ("num", scale.offset(s.task.start_ns)),
            ("num", seconds(s.seconds)),
            ("num", seconds(s.median_s)),
            ("num", f"{s.ratio:.1f}×"),
        ]
        for s in found[:max_rows]
    ]
    headers = [
        ("", "key"),
        ("", "prefix"),
        ("", "worker"),
        ("num", "start"),
        ("num", "compute"),
        ("num", "prefix median"),
        ("num", "ratio"),
    ]
    return (
        '<section id="stragglers"><h2>Stragglers</h2>'
        + table(headers, rows)
        + more(len(found) - max_rows, "stragglers")
        + "</section>"
    )


@functools.cache
def _assets() -> tuple[str, str]:
    """The page's stylesheet and script, package resources inlined into every report
    (so that it opens offline)."""
    assets = resources.files("otel_spans.report") / "assets"
    return (assets / "report.css").read_text("utf-8"), (assets / "report.js").read_text("utf-8")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · otel-spans report</title>
<style>{style}</style>
</head>
<body>
{body}
<footer>Generated by otel-spans. Times are relative to the start of the timeline.</footer>
<script>{script}</script>
</body>
</html>
"""
