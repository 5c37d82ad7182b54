"""``otel-spans report --compare``'s page: one self-contained HTML file, a table per
workflow, then the two critical paths side by side. Every name is escaped
(:func:`markup.escape`): a task key with markup or a lone surrogate stays text."""

from __future__ import annotations

from collections.abc import Iterable

# compare.NOISE_*, read when rendering: the thresholds the verdicts were given
from otel_spans.report import compare
from otel_spans.report.compare import Comparison, Numbers, Row, changes
from otel_spans.report.markup import escape

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 24px}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.slower td.verdict{color:#b00020;font-weight:600} tr.faster td.verdict{color:#1b7f3b}
tr.new td.verdict,tr.gone td.verdict{color:#6a3fb5}
.paths{display:grid;grid-template-columns:1fr 1fr;gap:24px}
.paths ol{margin:4px 0;padding-left:20px}
"""
#: Critical path steps listed per side.
_MAX_STEPS = 50


def render(comparisons: Iterable[Comparison]) -> str:
    """The page for every comparison."""
    sections = []
    for c in comparisons:
        rows = "".join(
            f'<tr class="{r.verdict}"><td>{escape(r.kind)}</td><td>{escape(r.name)}</td>'
            f'<td class="num">{_cell(r.baseline)}</td><td class="num">{_cell(r.current)}</td>'
            f'<td class="num">{_ratio(r)}</td><td class="verdict">{r.verdict}</td>'
            f"<td>{changes(r)}</td></tr>"
            for r in c.rows
        )
        paths = "".join(
            f"<div><h3>{side}</h3><ol>{_items(path)}</ol></div>"
            for side, path in (("baseline", c.baseline_path), ("current", c.current_path))
        )
        sections.append(
            f"<section><h2>{escape(c.workflow)}: {c.wall.verdict}</h2>"
            "<table><tr><th>kind</th><th>name</th><th>baseline</th><th>current</th>"
            "<th>ratio</th><th>verdict</th><th>tasks, errors, bytes</th></tr>"
            f'{rows}</table><h3>Critical path</h3><div class="paths">{paths}</div></section>'
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>otel-spans comparison</title><style>{_STYLE}</style></head><body>"
        "<h1>otel-spans comparison</h1>"
        "<p>Workflow and span rows compare wall time, task-group rows the compute time of"
        f" all their tasks; a change within {compare.NOISE_RATIO:.0%} or"
        f" {compare.NOISE_SECONDS} s is 'same'.</p>{''.join(sections)}</body></html>"
    )


def _items(keys: tuple[str, ...]) -> str:
    return "".join(f"<li>{escape(k)}</li>" for k in keys[:_MAX_STEPS])


def _ratio(row: Row) -> str:
    return "" if row.ratio is None else f"{row.ratio:.2f}×"


def _cell(n: Numbers | None) -> str:
    return "—" if n is None else f"{n.seconds:.3f} s"
