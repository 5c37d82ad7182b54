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

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from otel_spans import semconv
from otel_spans.analysis.critical_path import critical_path
from otel_spans.report.build import BuiltWorkflow
from otel_spans.report.load import LoadedSpan, as_float, as_int

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


def _group_numbers(groups: Iterable[LoadedSpan]) -> dict[str, Numbers]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0] * 5)
    for g in groups:
        prefix = str(g.attributes.get(semconv.DASK_TASK_PREFIX, g.name))
        t = totals[prefix]
        attrs = g.attributes
        t[0] += as_float(attrs.get(semconv.DASK_TASK_GROUP_DURATION_PREFIX + "compute"))
        t[1] += as_float(attrs.get(semconv.DASK_TASK_GROUP_DURATION_PREFIX + "transfer"))
        t[2] += as_int(attrs.get(semconv.DASK_TASK_GROUP_NBYTES))
        t[3] += as_int(attrs.get(semconv.DASK_TASK_GROUP_TASK_COUNT))
        t[4] += as_int(attrs.get(semconv.DASK_TASK_GROUP_TASK_STATES_ERRED))
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


def changes(row: Row) -> str:
    """What else changed on a row: tasks, errors and bytes, baseline → current."""
    b, c = row.baseline, row.current
    if b is None or c is None:
        return ""
    return f"{b.tasks}→{c.tasks} tasks, {b.erred}→{c.erred} erred, {b.nbytes:,}→{c.nbytes:,} B"
