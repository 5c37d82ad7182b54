"""What one run measured per row: a workflow, each of its Dask spans, each task group.

The rows ``--compare`` and ``--history`` judge, read from a run's exported spans alone:
a Dask span's wall time is its exports' summed (a span reopened after a pause is
exported more than once), a task group's numbers are its spans' attributes summed by
prefix (a prefix computed twice in one run is two groups), and *busy* thread time (what
a row's cost is made of, docs/telemetry.md "Cost and efficiency") is a Dask span's own
``dask.span.run.time.*`` but idle, or its groups' compute time when those attributes
are absent (files of otel-spans 0.1, or metrics that had not arrived by the export).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from otel_spans import semconv
from otel_spans.report.build import BuiltWorkflow
from otel_spans.report.load import LoadedSpan, as_float, as_int

#: ``dask.span.run.time.<activity>``: the one activity that is not busy time.
_IDLE_PART = "idle_or_other_spans"


@dataclass(frozen=True)
class Numbers:
    """What one row measures in one run."""

    #: Wall time (workflows, Dask spans) or compute time of all tasks (task groups).
    seconds: float
    compute_s: float = 0.0
    transfer_s: float = 0.0
    nbytes: int = 0
    tasks: int = 0
    erred: int = 0
    #: Thread-seconds the row's own tasks kept busy: cost = busy_s / 3600 × price.
    busy_s: float = 0.0


def group_numbers(groups: Iterable[LoadedSpan]) -> dict[str, Numbers]:
    """Each task prefix's numbers, its groups summed."""
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
        p: Numbers(t[0], t[0], t[1], int(t[2]), int(t[3]), int(t[4]), t[0])
        for p, t in totals.items()
    }


def _busy(span: LoadedSpan) -> float | None:
    """A Dask span export's own busy thread-seconds; None when it carries none."""
    found = [
        as_float(value)
        for key, value in span.attributes.items()
        if key.startswith(semconv.DASK_SPAN_RUN_TIME_PREFIX)
        and key[len(semconv.DASK_SPAN_RUN_TIME_PREFIX) :] != _IDLE_PART
    ]
    return sum(found) if found else None


def _summed(seconds: float, groups: Mapping[str, Numbers], busy: float | None) -> Numbers:
    return Numbers(
        seconds,
        sum(n.compute_s for n in groups.values()),
        sum(n.transfer_s for n in groups.values()),
        sum(n.nbytes for n in groups.values()),
        sum(n.tasks for n in groups.values()),
        sum(n.erred for n in groups.values()),
        busy if busy is not None else sum(n.compute_s for n in groups.values()),
    )


def span_numbers(built: BuiltWorkflow) -> dict[str, Numbers]:
    """Wall time of each Dask span (its exports summed) and its own groups' numbers."""
    name_of: dict[str, str] = {}
    wall: dict[str, float] = defaultdict(float)
    busy: dict[str, float | None] = {}
    for span in built.dask_spans:
        name = str(span.attributes.get(semconv.DASK_SPAN_NAME, span.name))
        name_of[span.span_id] = name
        wall[name] += span.duration_s
        own = _busy(span)
        if own is not None:
            busy[name] = (busy.get(name) or 0.0) + own
    own_groups: dict[str, list[LoadedSpan]] = defaultdict(list)
    for g in built.group_spans:
        own_groups[name_of.get(g.parent_span_id, "?")].append(g)
    return {
        name: _summed(seconds, group_numbers(own_groups.get(name, ())), busy.get(name))
        for name, seconds in wall.items()
    }


def workflow_numbers(built: BuiltWorkflow, groups: Mapping[str, Numbers]) -> Numbers:
    """The whole workflow: its wall time, every group summed, its tasks' final states."""
    found = [b for b in (_busy(s) for s in built.dask_spans) if b is not None]
    whole = _summed(built.workflow.wall_ns / 1e9, groups, sum(found) if found else None)
    return Numbers(
        whole.seconds,
        whole.compute_s,
        whole.transfer_s,
        whole.nbytes,
        built.workflow.task_count,
        built.task_states.get("erred", 0),
        whole.busy_s,
    )


#: A row: its kind (``workflow``, ``span``, ``task group``) and name.
RowKey = tuple[str, str]


def rows(built: BuiltWorkflow) -> dict[RowKey, Numbers]:
    """Every row of one run of a workflow: the workflow, its Dask spans (the root is
    the workflow row), its task groups by prefix."""
    groups = group_numbers(built.group_spans)
    name = built.workflow.name
    out: dict[RowKey, Numbers] = {("workflow", name): workflow_numbers(built, groups)}
    for span_name, numbers in sorted(span_numbers(built).items()):
        if span_name != name:
            out[("span", span_name)] = numbers
    for prefix, numbers in sorted(groups.items()):
        out[("task group", prefix)] = numbers
    return out
