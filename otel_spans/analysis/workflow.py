"""Critical path, efficiency, bottlenecks, stragglers: pure functions of a :class:`Workflow`.

They say why a workflow took as long as it did, from the plain model alone (no Dask,
no OTel), for the scheduler and the offline report alike.

``analyse(workflow)`` runs everything; the pieces (:func:`critical_path`,
:func:`bottlenecks`, :func:`stragglers`, :func:`efficiency`, :func:`activities`) can be
called alone. Inputs are integer nanoseconds; results are float seconds computed from
integer sums, so that a result is the exact ratio of the inputs rather than an
accumulation of float rounding.

Every function is linear or ``O(n log n)`` in the number of tasks and iterative (no
recursion), so a million-task workflow is analysed in seconds; ``tests/unit/test_analysis.py``
measures it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from otel_spans.analysis.model import Phase, TaskRun, ThreadInterval, Workflow
from otel_spans.semconv import IDLE_ACTIVITY

_NS_PER_S = 1e9


@dataclass(frozen=True, slots=True)
class PathStep:
    """One task on the critical path and the time the path spent getting to it."""

    task: TaskRun
    #: Transfers into this task that carried its predecessor's data (for the first
    #: step: any transfer), counted only inside the gap between the two computes.
    transfer_s: float
    #: Time before this task's compute when nothing on the path ran: the task waited
    #: to be scheduled, for a free thread, or for the workflow to start sending work.
    wait_s: float
    #: The part of :attr:`wait_s` before the client submitted this task's computation,
    #: after the previous step's result was ready (the client's own time: gathering
    #: that result, think-time, code between two ``compute`` calls).
    client_s: float = 0.0

    @property
    def scheduling_s(self) -> float:
        """The rest of the wait: the scheduler and a free thread (queueing)."""
        return self.wait_s - self.client_s

    @property
    def compute_s(self) -> float:
        return self.task.compute_ns / _NS_PER_S


@dataclass(frozen=True, slots=True)
class Share:
    """Time of one named part (a prefix, a group) and its fraction of a whole."""

    name: str
    tasks: int
    seconds: float
    #: Fraction in [0, 1] of the whole named where the share is used.
    share: float


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """The chain of dependent tasks that determined the wall time.

    ``length_s + gap_s == wall_s`` when worker clocks agree; with skewed clocks a task can
    appear to start before its dependency ended, and that overlap counts nowhere.
    """

    #: In execution order: the first step has no dependency on the path.
    steps: tuple[PathStep, ...]
    wall_s: float
    #: Compute plus transfers on the path: what the wall time would be with no waiting.
    length_s: float
    compute_s: float
    transfer_s: float
    #: All waits before the steps plus :attr:`tail_s`.
    gap_s: float
    #: From the end of the last task to the end of the workflow (result gathering...).
    tail_s: float
    #: Compute time on the path by prefix, as a share of :attr:`length_s`, largest first.
    #: Transfers belong to no prefix; they are :attr:`transfer_s`.
    prefixes: tuple[Share, ...]
    #: The same by task group.
    groups: tuple[Share, ...]
    #: Of :attr:`gap_s`: the client's time between a result and the next submission.
    client_s: float = 0.0

    @property
    def scheduling_s(self) -> float:
        """Of :attr:`gap_s`: waits for the scheduler and free threads."""
        return self.gap_s - self.client_s - self.tail_s

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(step.task.key for step in self.steps)


@dataclass(frozen=True, slots=True)
class Bottleneck:
    """One task prefix: where the cluster's compute time, and the path's, went."""

    prefix: str
    tasks: int
    #: Compute time of all its tasks; transfers are not task time.
    seconds: float
    #: Of the total compute time of all tasks.
    share: float
    #: Compute time of its tasks on the critical path.
    critical_seconds: float
    #: Of the critical path length.
    critical_share: float
    median_s: float
    max_s: float
    #: Its critical seconds over the workflow's wall time: how much of the wait for
    #: the workflow this prefix was (``critical_share`` leaves out the waiting).
    wall_share: float = 0.0


@dataclass(frozen=True, slots=True)
class Straggler:
    """A task much slower than the typical task of its prefix."""

    task: TaskRun
    #: Median compute time of the task's prefix.
    median_s: float
    #: Compute time over the median; above the straggler factor by construction.
    ratio: float

    @property
    def seconds(self) -> float:
        return self.task.compute_ns / _NS_PER_S


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


@dataclass(frozen=True, slots=True)
class Analysis:
    critical_path: CriticalPath
    #: Every prefix, by share of total compute time, largest first.
    bottlenecks: tuple[Bottleneck, ...]
    #: The prefixes on the critical path, by share of the path, largest first.
    critical_bottlenecks: tuple[Bottleneck, ...]
    #: Largest excess over the prefix median first: that is the time they cost.
    stragglers: tuple[Straggler, ...]
    efficiency: Efficiency
    activities: tuple[Activity, ...]


def analyse(
    workflow: Workflow, *, straggler_factor: float = 3.0, straggler_min_tasks: int = 3
) -> Analysis:
    """Run every analysis on ``workflow``.

    Parameters
    ----------
    workflow
        The workflow to analyse; may be empty.
    straggler_factor
        A task is a straggler when its compute time exceeds this multiple of its
        prefix's median.
    straggler_min_tasks
        Prefixes with fewer tasks have no meaningful median and yield no stragglers.
    """
    path = critical_path(workflow)
    durations = _durations_by_prefix(workflow.tasks)
    ranked = _bottlenecks(durations, _counts_by_prefix(workflow.tasks), path)
    on_path = {share.name for share in path.prefixes}
    return Analysis(
        critical_path=path,
        bottlenecks=ranked,
        critical_bottlenecks=tuple(
            sorted(
                (b for b in ranked if b.prefix in on_path),
                key=lambda b: (-b.critical_seconds, b.prefix),
            )
        ),
        stragglers=_stragglers(workflow.tasks, straggler_factor, straggler_min_tasks),
        efficiency=efficiency(workflow),
        activities=activities(workflow.activity_seconds),
    )


def critical_path(workflow: Workflow) -> CriticalPath:
    """Walk back from the task that finished last along its latest-arriving dependency.

    A dependency's data arrives at the later of its end and the end of the transfers
    into the dependent that came from its worker (or from an unknown source); the
    dependency whose data arrived last is the one the dependent waited for. Ties go to
    the dependency that ended later, then to the larger key, so the result does not
    depend on task order. When a key ran more than once, edges lead to its run that
    ended last. Dependencies outside the workflow are ignored, and a key is never
    visited twice, so inconsistent input with cycles still terminates.
    """
    tasks = workflow.tasks
    if not tasks:
        wall = workflow.wall_ns / _NS_PER_S
        return CriticalPath(
            steps=(),
            wall_s=wall,
            length_s=0.0,
            compute_s=0.0,
            transfer_s=0.0,
            gap_s=wall,
            tail_s=wall,
            prefixes=(),
            groups=(),
        )
    by_key = _last_run_by_key(tasks)
    by_end = sorted(tasks, key=_finish_order)
    ends = [t.end_ns for t in by_end]
    task = by_end[-1]
    backwards = [task]
    seen = {task.key}
    while True:
        best: TaskRun | None = None
        best_rank = (0, 0, "")
        for dep_key in task.dependencies:
            dep = by_key.get(dep_key)
            if dep is None or dep_key in seen:
                continue
            rank = (_arrival_ns(dep, task), dep.end_ns, dep_key)
            if best is None or rank > best_rank:
                best, best_rank = dep, rank
        submitted = task.submitted_ns
        if submitted is not None and (best is None or best_rank[0] < submitted):
            # Its inputs were ready before the client asked for it: the path runs
            # through what the client was waiting for, the last result before then.
            best = _last_done_before(by_end, ends, submitted, seen) or best
        if best is None:
            break
        task = best
        seen.add(task.key)
        backwards.append(task)
    return _path_of(workflow, backwards[::-1])


def _last_done_before(
    by_end: Sequence[TaskRun], ends: Sequence[int], when: int, seen: set[str]
) -> TaskRun | None:
    """The task that finished last at or before ``when`` and is not on the path yet."""
    i = bisect_right(ends, when)
    while i > 0:
        i -= 1
        if by_end[i].key not in seen:
            return by_end[i]
    return None


def _last_run_by_key(tasks: Sequence[TaskRun]) -> dict[str, TaskRun]:
    by_key = {task.key: task for task in tasks}
    if len(by_key) != len(tasks):
        # Rare (recomputed keys): only then pay for comparing runs.
        for task in tasks:
            if task.end_ns > by_key[task.key].end_ns:
                by_key[task.key] = task
    return by_key


def _finish_order(task: TaskRun) -> tuple[int, str]:
    return (task.end_ns, task.key)


def _inputs_from(task: TaskRun, dep: TaskRun) -> list[Phase]:
    """The transfers into ``task`` that may have carried ``dep``'s data."""
    return [p for p in task.transfers if p.source is None or p.source == dep.worker]


def _arrival_ns(dep: TaskRun, task: TaskRun) -> int:
    arrival = dep.end_ns
    for phase in _inputs_from(task, dep):
        arrival = max(arrival, phase.end_ns)
    return arrival


def _covered_ns(phases: Iterable[Phase], lo: int, hi: int) -> int:
    """Length of the union of ``phases`` clipped to ``[lo, hi]``: overlaps count once."""
    clipped = sorted((max(p.start_ns, lo), min(p.end_ns, hi)) for p in phases)
    covered, reached = 0, lo
    for start, end in clipped:
        start = max(start, reached)
        if end > start:
            covered += end - start
            reached = end
    return covered


def _path_of(workflow: Workflow, chain: list[TaskRun]) -> CriticalPath:
    steps: list[PathStep] = []
    compute_ns = transfer_ns = wait_ns = client_ns = 0
    prefixes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    previous: TaskRun | None = None
    for task in chain:
        ready = workflow.start_ns if previous is None else previous.end_ns
        inputs = task.transfers if previous is None else _inputs_from(task, previous)
        transfer = _covered_ns(inputs, ready, task.start_ns)
        wait = max(0, task.start_ns - ready - transfer)
        client = 0
        if previous is not None and task.submitted_ns is not None:
            client = min(wait, max(0, task.submitted_ns - ready))
        steps.append(PathStep(task, transfer / _NS_PER_S, wait / _NS_PER_S, client / _NS_PER_S))
        compute_ns += task.compute_ns
        transfer_ns += transfer
        wait_ns += wait
        client_ns += client
        for totals, name in ((prefixes, task.prefix), (groups, task.group)):
            totals[name][0] += 1
            totals[name][1] += task.compute_ns
        previous = task
    tail_ns = max(0, workflow.end_ns - chain[-1].end_ns)
    length_ns = compute_ns + transfer_ns
    return CriticalPath(
        steps=tuple(steps),
        wall_s=workflow.wall_ns / _NS_PER_S,
        length_s=length_ns / _NS_PER_S,
        compute_s=compute_ns / _NS_PER_S,
        transfer_s=transfer_ns / _NS_PER_S,
        gap_s=(wait_ns + tail_ns) / _NS_PER_S,
        tail_s=tail_ns / _NS_PER_S,
        prefixes=_shares(prefixes, length_ns),
        groups=_shares(groups, length_ns),
        client_s=client_ns / _NS_PER_S,
    )


def _shares(totals: Mapping[str, list[int]], whole_ns: int) -> tuple[Share, ...]:
    shares = [
        Share(name, count, ns / _NS_PER_S, ns / whole_ns if whole_ns else 0.0)
        for name, (count, ns) in totals.items()
    ]
    return tuple(sorted(shares, key=lambda s: (-s.seconds, s.name)))


def _durations_by_prefix(tasks: Iterable[TaskRun]) -> dict[str, list[int]]:
    """Compute times by prefix, each list sorted (medians and maxima read it)."""
    durations: dict[str, list[int]] = defaultdict(list)
    for task in tasks:
        durations[task.prefix].append(task.end_ns - task.start_ns)
    for values in durations.values():
        values.sort()
    return dict(durations)


def _median(ordered: Sequence[int]) -> float:
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


def bottlenecks(workflow: Workflow, path: CriticalPath | None = None) -> tuple[Bottleneck, ...]:
    """Every prefix with its share of total compute time and of ``path``, by the former.

    ``path`` defaults to the workflow's :func:`critical_path`.
    """
    if path is None:
        path = critical_path(workflow)
    return _bottlenecks(
        _durations_by_prefix(workflow.tasks), _counts_by_prefix(workflow.tasks), path
    )


def _counts_by_prefix(tasks: Iterable[TaskRun]) -> dict[str, int]:
    """Tasks per prefix: a group-level run counts its group's tasks."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.prefix] = counts.get(task.prefix, 0) + task.count
    return counts


def _bottlenecks(
    durations: Mapping[str, list[int]], counts: Mapping[str, int], path: CriticalPath
) -> tuple[Bottleneck, ...]:
    total_ns = sum(sum(values) for values in durations.values())
    on_path = {share.name: share for share in path.prefixes}
    ranked = []
    for prefix, values in durations.items():
        seconds_ns = sum(values)
        critical = on_path.get(prefix)
        ranked.append(
            Bottleneck(
                prefix=prefix,
                tasks=counts[prefix],
                seconds=seconds_ns / _NS_PER_S,
                share=seconds_ns / total_ns if total_ns else 0.0,
                critical_seconds=critical.seconds if critical else 0.0,
                critical_share=critical.share if critical else 0.0,
                median_s=_median(values) / _NS_PER_S,
                max_s=values[-1] / _NS_PER_S,
                wall_share=(critical.seconds / path.wall_s) if critical and path.wall_s else 0.0,
            )
        )
    return tuple(sorted(ranked, key=lambda b: (-b.seconds, b.prefix)))


def stragglers(
    workflow: Workflow, *, factor: float = 3.0, min_tasks: int = 3
) -> tuple[Straggler, ...]:
    """Tasks slower than ``factor`` times their prefix's median compute time.

    Only prefixes with at least ``min_tasks`` tasks and a non-zero median qualify: a
    median of one or two tasks, or of instantaneous ones, says nothing about typical.
    Only successful runs of single tasks take part: an erred run stopped early (or
    late) for its own reasons, and a group-level step is many tasks, not one. The
    costliest stragglers (largest excess over the median) come first.
    """
    return _stragglers(workflow.tasks, factor, min_tasks)


def _stragglers(tasks: Iterable[TaskRun], factor: float, min_tasks: int) -> tuple[Straggler, ...]:
    if factor <= 0:
        raise ValueError(f"straggler factor must be > 0, got {factor}")
    tasks = [t for t in tasks if t.state == "memory" and t.count == 1]
    durations = _durations_by_prefix(tasks)
    medians = {
        prefix: median
        for prefix, values in durations.items()
        if len(values) >= min_tasks and (median := _median(values)) > 0
    }
    # A prefix's maximum bounds its tasks: skip prefixes that cannot have a straggler.
    thresholds = {
        prefix: factor * median
        for prefix, median in medians.items()
        if durations[prefix][-1] > factor * median
    }
    found = []
    for task in tasks:
        threshold = thresholds.get(task.prefix)
        if threshold is not None and task.end_ns - task.start_ns > threshold:
            median = medians[task.prefix]
            found.append(Straggler(task, median / _NS_PER_S, task.compute_ns / median))
    found.sort(key=lambda s: (-(s.task.compute_ns - s.median_s * _NS_PER_S), s.task.key))
    return tuple(found)


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
