"""A workflow report as one self-contained HTML page.

The page must open from a file, an e-mail attachment or an air-gapped cluster, so
everything is inline: CSS, a little JavaScript (table sorting, a time cursor) and SVG
charts; there is no network reference of any kind. Every string that came from the
workflow (span names, keys, worker addresses) is escaped, with control characters made
visible and lone surrogates replaced, and no such string ever reaches the script: the
script only reads the DOM.

Large workflows stay readable and small: the waterfall draws task groups as one row
each with a heat strip of their concurrency (not one shape per task), and rows and
table lengths are capped, saying how many were left out.
"""

from __future__ import annotations

import functools
import html
import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources

from otel_spans.analysis.model import SpanTimes, TaskRun, Workflow
from otel_spans.analysis.workflow import Analysis
from otel_spans.report import flame, graph
from otel_spans.report.load import LoadedProfile

_WIDTH = 1100
_LABEL_W = 300
_CHART_W = _WIDTH - _LABEL_W - 20
_ROW_H = 20
_AXIS_H = 24
_BINS = 160
#: Groups with at most this many tasks are drawn task by task instead of as a heat strip.
_EXACT_TASKS = 40
_HEAT_LEVELS = 6
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
    """
    spans = list(spans)
    scale = _Scale.of(workflow, spans)
    parts = [
        _header(workflow, analysis),
        _waterfall(workflow, analysis, spans, scale, max_groups, max_spans),
        _critical_path(analysis, scale, max_path_rows, granularity),
        graph.section(workflow.tasks, analysis, _esc),
        _activity(analysis),
        _bottlenecks(analysis, max_rows),
        _stragglers(analysis, scale, max_rows),
        flame.section(profiles, _esc),
    ]
    title = _esc(workflow.name) or "workflow"
    style, script = _assets()
    return _PAGE.format(title=title, style=style, body="\n".join(parts), script=script)


# -- text ---------------------------------------------------------------------------

#: C0 controls and DEL shown as their Unicode control pictures, C1 controls as U+FFFD:
#: visible in the page, and not the parse errors raw controls are in HTML.
_CONTROLS = {c: 0x2400 + c for c in range(0x20)} | {0x7F: 0x2421}
_CONTROLS |= {c: 0xFFFD for c in range(0x80, 0xA0)}


def _esc(value: str) -> str:
    """``value`` as HTML text or attribute content."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return html.escape(value.translate(_CONTROLS), quote=True)


def _short(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _seconds(value: float) -> str:
    """A duration for people: 3 significant digits, unit chosen by size."""
    if value < 0:
        return "−" + _seconds(-value)
    if value == 0:
        return "0 s"
    # Thresholds just below each unit, so that rounding to 3 digits never shows 1e+03.
    if value < 0.9995e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 0.9995:
        return f"{value * 1e3:.3g} ms"
    if value < 99.5:
        return f"{value:.3g} s"
    whole = round(value)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f} %"


def _colour(name: str) -> str:
    """A stable colour per prefix: the same prefix looks the same in every report."""
    return f"hsl({zlib.crc32(name.encode('utf-8', 'surrogatepass')) % 360}, 55%, 55%)"


# -- layout -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Scale:
    """Maps epoch nanoseconds to x pixels in the chart area."""

    t0: int
    t1: int

    @classmethod
    def of(cls, workflow: Workflow, spans: Sequence[SpanTimes]) -> _Scale:
        t0, t1 = workflow.start_ns, workflow.end_ns
        if workflow.tasks:
            t0 = min(t0, min(t.start_ns for t in workflow.tasks))
            t1 = max(t1, max(t.end_ns for t in workflow.tasks))
        for _, start, end in spans:
            t0, t1 = min(t0, start), max(t1, end)
        return cls(t0, max(t1, t0 + 1))

    def x(self, ns: int) -> float:
        return _LABEL_W + (ns - self.t0) / (self.t1 - self.t0) * _CHART_W

    def offset(self, ns: int) -> str:
        return "+" + _seconds((ns - self.t0) / 1e9)


@dataclass(slots=True)
class _GroupRow:
    name: str
    prefix: str
    span: tuple[str, ...]
    start_ns: int
    end_ns: int
    tasks: int = 0
    compute_ns: int = 0
    erred: int = 0
    #: Its tasks while there are at most ``_EXACT_TASKS``; ``None`` beyond.
    runs: list[TaskRun] | None = field(default_factory=list)
    #: Mean concurrent tasks per time bin (filled for drawn groups of many tasks only).
    bins: list[float] = field(default_factory=list)


def _groups(tasks: Sequence[TaskRun], scale: _Scale, limit: int) -> tuple[list[_GroupRow], int]:
    """The ``limit`` groups with the most compute time, and how many were left out."""
    groups: dict[str, _GroupRow] = {}
    for task in tasks:
        group = groups.get(task.group)
        if group is None:
            group = groups[task.group] = _GroupRow(
                task.group, task.prefix, task.span_name, task.start_ns, task.end_ns
            )
        group.start_ns = min(group.start_ns, task.start_ns)
        group.end_ns = max(group.end_ns, task.end_ns)
        group.tasks += task.count
        group.compute_ns += task.compute_ns
        group.erred += task.state == "erred"
        if group.runs is not None:
            group.runs.append(task)
            if len(group.runs) > _EXACT_TASKS:
                group.runs = None
    kept = sorted(groups.values(), key=lambda g: (-g.compute_ns, g.name))[:limit]
    _fill_bins({g.name: g for g in kept if g.runs is None}, tasks, scale)
    return kept, len(groups) - len(kept)


def _fill_bins(groups: dict[str, _GroupRow], tasks: Iterable[TaskRun], scale: _Scale) -> None:
    """Mean concurrency per bin, ``O(1)`` per task: partial end bins are added directly,
    the full bins between them through a difference array."""
    width = (scale.t1 - scale.t0) / _BINS
    partial = {name: [0.0] * (_BINS + 1) for name in groups}
    diff = {name: [0] * (_BINS + 1) for name in groups}
    for task in tasks:
        cover = partial.get(task.group)
        if cover is None:
            continue
        a = (task.start_ns - scale.t0) / width
        b = (task.end_ns - scale.t0) / width
        ia, ib = min(int(a), _BINS - 1), min(int(b), _BINS)
        if ia == ib or (ib == _BINS and ia == _BINS - 1):
            cover[ia] += b - a
            continue
        cover[ia] += ia + 1 - a
        cover[ib] += b - ib
        diff[task.group][ia + 1] += 1
        diff[task.group][ib] -= 1
    for name, group in groups.items():
        running = 0
        group.bins = []
        for i in range(_BINS):
            running += diff[name][i]
            group.bins.append(running + partial[name][i])


def _span_order(spans: Sequence[SpanTimes]) -> list[tuple[int, int]]:
    """``(index, depth)`` of each span in tree order, children by start time.

    Iterative, so a deep span tree cannot exhaust the stack; a span whose parent is
    missing is drawn as a root.
    """
    names = {span[0] for span in spans}
    children: dict[tuple[str, ...], list[int]] = {}
    for i, (name, _, _) in enumerate(spans):
        parent = name[:-1] if name[:-1] in names else ()
        children.setdefault(parent, []).append(i)
    for members in children.values():
        members.sort(key=lambda i: (spans[i][1], spans[i][0]), reverse=True)
    order: list[tuple[int, int]] = []
    stack = [(i, 0) for i in children.get((), [])]
    seen: set[tuple[str, ...]] = set()
    while stack:
        i, depth = stack.pop()
        order.append((i, depth))
        name = spans[i][0]
        if name and name not in seen:
            seen.add(name)
            stack.extend((c, depth + 1) for c in children.get(name, []) if c != i)
    return order


# -- sections -----------------------------------------------------------------------


def _header(workflow: Workflow, analysis: Analysis) -> str:
    eff, path = analysis.efficiency, analysis.critical_path
    speedup = "n/a" if eff.speedup is None else f"{eff.speedup:.2f}×"
    idle = "n/a" if eff.idle_s is None else _seconds(eff.idle_s)
    of_wall = f"{path.length_s / path.wall_s * 100:.0f} % of wall, " if path.wall_s else ""
    of_wall += f"{len(path.steps):,} nodes"
    cards = [
        ("Wall time", _seconds(eff.wall_s), f"{workflow.task_count:,} tasks"),
        ("Parallel efficiency", _percent(eff.efficiency), f"idle {idle} ({eff.basis})"),
        ("Speedup", speedup, f"peak {eff.peak_threads} threads"),
        ("Critical path", _seconds(path.length_s), of_wall),
        ("Sequential time", _seconds(eff.sequential_s), "sum of task compute"),
    ]
    items = "".join(
        f'<div class="card"><div class="label">{label}</div>'
        f'<div class="value">{value}</div><div class="note">{note}</div></div>'
        for label, value, note in cards
    )
    return (
        f'<header><h1 id="title">{_esc(workflow.name)}</h1>'
        f'<p class="sub">otel-spans workflow report</p><div class="cards">{items}</div></header>'
    )


def _axis(scale: _Scale, height: int) -> list[str]:
    span_s = (scale.t1 - scale.t0) / 1e9
    raw = span_s / 8
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    out = []
    tick = 0.0
    while tick <= span_s * 1.0001:
        x = scale.x(scale.t0 + round(tick * 1e9))
        out.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{_AXIS_H - 4}" y2="{height}"/>'
            f'<text class="tick" x="{x:.1f}" y="{_AXIS_H - 8}">{_seconds(tick)}</text>'
        )
        tick = round(tick + step, 12)
    return out


def _waterfall(
    workflow: Workflow,
    analysis: Analysis,
    spans: Sequence[SpanTimes],
    scale: _Scale,
    max_groups: int,
    max_spans: int,
) -> str:
    groups, groups_left = _groups(workflow.tasks, scale, max_groups)
    order = _span_order(spans)
    spans_left = max(0, len(order) - max_spans)
    order = order[:max_spans]
    drawn_spans = {spans[i][0] for i, _ in order}
    under: dict[tuple[str, ...], list[_GroupRow]] = {}
    for group in sorted(groups, key=lambda g: (g.start_ns, g.name)):
        span = group.span if group.span in drawn_spans else ()
        under.setdefault(span, []).append(group)

    rows: list[str] = []
    group_rows: dict[str, int] = {}

    def y(row: int) -> int:
        return _AXIS_H + row * _ROW_H

    def label(row: int, depth: int, text: str, note: str, cls: str) -> None:
        # ~7 px a character: leave the right-aligned note ~110 px of the label column.
        limit = (26 if note else 40) - depth * 2
        rows.append(
            f'<text class="{cls}" x="{8 + depth * 12}" y="{y(row) + 14}">'
            f"<title>{_esc(text)}</title>{_esc(_short(text, limit))}</text>"
            f'<text class="rownote" x="{_LABEL_W - 6}" y="{y(row) + 14}">{note}</text>'
        )

    def span_row(row: int, depth: int, name: tuple[str, ...], start: int, end: int) -> None:
        label(row, depth, name[-1] if name else "(unnamed span)", "", "span")
        x0, x1 = scale.x(start), scale.x(end)
        tip = f"{_esc(' / '.join(name))}: {_seconds((end - start) / 1e9)}, {scale.offset(start)}"
        rows.append(
            f'<rect class="span d{min(depth, 4)}" x="{x0:.1f}" y="{y(row) + 3}"'
            f' width="{max(x1 - x0, 1):.1f}" height="{_ROW_H - 6}"><title>{tip}</title></rect>'
        )

    def group_row(row: int, depth: int, group: _GroupRow) -> None:
        group_rows[group.name] = row
        plural = "" if group.tasks == 1 else "s"
        note = f"{group.tasks:,} task{plural} · {_seconds(group.compute_ns / 1e9)}"
        label(row, depth, group.name, note, "group")
        x0, x1 = scale.x(group.start_ns), scale.x(group.end_ns)
        tip = (
            f"{_esc(group.name)}: {group.tasks:,} tasks, {_seconds(group.compute_ns / 1e9)}"
            f" compute, {scale.offset(group.start_ns)} to {scale.offset(group.end_ns)}"
            + (f", {group.erred} erred" if group.erred else "")
        )
        colour = _colour(group.prefix)
        rows.append(
            f'<rect class="extent" x="{x0:.1f}" y="{y(row) + 4}" width="{max(x1 - x0, 1):.1f}"'
            f' height="{_ROW_H - 8}" fill="{colour}"><title>{tip}</title></rect>'
        )
        if group.runs is not None:
            for task in group.runs:
                x0, x1 = scale.x(task.start_ns), scale.x(task.end_ns)
                rows.append(
                    f'<rect class="task" x="{x0:.1f}" y="{y(row) + 3}"'
                    f' width="{max(x1 - x0, 1):.1f}" height="{_ROW_H - 6}" fill="{colour}">'
                    f"<title>{_esc(task.key)}: {_seconds(task.compute_ns / 1e9)} at"
                    f" {scale.offset(task.start_ns)} on {_esc(task.worker)}"
                    f"{' (erred)' if task.state == 'erred' else ''}</title></rect>"
                )
            return
        # Bins quantised to a few shades and runs of equal shade merged: fewer shapes,
        # no seams between neighbouring bins.
        peak = max(group.bins, default=0) or 1
        levels = [math.ceil(value / peak * _HEAT_LEVELS) for value in group.bins] + [0]
        bin_w = _CHART_W / _BINS
        first = 0
        for i in range(1, len(levels)):
            if levels[i] != levels[first]:
                if levels[first] > 0:
                    rows.append(
                        f'<rect class="heat" x="{_LABEL_W + first * bin_w:.1f}"'
                        f' y="{y(row) + 3}" width="{(i - first) * bin_w:.1f}"'
                        f' height="{_ROW_H - 6}" fill="{colour}"'
                        f' fill-opacity="{0.25 + 0.75 * levels[first] / _HEAT_LEVELS:.2f}">'
                        f"<title>{tip}</title></rect>"
                    )
                first = i

    # Row 0 is the critical path; then spans in tree order, each followed by the task
    # groups that ran directly in it; then groups of no drawn span.
    rows.append(f'<text class="critical-label" x="8" y="{y(0) + 14}">critical path</text>')
    row = 1
    for i, depth in order:
        name, start, end = spans[i]
        span_row(row, depth, name, start, end)
        row += 1
        for group in under.pop(name, []):
            group_row(row, min(depth + 1, 6), group)
            row += 1
    for members in under.values():
        for group in members:
            group_row(row, 0, group)
            row += 1

    steps = analysis.critical_path.steps
    for n, step in enumerate(steps[:2000]):
        task = step.task
        x0, x1 = scale.x(task.start_ns), scale.x(task.end_ns)
        tip = (
            f"{_esc(task.key)} ({_esc(task.prefix)}): {_seconds(step.compute_s)}"
            f" at {scale.offset(task.start_ns)}, waited {_seconds(step.wait_s)}"
        )
        width = max(x1 - x0, 1.5)
        rows.append(
            f'<rect class="cp" id="cp-{n}" x="{x0:.1f}" y="{y(0) + 2}" width="{width:.1f}"'
            f' height="{_ROW_H - 4}"><title>{tip}</title></rect>'
        )
        group_row_of_task = group_rows.get(task.group)
        if group_row_of_task is not None:
            rows.append(
                f'<rect class="cp-mark" x="{x0:.1f}" y="{y(group_row_of_task) + 1}"'
                f' width="{width:.1f}"'
                f' height="{_ROW_H - 2}"><title>{tip}</title></rect>'
            )

    height = y(row) + 6
    notes = []
    if spans_left:
        notes.append(f"{spans_left:,} more spans not shown")
    if groups_left:
        notes.append(f"{groups_left:,} smaller task groups not shown")
    note = f'<p class="note">{"; ".join(notes)}.</p>' if notes else ""
    svg = (
        f'<svg id="waterfall-svg" viewBox="0 0 {_WIDTH} {height}" width="{_WIDTH}"'
        f' height="{height}" role="img" aria-label="timeline of spans and task groups"'
        f' data-x0="{_LABEL_W}" data-w="{_CHART_W}" data-seconds="{(scale.t1 - scale.t0) / 1e9}">'
        + "".join(_axis(scale, height))
        + "".join(rows)
        + f'<line id="cursor" x1="0" x2="0" y1="{_AXIS_H}" y2="{height}" visibility="hidden"/>'
        f'<text id="cursor-label" x="0" y="{_AXIS_H + 12}" visibility="hidden"></text>'
        "</svg>"
    )
    legend = (
        '<p class="legend"><span class="swatch cp"></span>critical path task '
        '<span class="swatch span"></span>Dask span '
        '<span class="swatch heat"></span>task group (darker = more tasks running)</p>'
    )
    return (
        f'<section id="waterfall"><h2>Timeline</h2>{legend}'
        f'<div class="scroll">{svg}</div>{note}</section>'
    )


def _bar(share: float, colour: str = "#4c78a8") -> str:
    width = max(0.0, min(share, 1.0)) * 100
    return (
        f'<span class="bar"><span style="width:{width:.1f}%;background:{colour}"></span></span>'
        f"{_percent(share)}"
    )


#: A table cell: its class (``"num"``, ``"name"`` or ``""``) and its HTML.
_Cell = tuple[str, str]


def _table(
    headers: Sequence[_Cell], rows: Iterable[Sequence[_Cell]], *, row_attrs: Sequence[str] = ()
) -> str:
    """A sortable table; header and cell HTML must already be escaped."""
    head = "".join(f'<th class="{cls}">{text}</th>' for cls, text in headers)
    body = []
    for n, cells in enumerate(rows):
        attrs = row_attrs[n] if n < len(row_attrs) else ""
        tds = "".join(f'<td class="{cls}">{text}</td>' for cls, text in cells)
        body.append(f"<tr{attrs}>{tds}</tr>")
    return (
        f'<table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _more(count: int, what: str) -> str:
    return f'<p class="note">{count:,} more {what} not shown.</p>' if count > 0 else ""


def _critical_path(analysis: Analysis, scale: _Scale, max_rows: int, granularity: str) -> str:
    path = analysis.critical_path
    if not path.steps:
        return '<section id="critical-path"><h2>Critical path</h2><p>No tasks ran.</p></section>'
    steps_are = granularity.removesuffix("s") if len(path.steps) == 1 else granularity
    summary = (
        f"<p>{len(path.steps):,} {steps_are}, {_seconds(path.length_s)} long "
        f"({_seconds(path.compute_s)} compute, {_seconds(path.transfer_s)} transfers) "
        f"in {_seconds(path.wall_s)} of wall time; {_seconds(path.gap_s)} waiting: "
        f"{_seconds(path.client_s)} on the client between a result and the next "
        f"submission, {_seconds(path.scheduling_s)} scheduling and queueing, "
        f"{_seconds(path.tail_s)} after the last task.</p>"
    )
    shares = [
        [
            ("name", _esc(s.name)),
            ("num", f"{s.tasks:,}"),
            ("num", _seconds(s.seconds)),
            ("", _bar(s.share, _colour(s.name))),
        ]
        for s in path.prefixes[:max_rows]
    ]
    if path.transfer_s:
        share = path.transfer_s / path.length_s
        shares.append(
            [
                ("name", "<em>transfers</em>"),
                ("num", ""),
                ("num", _seconds(path.transfer_s)),
                ("", _bar(share, "#999")),
            ]
        )
    steps = [
        [
            ("num", str(n + 1)),
            ("name", _esc(step.task.key)),
            ("name", _esc(step.task.prefix)),
            ("name", _esc(step.task.worker)),
            ("num", scale.offset(step.task.start_ns)),
            ("num", _seconds(step.wait_s)),
            ("num", _seconds(step.transfer_s)),
            ("num", _seconds(step.compute_s)),
        ]
        for n, step in enumerate(path.steps[:max_rows])
    ]
    return (
        f'<section id="critical-path"><h2>Critical path</h2>{summary}'
        "<h3>Share of the path by prefix</h3>"
        + _table(
            [("", "prefix"), ("num", granularity), ("num", "time"), ("", "share of path")],
            shares,
        )
        + "<h3>Steps</h3>"
        + _table(
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
        + _more(len(path.steps) - max_rows, "steps")
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
    bar_w = _WIDTH - _LABEL_W - 200
    rows = []
    for n, a in enumerate(activities):
        y = n * 24
        width = max(a.seconds, 0) / top * bar_w
        rows.append(
            f'<text class="group" x="{_LABEL_W - 10}" y="{y + 16}" text-anchor="end">'
            f"{_esc(_short(a.name, 40))}</text>"
            f'<rect class="activity" x="{_LABEL_W}" y="{y + 4}" width="{width:.1f}" height="16"'
            f' fill="{_colour(a.name)}"><title>{_esc(a.name)}</title></rect>'
            f'<text class="value" x="{_LABEL_W + width + 6:.1f}" y="{y + 16}">'
            f"{_seconds(a.seconds)} · {_percent(a.share)}</text>"
        )
    height = len(activities) * 24 + 6
    return (
        '<section id="activity"><h2>Where the time went</h2>'
        '<p class="note">Time by activity from the workers\' fine performance metrics.</p>'
        f'<svg viewBox="0 0 {_WIDTH} {height}" width="{_WIDTH}" height="{height}" role="img"'
        f' aria-label="activity breakdown">{"".join(rows)}</svg></section>'
    )


def _bottlenecks(analysis: Analysis, max_rows: int) -> str:
    if not analysis.bottlenecks:
        return ""
    rows = [
        [
            ("name", _esc(b.prefix)),
            ("num", f"{b.tasks:,}"),
            ("num", _seconds(b.seconds)),
            ("", _bar(b.share, _colour(b.prefix))),
            ("num", _seconds(b.critical_seconds)),
            ("", _bar(b.critical_share, _CRITICAL)),
            ("num", _percent(b.wall_share)),
            ("num", _seconds(b.median_s)),
            ("num", _seconds(b.max_s)),
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
        + _table(headers, rows)
        + _more(len(analysis.bottlenecks) - max_rows, "prefixes")
        + "</section>"
    )


def _stragglers(analysis: Analysis, scale: _Scale, max_rows: int) -> str:
    found = analysis.stragglers
    if not found:
        return (
            '<section id="stragglers"><h2>Stragglers</h2>'
            "<p>No task ran much longer than its prefix's median.</p></section>"
        )
    rows = [
        [
            ("name", _esc(s.task.key)),
            ("name", _esc(s.task.prefix)),
            ("name", _esc(s.task.worker)),
            ("num", scale.offset(s.task.start_ns)),
            ("num", _seconds(s.seconds)),
            ("num", _seconds(s.median_s)),
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
        + _table(headers, rows)
        + _more(len(found) - max_rows, "stragglers")
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
