"""``otel-spans report --compare BASELINE CURRENT``: is this run slower than the last one,
and where?

Workflows are matched by their root span's name (or ``--workflow``), then Dask spans by
their tag path and task groups by prefix. Each row compares wall time (workflows and
Dask spans) or compute time (task groups), with transfer time, bytes, task counts and
errors beside it, and a verdict. Timings of a Dask cluster vary from run to run: a
change is only called ``slower`` or ``faster`` when it exceeds both
:data:`NOISE_RATIO` of the baseline and :data:`NOISE_SECONDS`; anything less is
``same``. When a file holds several runs of a workflow, the latest is compared.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from otel_spans import semconv
from otel_spans.analysis.workflow import critical_path
from otel_spans.report.build import BuiltWorkflow, build_workflows
from otel_spans.report.load import InputError, LoadedSpan, load_spans

#: A change smaller than this share of the baseline is noise ...
NOISE_RATIO = 0.10
#: ... and so is one smaller than this many seconds (tiny stages jitter by more than 10 %).
NOISE_SECONDS = 0.1


@dataclass(frozen=True)
class Numbers:
    """What one row measures on one side."""

    seconds: float
    compute_s: float = 0.0
    transfer_s: float = 0.0
    nbytes: int = 0
    tasks: int = 0
    erred: int = 0


@dataclass(frozen=True)
class Row:
    #: "workflow", "span" or "task group".
    kind: str
    name: str
    baseline: Numbers | None
    current: Numbers | None
    #: slower, faster, same, new or gone.
    verdict: str
    #: current / baseline seconds; None for new or gone rows.
    ratio: float | None


@dataclass(frozen=True)
class Comparison:
    workflow: str
    rows: tuple[Row, ...]
    baseline_path: tuple[str, ...]
    current_path: tuple[str, ...]

    @property
    def wall(self) -> Row:
        return self.rows[0]


def verdict(baseline: float | None, current: float | None) -> str:
    """slower / faster beyond the noise thresholds, same within them, new / gone."""
    if baseline is None:
        return "new"
    if current is None:
        return "gone"
    change = current - baseline
    if abs(change) <= NOISE_SECONDS or abs(change) <= NOISE_RATIO * baseline:
        return "same"
    return "slower" if change > 0 else "faster"


def _row(kind: str, name: str, base: Numbers | None, cur: Numbers | None) -> Row:
    ratio = cur.seconds / base.seconds if base and cur and base.seconds > 0 else None
    return Row(
        kind,
        name,
        base,
        cur,
        verdict(base.seconds if base else None, cur.seconds if cur else None),
        ratio,
    )


def _int(span: LoadedSpan, key: str) -> int:
    value = span.attributes.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(span: LoadedSpan, key: str) -> float:
    value = span.attributes.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _group_numbers(groups: Iterable[LoadedSpan]) -> dict[str, Numbers]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0] * 5)
    for g in groups:
        prefix = str(g.attributes.get(semconv.DASK_TASK_PREFIX, g.name))
        t = totals[prefix]
        t[0] += _float(g, semconv.DASK_TASK_GROUP_DURATION_PREFIX + "compute")
        t[1] += _float(g, semconv.DASK_TASK_GROUP_DURATION_PREFIX + "transfer")
        t[2] += _int(g, semconv.DASK_TASK_GROUP_NBYTES)
        t[3] += _int(g, semconv.DASK_TASK_GROUP_TASK_COUNT)
        t[4] += _int(g, semconv.DASK_TASK_GROUP_TASK_STATES_ERRED)
    return {
        p: Numbers(t[0], t[0], t[1], int(t[2]), int(t[3]), int(t[4])) for p, t in totals.items()
    }


def _span_numbers(built: BuiltWorkflow) -> dict[str, Numbers]:
    """Wall time of each Dask span (its exports summed) and its own groups' numbers."""
    name_of: dict[str, str] = {}
    wall: dict[str, float] = defaultdict(float)
    for span in built.dask_spans:
        name = str(span.attributes.get(semconv.DASK_SPAN_NAME, span.name))
        name_of[span.span_id] = name
        wall[name] += span.duration_s
    own: dict[str, list[LoadedSpan]] = defaultdict(list)
    for g in built.group_spans:
        own[name_of.get(g.parent_span_id, "?")].append(g)
    out = {}
    for name, seconds in wall.items():
        groups = _group_numbers(own.get(name, ()))
        out[name] = Numbers(
            seconds,
            sum(n.compute_s for n in groups.values()),
            sum(n.transfer_s for n in groups.values()),
            sum(n.nbytes for n in groups.values()),
            sum(n.tasks for n in groups.values()),
            sum(n.erred for n in groups.values()),
        )
    return out


def _latest(workflows: Iterable[BuiltWorkflow]) -> dict[str, BuiltWorkflow]:
    out: dict[str, BuiltWorkflow] = {}
    for built in sorted(workflows, key=lambda b: b.workflow.start_ns):
        out[built.workflow.name] = built
    return out


def _path(built: BuiltWorkflow) -> tuple[str, ...]:
    return tuple(step.task.key for step in critical_path(built.workflow).steps)


def compare(
    baseline: Iterable[BuiltWorkflow], current: Iterable[BuiltWorkflow], workflow: str | None
) -> list[Comparison]:
    """One comparison per workflow name found on both sides (or ``workflow`` alone)."""
    base, cur = _latest(baseline), _latest(current)
    names = [workflow] if workflow is not None else [n for n in cur if n in base]
    out = []
    for name in names:
        b, c = base.get(name), cur.get(name)
        if b is None or c is None:
            continue
        spans_b, spans_c = _span_numbers(b), _span_numbers(c)
        groups_b, groups_c = _group_numbers(b.group_spans), _group_numbers(c.group_spans)
        rows = [_row("workflow", name, _whole(b, groups_b), _whole(c, groups_c))]
        for span_name in sorted((set(spans_b) | set(spans_c)) - {name}):
            rows.append(_row("span", span_name, spans_b.get(span_name), spans_c.get(span_name)))
        for prefix in sorted(set(groups_b) | set(groups_c)):
            rows.append(_row("task group", prefix, groups_b.get(prefix), groups_c.get(prefix)))
        out.append(Comparison(name, tuple(rows), _path(b), _path(c)))
    return out


def _whole(built: BuiltWorkflow, groups: Mapping[str, Numbers]) -> Numbers:
    return Numbers(
        built.workflow.wall_ns / 1e9,
        sum(n.compute_s for n in groups.values()),
        sum(n.transfer_s for n in groups.values()),
        sum(n.nbytes for n in groups.values()),
        built.workflow.task_count,
        built.task_states.get("erred", 0),
    )


def _side(n: Numbers | None) -> str:
    return "—" if n is None else f"{n.seconds:8.3f}s"


def render(comparison: Comparison) -> str:
    lines = [
        f"workflow {comparison.workflow!r}: {comparison.wall.verdict}"
        + (
            f" ({comparison.wall.ratio:.2f}× the baseline's wall time)"
            if comparison.wall.ratio
            else ""
        ),
        f"  {'':<11} {'name':<40} {'baseline':>9} {'current':>9}  verdict   tasks, errors, bytes",
        "  (workflow and spans: wall time; task groups: compute time of all their tasks;"
        f" a change within {NOISE_RATIO:.0%} or {NOISE_SECONDS}s is 'same')",
    ]
    for row in comparison.rows:
        b, c = row.baseline, row.current
        lines.append(
            f"  {row.kind:<11} {row.name[:40]:<40} {_side(b):>9} {_side(c):>9}"
            f"  {row.verdict:<8}  {_counts(row)}"
        )
    lines.append(f"  critical path, baseline: {' → '.join(comparison.baseline_path[:12])}")
    lines.append(f"  critical path, current:  {' → '.join(comparison.current_path[:12])}")
    return "\n".join(lines)


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


def render_html(comparisons: Iterable[Comparison]) -> str:
    """The comparison as one self-contained page: a table per workflow, then the two
    critical paths side by side."""
    sections = []
    for c in comparisons:
        rows = "".join(
            f'<tr class="{r.verdict}"><td>{_esc(r.kind)}</td><td>{_esc(r.name)}</td>'
            f'<td class="num">{_cell(r.baseline)}</td><td class="num">{_cell(r.current)}</td>'
            f'<td class="num">{_ratio(r)}</td><td class="verdict">{r.verdict}</td>'
            f"<td>{_counts(r)}</td></tr>"
            for r in c.rows
        )
        paths = "".join(
            f"<div><h3>{side}</h3><ol>{_items(path)}</ol></div>"
            for side, path in (("baseline", c.baseline_path), ("current", c.current_path))
        )
        sections.append(
            f"<section><h2>{_esc(c.workflow)}: {c.wall.verdict}</h2>"
            "<table><tr><th>kind</th><th>name</th><th>baseline</th><th>current</th>"
            "<th>ratio</th><th>verdict</th><th>tasks, errors, bytes</th></tr>"
            f'{rows}</table><h3>Critical path</h3><div class="paths">{paths}</div></section>'
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>otel-spans comparison</title><style>{_STYLE}</style></head><body>"
        "<h1>otel-spans comparison</h1>"
        "<p>Workflow and span rows compare wall time, task-group rows the compute time of"
        f" all their tasks; a change within {NOISE_RATIO:.0%} or {NOISE_SECONDS} s is"
        f" 'same'.</p>{''.join(sections)}</body></html>"
    )


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _items(keys: tuple[str, ...]) -> str:
    return "".join(f"<li>{_esc(k)}</li>" for k in keys[:50])


def _ratio(row: Row) -> str:
    return "" if row.ratio is None else f"{row.ratio:.2f}×"


def _cell(n: Numbers | None) -> str:
    return "—" if n is None else f"{n.seconds:.3f} s"


def _counts(row: Row) -> str:
    b, c = row.baseline, row.current
    if b is None or c is None:
        return ""
    return f"{b.tasks}→{c.tasks} tasks, {b.erred}→{c.erred} erred, {b.nbytes:,}→{c.nbytes:,} B"


def to_json(comparisons: Iterable[Comparison]) -> str:
    return json.dumps(
        {
            "noise": {"ratio": NOISE_RATIO, "seconds": NOISE_SECONDS},
            "workflows": [asdict(c) for c in comparisons],
        },
        indent=2,
    )


def parse_percent(text: str) -> float:
    """``20%`` or ``20`` -> 0.2; ValueError for anything else."""
    value = float(text.strip().removesuffix("%"))
    if value < 0:
        raise ValueError(text)
    return value / 100


def run(
    baseline: Path,
    current: Path,
    *,
    workflow: str | None,
    json_out: Path | None,
    out_dir: Path | None,
    fail_if_slower: str | None,
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    """The ``--compare`` command: the text to ``stdout``, the HTML page into ``out_dir``
    (default: ``CURRENT/otel-spans-report``), JSON to ``json_out``; exit 0, 1 (nothing
    to compare), 2 (bad input) or 3 (a workflow got slower than ``fail_if_slower``)."""
    try:
        limit = parse_percent(fail_if_slower) if fail_if_slower is not None else None
    except ValueError:
        print(
            f"otel-spans report: --fail-if-slower {fail_if_slower!r}: expected e.g. 20%",
            file=stderr,
        )
        return 2
    try:
        comparisons = compare(
            build_workflows(load_spans(baseline)), build_workflows(load_spans(current)), workflow
        )
    except InputError as e:
        print(f"otel-spans report: {e}", file=stderr)
        return 2
    if not comparisons:
        what = f"workflow {workflow!r}" if workflow else "a workflow of the same name"
        print(f"otel-spans report: {baseline} and {current} share no {what}", file=stderr)
        return 1
    for comparison in comparisons:
        print(render(comparison), file=stdout)
    if json_out is not None:
        json_out.write_text(to_json(comparisons), encoding="utf-8")
    target = out_dir or (current if current.is_dir() else current.parent) / "otel-spans-report"
    target.mkdir(parents=True, exist_ok=True)
    page = target / "compare.html"
    page.write_text(render_html(comparisons), encoding="utf-8")
    print(f"  wrote {page} (side by side)", file=stdout)
    if limit is not None:
        slower = [
            c.workflow
            for c in comparisons
            if c.wall.ratio is not None and c.wall.verdict == "slower" and c.wall.ratio > 1 + limit
        ]
        if slower:
            print(
                f"otel-spans report: slower than the baseline by more than {limit:.0%}: "
                + ", ".join(slower),
                file=stderr,
            )
            return 3
    return 0
