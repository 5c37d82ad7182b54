"""The timeline of the HTML report: Dask spans and task groups over time, inline SVG.

Row 0 is the critical path; then the spans in tree order, each followed by the task
groups that ran directly in it; then the groups of no drawn span. Large workflows stay
readable and small: a task group is one row, drawn task by task while it has at most
``_EXACT_TASKS`` tasks and as a heat strip of its concurrency beyond, and the rows are
capped, saying how many were left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from otel_spans.analysis.model import SpanTimes, TaskRun, Workflow
from otel_spans.analysis.workflow import Analysis
from otel_spans.report.markup import anchor, colour, escape, seconds, short

#: Page width and its label column (SVG user units), shared by the report's charts.
WIDTH = 1100
LABEL_W = 300
CHART_W = WIDTH - LABEL_W - 20
_ROW_H = 20
_AXIS_H = 24
_BINS = 160
#: Groups with at most this many tasks are drawn task by task instead of as a heat strip.
_EXACT_TASKS = 40
_HEAT_LEVELS = 6
#: Critical path steps drawn at most.
_MAX_STEPS = 2000


@dataclass(frozen=True, slots=True)
class Scale:
    """Maps epoch nanoseconds to x pixels in the chart area."""

    t0: int
    t1: int

    @classmethod
    def of(cls, workflow: Workflow, spans: Sequence[SpanTimes]) -> Scale:
        t0, t1 = workflow.start_ns, workflow.end_ns
        if workflow.tasks:
            t0 = min(t0, min(t.start_ns for t in workflow.tasks))
            t1 = max(t1, max(t.end_ns for t in workflow.tasks))
        for _, start, end in spans:
            t0, t1 = min(t0, start), max(t1, end)
        return cls(t0, max(t1, t0 + 1))

    def x(self, ns: int) -> float:
        return LABEL_W + (ns - self.t0) / (self.t1 - self.t0) * CHART_W

    def offset(self, ns: int) -> str:
        return "+" + seconds((ns - self.t0) / 1e9)


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


def _groups(tasks: Sequence[TaskRun], scale: Scale, limit: int) -> tuple[list[_GroupRow], int]:
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


def _fill_bins(groups: dict[str, _GroupRow], tasks: Iterable[TaskRun], scale: Scale) -> None:
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


def _axis(scale: Scale, height: int) -> list[str]:
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
            f'<text class="tick" x="{x:.1f}" y="{_AXIS_H - 8}">{seconds(tick)}</text>'
        )
        tick = round(tick + step, 12)
    return out


def _y(row: int) -> int:
    return _AXIS_H + row * _ROW_H


class _Rows:
    """The SVG shapes of one waterfall, row by row; built for one call, never reused."""

    def __init__(self, scale: Scale) -> None:
        self.scale = scale
        self.shapes: list[str] = []
        #: The row each drawn group is on, for the critical path's marks.
        self.group_rows: dict[str, int] = {}
        #: Dask spans whose first row carries their anchor (a span exported twice has
        #: two rows, one id).
        self.anchored: set[str] = set()

    def label(self, row: int, depth: int, text: str, note: str, cls: str) -> None:
        # ~7 px a character: leave the right-aligned note ~110 px of the label column.
        limit = (26 if note else 40) - depth * 2
        self.shapes.append(
            f'<text class="{cls}" x="{8 + depth * 12}" y="{_y(row) + 14}">'
            f"<title>{escape(text)}</title>{escape(short(text, limit))}</text>"
            f'<text class="rownote" x="{LABEL_W - 6}" y="{_y(row) + 14}">{note}</text>'
        )

    def span(self, row: int, depth: int, name: tuple[str, ...], start: int, end: int) -> None:
        self.label(row, depth, name[-1] if name else "(unnamed span)", "", "span")
        joined = "/".join(name)
        ident = ""
        if joined not in self.anchored:
            self.anchored.add(joined)
            ident = f' id="{anchor("span", joined)}"'
        x0, x1 = self.scale.x(start), self.scale.x(end)
        tip = (
            f"{escape(' / '.join(name))}: {seconds((end - start) / 1e9)},"
            f" {self.scale.offset(start)}"
        )
        self.shapes.append(
            f'<rect{ident} class="span d{min(depth, 4)}" x="{x0:.1f}" y="{_y(row) + 3}"'
            f' width="{max(x1 - x0, 1):.1f}" height="{_ROW_H - 6}"><title>{tip}</title></rect>'
        )

    def group(self, row: int, depth: int, group: _GroupRow) -> None:
        ident = "" if group.name in self.group_rows else f' id="{anchor("group", group.name)}"'
        self.group_rows[group.name] = row
        plural = "" if group.tasks == 1 else "s"
        note = f"{group.tasks:,} task{plural} · {seconds(group.compute_ns / 1e9)}"
        self.label(row, depth, group.name, note, "group")
        scale = self.scale
        x0, x1 = scale.x(group.start_ns), scale.x(group.end_ns)
        tip = (
            f"{escape(group.name)}: {group.tasks:,} tasks, {seconds(group.compute_ns / 1e9)}"
            f" compute, {scale.offset(group.start_ns)} to {scale.offset(group.end_ns)}"
            + (f", {group.erred} erred" if group.erred else "")
        )
        fill = colour(group.prefix)
        self.shapes.append(
            f'<rect{ident} class="extent" x="{x0:.1f}" y="{_y(row) + 4}"'
            f' width="{max(x1 - x0, 1):.1f}"'
            f' height="{_ROW_H - 8}" fill="{fill}"><title>{tip}</title></rect>'
        )
        if group.runs is not None:
            self.tasks(row, group.runs, fill)
        else:
            self.heat(row, group.bins, fill, tip)

    def tasks(self, row: int, runs: Iterable[TaskRun], fill: str) -> None:
        for task in runs:
            x0, x1 = self.scale.x(task.start_ns), self.scale.x(task.end_ns)
            self.shapes.append(
                f'<rect class="task" x="{x0:.1f}" y="{_y(row) + 3}"'
                f' width="{max(x1 - x0, 1):.1f}" height="{_ROW_H - 6}" fill="{fill}">'
                f"<title>{escape(task.key)}: {seconds(task.compute_ns / 1e9)} at"
                f" {self.scale.offset(task.start_ns)} on {escape(task.worker)}"
                f"{' (erred)' if task.state == 'erred' else ''}</title></rect>"
            )

    def heat(self, row: int, bins: Sequence[float], fill: str, tip: str) -> None:
        # Bins quantised to a few shades and runs of equal shade merged: fewer shapes,
        # no seams between neighbouring bins.
        peak = max(bins, default=0) or 1
        levels = [math.ceil(value / peak * _HEAT_LEVELS) for value in bins] + [0]
        bin_w = CHART_W / _BINS
        first = 0
        for i in range(1, len(levels)):
            if levels[i] != levels[first]:
                if levels[first] > 0:
                    self.shapes.append(
                        f'<rect class="heat" x="{LABEL_W + first * bin_w:.1f}"'
                        f' y="{_y(row) + 3}" width="{(i - first) * bin_w:.1f}"'
                        f' height="{_ROW_H - 6}" fill="{fill}"'
                        f' fill-opacity="{0.25 + 0.75 * levels[first] / _HEAT_LEVELS:.2f}">'
                        f"<title>{tip}</title></rect>"
                    )
                first = i

    def critical_path(self, analysis: Analysis) -> None:
        """Row 0: a bar per step; a mark on the row of the step's group, if drawn."""
        for n, step in enumerate(analysis.critical_path.steps[:_MAX_STEPS]):
            task = step.task
            x0, x1 = self.scale.x(task.start_ns), self.scale.x(task.end_ns)
            tip = (
                f"{escape(task.key)} ({escape(task.prefix)}): {seconds(step.compute_s)}"
                f" at {self.scale.offset(task.start_ns)}, waited {seconds(step.wait_s)}"
            )
            width = max(x1 - x0, 1.5)
            self.shapes.append(
                f'<rect class="cp" id="cp-{n}" x="{x0:.1f}" y="{_y(0) + 2}" width="{width:.1f}"'
                f' height="{_ROW_H - 4}"><title>{tip}</title></rect>'
            )
            group_row = self.group_rows.get(task.group)
            if group_row is not None:
                self.shapes.append(
                    f'<rect class="cp-mark" x="{x0:.1f}" y="{_y(group_row) + 1}"'
                    f' width="{width:.1f}"'
                    f' height="{_ROW_H - 2}"><title>{tip}</title></rect>'
                )


def section(
    workflow: Workflow,
    analysis: Analysis,
    spans: Sequence[SpanTimes],
    scale: Scale,
    max_groups: int,
    max_spans: int,
) -> str:
    """The "Timeline" section: at most ``max_spans`` span rows (the first in tree
    order) and ``max_groups`` group rows (the most compute time)."""
    groups, groups_left = _groups(workflow.tasks, scale, max_groups)
    order = _span_order(spans)
    spans_left = max(0, len(order) - max_spans)
    order = order[:max_spans]
    drawn_spans = {spans[i][0] for i, _ in order}
    under: dict[tuple[str, ...], list[_GroupRow]] = {}
    for group in sorted(groups, key=lambda g: (g.start_ns, g.name)):
        span = group.span if group.span in drawn_spans else ()
        under.setdefault(span, []).append(group)

    rows = _Rows(scale)
    rows.shapes.append(f'<text class="critical-label" x="8" y="{_y(0) + 14}">critical path</text>')
    row = 1
    for i, depth in order:
        name, start, end = spans[i]
        rows.span(row, depth, name, start, end)
        row += 1
        for group in under.pop(name, []):
            rows.group(row, min(depth + 1, 6), group)
            row += 1
    for members in under.values():
        for group in members:
            rows.group(row, 0, group)
            row += 1
    rows.critical_path(analysis)

    height = _y(row) + 6
    notes = []
    if spans_left:
        notes.append(f"{spans_left:,} more spans not shown")
    if groups_left:
        notes.append(f"{groups_left:,} smaller task groups not shown")
    note = f'<p class="note">{"; ".join(notes)}.</p>' if notes else ""
    svg = (
        f'<svg id="waterfall-svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}"'
        f' height="{height}" role="img" aria-label="timeline of spans and task groups"'
        f' data-x0="{LABEL_W}" data-w="{CHART_W}" data-seconds="{(scale.t1 - scale.t0) / 1e9}">'
        + "".join(_axis(scale, height))
        + "".join(rows.shapes)
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
