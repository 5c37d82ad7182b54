"""``otel-spans report --history``'s page: one self-contained HTML file, a table per
workflow with one row per stage and task group, each with a sparkline of its past runs,
the band within which a run is noise, and this run's point.

Every name is escaped by the shared escaper (:func:`markup.escape`): a span name with
markup or a lone surrogate stays text.
"""

from __future__ import annotations

from collections.abc import Iterable

from otel_spans.report import robust
from otel_spans.report.history import HistoryRow, WorkflowHistory
from otel_spans.report.markup import escape, seconds
from otel_spans.report.robust import Judgement

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 24px}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:middle}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td:first-child,td.verdict{white-space:nowrap}
tr.regressed td.verdict{color:#b00020;font-weight:600} tr.improved td.verdict{color:#1b7f3b}
tr.new td.verdict,tr.gone td.verdict{color:#6a3fb5}
td.shape{color:#6a3fb5}
svg.spark{display:block}
"""
#: Sparkline size in pixels.
_W, _H, _PAD = 140, 28, 3
_POINT = {robust.REGRESSED: "#b00020", robust.IMPROVED: "#1b7f3b"}


def sparkline(j: Judgement) -> str:
    """The past values as a line, the noise band (median ± threshold × spread) as a
    grey band, this run's value as a dot; inline SVG, no script."""
    values = list(j.history) + ([j.current] if j.current is not None else [])
    if not values:
        return ""
    low, high = min(values), max(values)
    if j.history and j.z is not None:
        low = min(low, j.median - robust.THRESHOLD * j.scale)
        high = max(high, j.median + robust.THRESHOLD * j.scale)
    span = (high - low) or 1.0
    steps = max(len(j.history), 1)

    def x(i: int) -> float:
        return _PAD + (_W - 2 * _PAD) * i / steps

    def y(v: float) -> float:
        return _H - _PAD - (_H - 2 * _PAD) * (v - low) / span

    parts = [f'<svg class="spark" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}">']
    if j.history and j.z is not None:
        top, bottom = (
            y(j.median + robust.THRESHOLD * j.scale),
            y(j.median - robust.THRESHOLD * j.scale),
        )
        parts.append(
            f'<rect x="0" y="{top:.1f}" width="{_W}" height="{bottom - top:.1f}" fill="#eee"/>'
            f'<line x1="0" x2="{_W}" y1="{y(j.median):.1f}" y2="{y(j.median):.1f}"'
            ' stroke="#bbb" stroke-dasharray="2,2"/>'
        )
    if len(j.history) > 1:
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(j.history))
        parts.append(f'<polyline points="{points}" fill="none" stroke="#4c78a8"/>')
    elif j.history:
        parts.append(f'<circle cx="{x(0):.1f}" cy="{y(j.history[0]):.1f}" r="1.5" fill="#4c78a8"/>')
    if j.current is not None:
        colour = _POINT.get(j.verdict, "#333")
        parts.append(
            f'<circle class="now" cx="{x(steps):.1f}" cy="{y(j.current):.1f}" r="3"'
            f' fill="{colour}"><title>this run: {j.current:.4g}</title></circle>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _value(v: float | None, price: float | None, is_cost: bool) -> str:
    if v is None:
        return "—"
    return f"{v:.4g}" if is_cost and price is not None else seconds(v)


def _row(r: HistoryRow, j: Judgement, price: float | None, is_cost: bool) -> str:
    z = "" if j.z is None else f"{j.z:+.1f}"
    return (
        f'<tr class="{j.verdict.replace(" ", "-")}"><td>{escape(r.kind)}</td>'
        f"<td>{escape(r.name)}</td><td>{sparkline(j)}</td>"
        f'<td class="num">{_value(j.median if j.history else None, price, is_cost)}</td>'
        f'<td class="num">{_value(j.scale if j.history else None, price, is_cost)}</td>'
        f'<td class="num">{_value(j.current, price, is_cost)}</td><td class="num">{z}</td>'
        f'<td class="verdict">{escape(j.verdict)}</td><td>{escape(j.confidence)}</td>'
        f'<td class="shape">{escape("; ".join(r.shape))}</td></tr>'
    )


_HEAD = (
    "<tr><th>kind</th><th>name</th><th>past runs and this one</th><th>median</th>"
    "<th>spread</th><th>this run</th><th>change (spreads)</th><th>verdict</th>"
    "<th>confidence</th><th>shape</th></tr>"
)


def render(histories: Iterable[WorkflowHistory]) -> str:
    """The page for every workflow."""
    sections = []
    for h in histories:
        speed = "".join(_row(r, r.speed, h.price, False) for r in h.rows)
        cost = "".join(_row(r, r.cost, h.price, True) for r in h.rows)
        unit = "thread time" if h.price is None else f"at {h.price:g} per CPU hour"
        moved = ", ".join(escape(f"{r.kind} {r.name}") for r in h.regressed)
        sections.append(
            f"<section><h2>{escape(h.workflow)}: "
            f"{'regressed: ' + moved if moved else 'nothing regressed'}</h2>"
            f"<p>This run: {escape(h.current_run)}, against {len(h.past_runs)} past runs.</p>"
            f"<h3>Speed</h3><table>{_HEAD}{speed}</table>"
            f"<h3>Cost ({escape(unit)})</h3><table>{_HEAD}{cost}</table></section>"
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>otel-spans history</title><style>{_STYLE}</style></head><body>"
        "<h1>otel-spans: this run against its history</h1>"
        "<p>Workflow and span rows are wall time, task-group rows the compute time of all"
        " their tasks. The grey band is the median of the past runs ± "
        f"{robust.THRESHOLD} spreads (1.4826 × MAD, at least {robust.RELATIVE_FLOOR:.0%}"
        " of the median): a run inside it is noise.</p>"
        f"{''.join(sections)}</body></html>"
    )
