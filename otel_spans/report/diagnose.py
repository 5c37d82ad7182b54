"""The diagnosis of a loaded workflow: its evidence read from the trace, and its text.

The rules are :mod:`otel_spans.analysis.diagnosis`'s, the ones the scheduler ran at
the root's export; here the evidence comes from the exported spans (group spans'
counts and durations, the Dask spans' ``dask.span.run.time.*``, the task runs the
trace holds, the root's ``dask.workflow.worker_threads``), so a file diagnoses the
same way the live scheduler did, and a task-level trace more finely.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from otel_spans import semconv
from otel_spans.analysis.diagnosis import diagnose
from otel_spans.analysis.evidence import Evidence, GroupEvidence
from otel_spans.analysis.model import TaskRun
from otel_spans.analysis.workflow import Analysis
from otel_spans.records import Finding
from otel_spans.report.build import BuiltWorkflow, run_seconds
from otel_spans.report.load import LoadedSpan, as_int
from otel_spans.report.memory import MemoryEvidence


def findings(built: BuiltWorkflow, analysis: Analysis) -> tuple[Finding, ...]:
    """The ranked findings of ``built`` (see :func:`evidence`)."""
    return diagnose(evidence(built, analysis))


def evidence(built: BuiltWorkflow, analysis: Analysis) -> Evidence:
    """What the trace holds of ``built``, as the diagnosis's evidence."""
    wf = built.workflow
    runs_of: dict[str, list[TaskRun]] = defaultdict(list)
    for run in built.task_runs:
        runs_of[run.group].append(run)
    complete = built.granularity == "tasks"
    groups = tuple(_group(g, runs_of.get(_name(g), []), complete) for g in built.group_spans)
    memory = built.memory
    if memory is not None:
        held: dict[str, tuple[int, str]] = {}
        for row in memory.groups:  # a group's exports: its largest peak
            held[row.group] = max(held.get(row.group, (0, "")), (row.peak, row.span))
        groups = tuple(
            replace(g, peak_bytes=held[g.name][0], span=held[g.name][1]) if g.name in held else g
            for g in groups
        )
    spans: dict[str, dict[str, float]] = {}
    for span in built.dask_spans:
        name = "/".join(_tags(span))
        for activity, seconds in run_seconds([span]).items():
            own = spans.setdefault(name, {})
            own[activity] = own.get(activity, 0.0) + seconds
    eff = analysis.efficiency
    found = Evidence(
        name=wf.name,
        wall_s=wf.wall_ns / 1e9,
        path=analysis.critical_path,
        groups=groups,
        activities=dict(wf.activity_seconds),
        span_activities=spans,
        efficiency=eff.efficiency,
        peak_threads=eff.peak_threads,
        worker_threads=max(
            (as_int(s.attributes.get(semconv.WORKFLOW_WORKER_THREADS)) for s in built.dask_spans),
            default=0,
        ),
        path_of_groups=not complete,
    )
    return found if memory is None else _with_memory(found, memory)


def _with_memory(found: Evidence, memory: MemoryEvidence) -> Evidence:
    """``found`` with the workflow's memory, summed over its Dask spans as on the
    scheduler."""
    return replace(
        found,
        peak_bytes=memory.tree_peak,
        spilled_bytes=float(sum(r.spilled for r in memory.spans)),
        unspilled_bytes=float(sum(r.unspilled for r in memory.spans)),
        pauses=sum(r.pauses for r in memory.spans),
        pause_s=sum(r.pause_seconds for r in memory.spans),
        workers_lost=sum(r.workers_lost for r in memory.spans),
    )


def _name(span: LoadedSpan) -> str:
    return str(span.attributes.get(semconv.DASK_TASK_GROUP_NAME, span.name))


def _tags(span: LoadedSpan) -> tuple[str, ...]:
    tags = span.attributes.get(semconv.DASK_SPAN_TAGS)
    return tuple(str(t) for t in tags) if isinstance(tags, list) else (span.name,)


def _group(span: LoadedSpan, runs: Sequence[TaskRun], complete: bool) -> GroupEvidence:
    attrs = span.attributes
    prefix = semconv.DASK_TASK_GROUP_DURATION_PREFIX
    durations = {
        key[len(prefix) :]: float(value)
        for key, value in attrs.items()
        if key.startswith(prefix) and isinstance(value, int | float)
    }
    tasks = as_int(attrs.get(semconv.DASK_TASK_GROUP_TASK_COUNT), 1)
    erred = as_int(attrs.get(semconv.DASK_TASK_GROUP_TASK_STATES_ERRED))
    finished = as_int(attrs.get(semconv.DASK_TASK_GROUP_TASK_STATES_MEMORY)) + erred
    done = sorted((r for r in runs if r.state == "memory"), key=lambda r: (r.compute_ns, r.key))
    slowest = done[-1] if done else None
    typical = None
    if slowest is not None:
        others = [r.compute_ns / 1e9 for r in done[:-1]]
        if complete and others:
            typical = _median(others)
        elif finished > 1:
            rest = durations.get("compute", 0.0) - slowest.compute_ns / 1e9
            typical = max(rest, 0.0) / (finished - 1)
    return GroupEvidence(
        name=_name(span),
        prefix=span.name,
        tasks=tasks,
        runs=finished,
        erred=erred,
        durations=durations,
        start_ns=span.start_ns,
        end_ns=span.end_ns,
        slowest_s=slowest.compute_ns / 1e9 if slowest else None,
        slowest_key=slowest.key if slowest else None,
        typical_s=typical,
    )


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def summary_lines(found: Iterable[Finding]) -> list[str]:
    """The text report's section: one line per finding, its evidence and advice."""
    found = list(found)
    if not found:
        return ["  diagnosis: nothing found (no rule explains 5% or more of the wall time)"]
    lines = ["  diagnosis (why it took this long; share of the wall time):"]
    for rank, f in enumerate(found, 1):
        numbers = ", ".join(f"{k}={v}" for k, v in f.evidence)
        lines.append(
            f"    {rank}. {f.id} [{f.severity}] {f.share:.0%}  {f.subject_kind} {f.subject!r}"
        )
        lines.append(f"       {numbers}")
        lines.append(f"       advice: {f.advice}")
    return lines


def as_json(found: Iterable[Finding]) -> list[dict[str, Any]]:
    """``report --json``'s ``diagnosis``: ``[{id, severity, subject, evidence, share,
    advice}]`` in rank order (plus ``subject_kind``)."""
    return [
        {
            "id": f.id,
            "severity": f.severity,
            "subject": f.subject,
            "subject_kind": f.subject_kind,
            "evidence": dict(f.evidence),
            "share": f.share,
            "advice": f.advice,
        }
        for f in found
    ]
