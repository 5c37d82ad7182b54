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

from collections.abc import Callable
from typing import TYPE_CHECKING

from otel_spans import semconv
from otel_spans.analysis.critical_path import critical_path
from otel_spans.analysis.efficiency import busy_seconds, parallel_efficiency
from otel_spans.analysis.model import TaskRun, ThreadInterval, Workflow
from otel_spans.names import clean
from otel_spans.records import SpanEventRecord, WorkflowAnalysis, ns

if TYPE_CHECKING:
    from distributed.scheduler import TaskGroup
    from distributed.spans import Span

#: How many bottleneck prefixes a root span carries at most.
MAX_BOTTLENECKS = 5
#: Most thread-count changes a root span carries as events (the first; the rest
#: counted in its ``dropped_events_count``).
MAX_NTHREADS_EVENTS = 256


#: ``Span.nthreads_intervals``: (start, stop, threads) of the cluster while a span ran.
Intervals = list[tuple[float, float, int]]


def group_workflow(
    root: Span,
    stop: float,
    intervals: Intervals,
    submitted_at: Callable[[TaskGroup], float | None] = lambda tg: None,
) -> Workflow:
    """The workflow of ``root``'s tree with each task group as one step.

    ``stop`` and ``intervals`` are the root's ``Span.stop`` and ``nthreads_intervals``,
    read once by the caller: Dask computes each by walking the whole subtree.
    ``submitted_at`` gives when a group's computation was submitted, so that the
    critical path follows stages the client ran one after another.
    """
    groups = [tg for tg in root.traverse_groups() if tg.start and tg.stop]
    names = {id(tg): clean(str(tg.name)) for tg in groups}
    steps = [
        TaskRun(
            key=names[id(tg)],
            prefix=clean(tg.prefix.name),
            group=names[id(tg)],
            worker="",
            thread=None,
            start_ns=ns(tg.start),
            end_ns=ns(max(tg.stop, tg.start)),
            dependencies=tuple(names[id(d)] for d in tg.dependencies if id(d) in names),
            submitted_ns=_ns_or_none(submitted_at(tg)),
        )
        for tg in groups
    ]
    threads = tuple(ThreadInterval(ns(t0), ns(max(t1, t0)), n) for t0, t1, n in intervals)
    return Workflow(
        name=clean("/".join(str(t) for t in root.name)),
        start_ns=ns(root.enqueued),
        end_ns=ns(max(stop, root.enqueued)),
        tasks=tuple(steps),
        threads=threads,
    )


def analyse_root(
    root: Span,
    *,
    stop: float,
    intervals: Intervals,
    metrics_busy: float,
    metrics_idle: float,
    submitted_at: Callable[[TaskGroup], float | None] = lambda tg: None,
) -> WorkflowAnalysis:
    """Critical path, efficiency and bottlenecks of a finished root (``stop``,
    ``intervals``: the root's own, read once; ``metrics_busy`` and ``metrics_idle``:
    :func:`~otel_spans.scheduler.snapshots.busy_and_idle` of its tree, Dask's split of
    the thread-seconds the cluster offered it).

    Parallel efficiency has one definition everywhere (docs/telemetry.md): busy over
    offered thread-seconds, busy never less than the tasks' compute time."""
    compute_by_prefix: dict[str, float] = {}
    for tg in root.traverse_groups():
        compute = tg.all_durations.get("compute", 0.0)
        if compute:
            prefix = clean(tg.prefix.name)
            compute_by_prefix[prefix] = compute_by_prefix.get(prefix, 0.0) + compute
    sequential = sum(compute_by_prefix.values())
    wall = max(stop - root.enqueued, 0.0)
    path = critical_path(group_workflow(root, stop, intervals, submitted_at))
    ranked = sorted(compute_by_prefix.items(), key=lambda kv: (-kv[1], kv[0]))
    return WorkflowAnalysis(
        sequential_time=sequential,
        critical_path_groups=tuple(step.task.key for step in path.steps),
        critical_path_length=path.length_s,
        efficiency=parallel_efficiency(
            busy_seconds(metrics_busy, sequential), metrics_busy + metrics_idle
        ),
        speedup=sequential / wall if wall > 0 else None,
        bottlenecks=tuple(p for p, _ in ranked[:MAX_BOTTLENECKS]),
        bottleneck_shares=tuple(f"{p}={s / sequential:.3f}" for p, s in ranked[:MAX_BOTTLENECKS])
        if sequential
        else None,
    )


def _ns_or_none(seconds: float | None) -> int | None:
    return ns(seconds) if seconds else None


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
