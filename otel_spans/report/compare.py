"""Two runs compared: is this run slower than the last one, and where?

Workflows are matched by their root span's name (or ``--workflow``), then Dask spans by
their tag path and task groups by prefix. Each row compares wall time (workflows and
Dask spans) or compute time (task groups), with transfer time, bytes, task counts and
errors beside it, and a verdict. Timings of a Dask cluster vary from run to run: a
change is only called ``slower`` or ``faster`` when it exceeds both
:data:`NOISE_RATIO` of the baseline and :data:`NOISE_SECONDS`; anything less is
``same``. When a file holds several runs of a workflow, the latest is compared.

This module is the comparison itself (pure: loaded runs in, :class:`Comparison` out);
``compare_text``, ``compare_html`` and ``compare_json`` render it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from otel_spans.analysis.critical_path import critical_path
from otel_spans.report.build import BuiltWorkflow
from otel_spans.report.numbers import Numbers, group_numbers, span_numbers, workflow_numbers

__all__ = ["Comparison", "Numbers", "Row", "changes", "compare", "verdict"]

#: A change smaller than this share of the baseline is noise ...
NOISE_RATIO = 0.10
#: ... and so is one smaller than this many seconds (tiny stages jitter by more than 10 %).
NOISE_SECONDS = 0.1


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
        spans_b, spans_c = span_numbers(b), span_numbers(c)
        groups_b, groups_c = group_numbers(b.group_spans), group_numbers(c.group_spans)
        rows = [
            _row(
                "workflow",
                name,
                workflow_numbers(b, groups_b),
                workflow_numbers(c, groups_c),
            )
        ]
        for span_name in sorted((set(spans_b) | set(spans_c)) - {name}):
            rows.append(_row("span", span_name, spans_b.get(span_name), spans_c.get(span_name)))
        for prefix in sorted(set(groups_b) | set(groups_c)):
            rows.append(_row("task group", prefix, groups_b.get(prefix), groups_c.get(prefix)))
        out.append(Comparison(name, tuple(rows), _path(b), _path(c)))
    return out


def changes(row: Row) -> str:
    """What else changed on a row: tasks, errors and bytes, baseline → current."""
    b, c = row.baseline, row.current
    if b is None or c is None:
        return ""
    return f"{b.tasks}→{c.tasks} tasks, {b.erred}→{c.erred} erred, {b.nbytes:,}→{c.nbytes:,} B"
