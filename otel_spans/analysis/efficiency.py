"""Parallel efficiency and activity times: how well a workflow used the cluster's threads.

Its own module because it reads threads and the workers' activity seconds, not the task
graph nor prefixes, and because :func:`parallel_efficiency` and :func:`busy_seconds` are
the one definition the scheduler's root span and the offline report share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from otel_spans.analysis.model import ThreadInterval, Workflow
from otel_spans.semconv import IDLE_ACTIVITY

_NS_PER_S = 1e9


@dataclass(frozen=True, slots=True)
class Efficiency:
    """How well the workflow used the threads the cluster offered over its window."""

    wall_s: float
    #: Sum of all compute times: the run time on a single thread with no overheads.
    sequential_s: float
    #: Thread-seconds the workflow's tasks used: every activity of the workers' metrics
    #: but idle; estimated from traced compute inside the window without them.
    busy_s: float
    #: Thread-seconds the cluster offered the workflow: ``busy_s + idle_s`` (Dask's
    #: ``Span.active_cpu_seconds``), or the integral of the thread intervals over the
    #: window when estimated; 0 when unknown.
    thread_s: float
    #: Thread-seconds offered and not used (Dask's "idle or other spans"); ``None``
    #: when unknown.
    idle_s: float | None
    #: Parallel efficiency (:func:`parallel_efficiency`) in [0, 1]; ``None`` when unknown.
    efficiency: float | None
    #: ``sequential_s / wall_s``; ``None`` for a zero-length window.
    speedup: float | None
    #: Most threads available at once inside the window.
    peak_threads: int
    #: Mean threads the cluster had over the window; ``None`` when unknown.
    mean_threads: float | None
    #: Where busy and idle come from: "worker metrics" (exact) or "task spans" (estimate).
    basis: str = "worker metrics"


@dataclass(frozen=True, slots=True)
class Activity:
    """Time in one activity of the workers' fine performance metrics."""

    name: str
    seconds: float
    #: Of the total over all activities.
    share: float


def parallel_efficiency(busy_s: float, offered_s: float) -> float | None:
    """The one definition of a workflow's parallel efficiency (docs/telemetry.md): the
    thread-seconds its tasks were busy over those the cluster offered while it ran, at
    most 1. ``None`` when nothing was offered."""
    return min(busy_s / offered_s, 1.0) if offered_s > 0 else None


def busy_seconds(metrics_busy_s: float, compute_s: float) -> float:
    """A workflow's busy thread-seconds: its tasks' worker time by Dask's fine
    performance metrics, never less than their compute time. The metrics travel with
    worker heartbeats; compute times come with each finished task, so they stand in for
    metrics that have not arrived yet (a root exported as the cluster closes)."""
    return max(metrics_busy_s, compute_s)


def efficiency(workflow: Workflow) -> Efficiency:
    """Parallel efficiency, speedup and idle thread time over the workflow window.

    With the workers' activity seconds (the spans' ``dask.span.run.time.*``, or metrics
    files) efficiency is :func:`parallel_efficiency` of :func:`busy_seconds` over the
    thread-seconds offered (busy plus idle by the metrics), exactly what the scheduler
    puts on the root span. Without them (traces from otel-spans 0.1) it is estimated
    from the traced compute intervals over the thread-seconds of
    :attr:`Workflow.threads`, clipped to the window.
    """
    lo, hi = workflow.start_ns, workflow.end_ns
    sequential_ns = sum(task.end_ns - task.start_ns for task in workflow.tasks)
    sequential_s = (
        workflow.compute_seconds
        if workflow.compute_seconds is not None
        else sequential_ns / _NS_PER_S
    )
    thread_ns = sum(
        iv.nthreads * max(0, min(iv.end_ns, hi) - max(iv.start_ns, lo)) for iv in workflow.threads
    )
    wall_ns = workflow.wall_ns
    seconds = dict(workflow.activity_seconds)
    metrics_idle_s = seconds.pop(IDLE_ACTIVITY, None)
    if metrics_idle_s is not None:
        metrics_busy_s = sum(seconds.values())
        thread_s = metrics_busy_s + metrics_idle_s
        busy_s = busy_seconds(metrics_busy_s, sequential_s)
        idle_s: float | None = max(thread_s - busy_s, 0.0)
        ratio = parallel_efficiency(busy_s, thread_s)
        basis = "worker metrics"
    else:
        busy_ns = sum(max(0, min(t.end_ns, hi) - max(t.start_ns, lo)) for t in workflow.tasks)
        known = bool(workflow.threads) and thread_ns > 0
        busy_s, thread_s = busy_ns / _NS_PER_S, thread_ns / _NS_PER_S
        idle_s = (thread_ns - busy_ns) / _NS_PER_S if known else None
        ratio = busy_ns / thread_ns if known else None
        basis = "task spans"
    return Efficiency(
        wall_s=wall_ns / _NS_PER_S,
        sequential_s=sequential_s,
        busy_s=busy_s,
        thread_s=thread_s,
        idle_s=idle_s,
        efficiency=ratio,
        speedup=sequential_s * _NS_PER_S / wall_ns if wall_ns > 0 else None,
        peak_threads=_peak_threads(workflow.threads, lo, hi),
        mean_threads=thread_ns / wall_ns if workflow.threads and wall_ns > 0 else None,
        basis=basis,
    )


def _peak_threads(intervals: Iterable[ThreadInterval], lo: int, hi: int) -> int:
    changes: list[tuple[int, int]] = []
    for iv in intervals:
        start, end = max(iv.start_ns, lo), min(iv.end_ns, hi)
        if end > start and iv.nthreads:
            changes.append((start, iv.nthreads))
            changes.append((end, -iv.nthreads))
    # At equal times, departures (negative) sort first: a worker replacing another
    # at the same instant does not count twice.
    changes.sort()
    peak = current = 0
    for _, delta in changes:
        current += delta
        peak = max(peak, current)
    return peak


def activities(seconds: Mapping[str, float]) -> tuple[Activity, ...]:
    """Activities by time, largest first, each with its share of the total."""
    total = sum(seconds.values())
    ordered = sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(Activity(name, s, s / total if total > 0 else 0.0) for name, s in ordered)
