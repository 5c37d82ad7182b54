"""A finished root Dask span read into the analysis model, and analysed, on the scheduler.

When a root is exported done, this reads its live ``Span``/``TaskGroup`` objects (on
the event loop) into a :class:`~otel_spans.analysis.model.Workflow` and runs the pure
analysis of :mod:`otel_spans.analysis` over it; the result is the root's
:class:`~otel_spans.records.WorkflowAnalysis` record and its thread-count events.

Task-level data is sampled (see :mod:`otel_spans.scheduler.sampling`), so the model is
built at the granularity the scheduler keeps in full: task groups. Each group counts
as one step from its first compute start to its last compute end, linked to the
groups it depends on; the critical path through that graph names the groups that set
the wall time. Efficiency and bottlenecks use the exact compute time Dask sums per
group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from time import time
from typing import TYPE_CHECKING, Any

from otel_spans import semconv
from otel_spans.analysis.critical_path import CriticalPath, critical_path
from otel_spans.analysis.diagnosis import diagnose
from otel_spans.analysis.efficiency import busy_seconds, parallel_efficiency
from otel_spans.analysis.evidence import Evidence, GroupEvidence
from otel_spans.analysis.model import ThreadInterval, Workflow
from otel_spans.names import LABEL_LENGTH, clean
from otel_spans.records import AttrValue, Finding, LogEntry, SpanEventRecord, WorkflowAnalysis, ns
from otel_spans.scheduler.root_reads import (
    MemoryOf,
    TreeSpans,
    execute_seconds,
    read_groups,
    read_spans,
)
from otel_spans.scheduler.task_groups import Tally

if TYPE_CHECKING:
    from distributed.scheduler import TaskGroup
    from distributed.spans import Span

logger = logging.getLogger("otel_spans")

#: How many bottleneck prefixes a root span carries at most.
MAX_BOTTLENECKS = 5
#: Most thread-count changes a root span carries as events (the first; the rest
#: counted in its ``dropped_events_count``).
MAX_NTHREADS_EVENTS = 256


#: ``Span.nthreads_intervals``: (start, stop, threads) of the cluster while a span ran.
Intervals = list[tuple[float, float, int]]


def analyse_root(
    root: Span,
    *,
    stop: float,
    intervals: Intervals,
    metrics_busy: float,
    metrics_idle: float,
    submitted_at: Callable[[TaskGroup], float | None] = lambda tg: None,
    tree_metrics: Mapping[Any, float] | None = None,
    tally: Callable[[TaskGroup], Tally | None] = lambda tg: None,
    worker_threads: int = 0,
    memory_of: MemoryOf = lambda uuid: None,
    tree_groups: Sequence[TaskGroup] | None = None,
    tree_spans: Sequence[Span] | None = None,
) -> WorkflowAnalysis:
    """Critical path, efficiency, bottlenecks and diagnosis of a finished root
    (``stop``, ``intervals``: the root's own, read once; ``metrics_busy`` and
    ``metrics_idle``: :func:`~otel_spans.scheduler.snapshots.busy_and_idle` of its
    tree, Dask's split of the thread-seconds the cluster offered it, and
    ``tree_metrics`` that tree's ``cumulative_worker_metrics``; ``tally``: what ran of
    each group, from :meth:`TaskGroups.tally`; ``worker_threads``: most threads of one
    worker; ``memory_of``: the memory ledger of each span of the tree; ``tree_groups``:
    its groups, and ``tree_spans`` its spans, when the caller walked the tree already:
    the tree is walked, and each group's Dask attributes read, once).

    Parallel efficiency has one definition everywhere (docs/telemetry.md): busy over
    offered thread-seconds, busy never less than the tasks' compute time."""
    if tree_groups is None:
        tree_groups = list(root.traverse_groups())
    spans = read_spans(
        root.traverse_spans() if tree_spans is None else tree_spans, memory_of, time()
    )
    groups = read_groups(tree_groups, spans, tally, submitted_at)
    compute_by_prefix = groups.compute_by_prefix
    sequential = sum(compute_by_prefix.values())
    efficiency, speedup = _efficiency_and_speedup(
        root, stop, sequential, metrics_busy, metrics_idle
    )
    workflow = Workflow(
        name=spans.names[root.id],
        start_ns=ns(root.enqueued),
        end_ns=ns(max(stop, root.enqueued)),
        tasks=groups.steps,
        threads=tuple(ThreadInterval(ns(t0), ns(max(t1, t0)), n) for t0, t1, n in intervals),
    )
    path = critical_path(workflow)
    ranked = sorted(compute_by_prefix.items(), key=lambda kv: (-kv[1], kv[0]))
    evidence = _evidence(
        root,
        workflow,
        path,
        spans,
        groups.evidence,
        tree_metrics or {},
        efficiency=efficiency,
        peak_threads=max((n for _, _, n in intervals), default=0),
        worker_threads=worker_threads,
    )
    top = ranked[:MAX_BOTTLENECKS]
    return WorkflowAnalysis(
        sequential_time=sequential,
        critical_path_groups=path.keys,
        critical_path_length=path.length_s,
        efficiency=efficiency,
        speedup=speedup,
        bottlenecks=tuple(p for p, _ in top),
        bottleneck_shares=tuple(f"{p}={s / sequential:.3f}" for p, s in top)
        if sequential
        else None,
        findings=_diagnosed(evidence),
        worker_threads=worker_threads,
    )


def root_efficiency(
    root: Span,
    *,
    stop: float,
    metrics_busy: float,
    metrics_idle: float,
    tree_groups: Iterable[TaskGroup],
) -> WorkflowAnalysis:
    """The part of :func:`analyse_root` every finished workflow gets, for one that is not
    diagnosed (shorter than ``diagnosis.min-duration``): its sequential time, parallel
    efficiency and speedup, which the workflow metrics and the alert rules read for
    every run, as :func:`analyse_root` computes them; no critical path, bottleneck or
    finding. O(task groups), no span's ledger nor any group's evidence read."""
    sequential = sum(tg.all_durations.get("compute", 0.0) for tg in tree_groups)
    efficiency, speedup = _efficiency_and_speedup(
        root, stop, sequential, metrics_busy, metrics_idle
    )
    return WorkflowAnalysis(
        sequential_time=sequential,
        critical_path_groups=(),
        critical_path_length=0.0,
        efficiency=efficiency,
        speedup=speedup,
        bottlenecks=(),
        bottleneck_shares=None,
        diagnosed=False,
    )


def _efficiency_and_speedup(
    root: Span, stop: float, sequential: float, metrics_busy: float, metrics_idle: float
) -> tuple[float | None, float | None]:
    """A finished workflow's parallel efficiency and speedup (``sequential`` compute
    seconds over its wall time), each None when undefined: the one computation of
    both, whether the workflow is diagnosed or not."""
    efficiency = parallel_efficiency(
        busy_seconds(metrics_busy, sequential), metrics_busy + metrics_idle
    )
    wall = max(stop - root.enqueued, 0.0)
    return efficiency, sequential / wall if wall > 0 else None


def _diagnosed(evidence: Evidence) -> tuple[Finding, ...]:
    """The findings; none, logged, should a rule fail: the root is exported anyway."""
    try:
        return diagnose(evidence)
    except Exception:
        logger.warning("otel-spans: the diagnosis of %r failed", evidence.name, exc_info=True)
        return ()


def root_evidence(
    root: Span,
    workflow: Workflow,
    path: CriticalPath,
    tree_metrics: Mapping[Any, float],
    tally: Callable[[TaskGroup], Tally | None],
    *,
    efficiency: float | None,
    peak_threads: int,
    worker_threads: int,
    memory_of: MemoryOf = lambda uuid: None,
    now: float | None = None,
) -> Evidence:
    """The diagnosis's evidence of a finished root, as :func:`analyse_root` gathers it:
    O(its groups + its sub-spans' own metric keys), on the event loop with the rest of
    the root's analysis."""
    spans = read_spans(root.traverse_spans(), memory_of, time() if now is None else now)
    groups = read_groups(root.traverse_groups(), spans, tally, lambda tg: None)
    return _evidence(
        root,
        workflow,
        path,
        spans,
        groups.evidence,
        tree_metrics,
        efficiency=efficiency,
        peak_threads=peak_threads,
        worker_threads=worker_threads,
    )


def _evidence(
    root: Span,
    workflow: Workflow,
    path: CriticalPath,
    spans: TreeSpans,
    groups: tuple[GroupEvidence, ...],
    tree_metrics: Mapping[Any, float],
    *,
    efficiency: float | None,
    peak_threads: int,
    worker_threads: int,
) -> Evidence:
    root_ledger = spans.ledgers.get(root.id)
    return Evidence(
        name=workflow.name,
        wall_s=workflow.wall_ns / 1e9,
        path=path,
        groups=groups,
        activities=execute_seconds(tree_metrics),
        span_activities=spans.activities,
        efficiency=efficiency,
        peak_threads=peak_threads,
        worker_threads=worker_threads,
        path_of_groups=True,
        peak_bytes=root_ledger.tree_peak if root_ledger is not None else 0,
        spilled_bytes=spans.spilled,
        unspilled_bytes=spans.unspilled,
        pauses=spans.pauses,
        pause_s=spans.pause_s,
        workers_lost=spans.lost,
    )


#: Longest advice or subject text on a finding's event and log record.
_TEXT_LENGTH = 512


def diagnosis_events(findings: tuple[Finding, ...], time_ns: int) -> tuple[SpanEventRecord, ...]:
    """One event per finding, in rank order, at the root's end."""
    events = []
    for f in findings:
        attributes: list[tuple[str, AttrValue]] = [
            (semconv.DIAGNOSIS_FINDING_ID, f.id),
            (semconv.DIAGNOSIS_FINDING_SEVERITY, f.severity),
            (semconv.DIAGNOSIS_FINDING_SUBJECT, clean(f.subject, _TEXT_LENGTH)),
            (semconv.DIAGNOSIS_FINDING_SUBJECT_KIND, f.subject_kind),
            (semconv.DIAGNOSIS_FINDING_SHARE, f.share),
            (semconv.DIAGNOSIS_FINDING_ADVICE, f.advice),
        ]
        for name, value in f.evidence:
            if isinstance(value, str):
                value = clean(value, _TEXT_LENGTH)
            attributes.append((semconv.DIAGNOSIS_EVIDENCE_PREFIX + name, value))
        events.append(SpanEventRecord(semconv.EVENT_DIAGNOSIS_FINDING, time_ns, tuple(attributes)))
    return tuple(events)


def diagnosis_log(
    findings: tuple[Finding, ...], name: str, trace_id: int, span_id: int, time_ns: int
) -> LogEntry:
    """The one log record that states a finished workflow's diagnosis: WARN when a
    finding is critical, else INFO."""
    severe = any(f.severity == "critical" for f in findings)
    level = semconv.SEVERITY_WARN if severe else semconv.SEVERITY_INFO
    if findings:
        said = "; ".join(
            f"{f.id} ({f.severity}, {f.share:.0%} of wall) in {clean(f.subject, 120)!r}"
            for f in findings
        )
    else:
        said = "no finding"
    return LogEntry(
        time_ns=time_ns,
        severity_number=level.number,
        severity_text=level.text,
        body=f"workflow {clean(name, LABEL_LENGTH)!r} diagnosis: {said}",
        attributes=(
            (semconv.DASK_SPAN_NAME, name),
            (semconv.DIAGNOSIS_FINDINGS, tuple(f.id for f in findings)),
        ),
        event_name=semconv.LOG_DIAGNOSIS,
        trace_id=trace_id,
        span_id=span_id,
    )


def nthreads_events(intervals: Intervals) -> tuple[tuple[SpanEventRecord, ...], int]:
    """One event per change of the cluster's thread count while the root ran (the
    first ``MAX_NTHREADS_EVENTS``), and how many changes were left out."""
    events = []
    last = None
    for t0, _, n in intervals:
        if n != last:
            events.append(
                SpanEventRecord(semconv.EVENT_NTHREADS, ns(t0), ((semconv.DASK_NTHREADS, n),))
            )
            last = n
    return tuple(events[:MAX_NTHREADS_EVENTS]), max(len(events) - MAX_NTHREADS_EVENTS, 0)
