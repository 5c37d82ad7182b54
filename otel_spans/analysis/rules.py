"""One rule per finding id: a pure function of the evidence and the wall-time ledger.

Each rule decides whether its pathology shows in the :class:`~.evidence.Evidence`,
what it is about, the numbers that say so, and how many seconds of the wall time it
explains, which it claims from the :class:`~.ledger.Ledger`. :data:`RULES` is the
order of the claims. Thresholds are module constants, documented with the measurement
behind each in docs/telemetry.md (*Diagnosis*).
"""

from __future__ import annotations

from otel_spans.analysis.evidence import (
    CPU_ACTIVITY,
    NONCPU_ACTIVITY,
    SPILL_ACTIVITIES,
    Evidence,
    GroupEvidence,
)
from otel_spans.analysis.ledger import GROUP, SPAN, WORKFLOW, Draft, Ledger, Rule
from otel_spans.records import EvidenceValue

#: Scheduler time per task, seconds: 520-600 tiny tasks/s with the default
#: worker-saturation (docs/performance.md, distributed 2026.8).
SCHEDULER_TASK_S = 1 / 600
#: A task computing for less than this is tiny: the scheduler spends 0.36-0.94 ms of
#: CPU on each task, so below 1 ms it costs more than it does.
TINY_TASK_S = 0.001
#: ... in groups of at least this many tasks: fewer cost the scheduler under 0.17 s
#: together, and a workflow that short is bound by its fixed costs (submitting the
#: graph, the first round trip), not by a cost per task.
TINY_MIN_TASKS = 100
#: A task slower than this multiple of its group's typical task is a straggler (the
#: report's straggler factor), in groups of at least this many tasks.
STRAGGLER_FACTOR = 3.0
STRAGGLER_MIN_TASKS = 3
#: GIL contention: off-CPU time at least this share of the tasks' thread time ...
GIL_NONCPU_SHARE = 0.5
#: ... while their threads together used at least this much of one core per worker
#: (CPU share × threads per worker): I/O-bound tasks (sleep, network) use almost none,
#: and a worker sharing two cores with up to seven other busy processes still gets it.
GIL_MIN_CORE = 0.25
#: Parallel efficiency at or above which waiting tasks waited for a thread (queueing),
#: and below which the cluster was underutilised.
QUEUEING_EFFICIENCY = 0.6
UNDERUTILISED_EFFICIENCY = 0.5
#: Memory pressure when the workflow spilled at least this multiple of the most bytes
#: it held at once: its results did not fit in the workers' memory (each byte held at
#: peak went to disk once on average), beyond the odd spill of a long-held result.
SPILL_PEAK_RATIO = 1.0


def _on_path(evidence: Evidence) -> set[str]:
    return {step.task.group for step in evidence.path.steps}


def erred(evidence: Evidence, ledger: Ledger) -> Draft | None:
    failed = [g for g in evidence.groups if g.erred]
    if not failed:
        return None
    worst = max(failed, key=lambda g: (g.erred, g.name))
    threads = max(evidence.peak_threads, 1)
    wasted = sum(g.erred * g.mean_s for g in failed) / threads
    return Draft(
        "erred",
        worst.name,
        GROUP,
        (
            ("erred_tasks", sum(g.erred for g in failed)),
            ("groups", len(failed)),
            ("group_erred_tasks", worst.erred),
        ),
        ledger.claim(wasted, "work", "inner"),
        "Tasks failed: read the exception on the task span or the dask.task.erred log;"
        " their work is lost and what depends on them never ran.",
    )


def recomputation(evidence: Evidence, ledger: Ledger) -> Draft | None:
    again = [(g, g.runs - g.tasks) for g in evidence.groups if g.runs > g.tasks]
    if not again:
        return None
    worst, extra = max(again, key=lambda ge: (ge[1], ge[0].name))
    # A rerun happens once the results are lost, usually after the rest of its group
    # finished: it extends the group's step by its own compute time.
    seconds = sum(n * g.mean_s for g, n in again)
    return Draft(
        "recomputation",
        worst.name,
        GROUP,
        (("recomputed_runs", sum(n for _, n in again)), ("group_recomputed_runs", extra)),
        ledger.claim(seconds, "inner", "work"),
        "Tasks ran again after their results were lost (a worker died or was restarted):"
        " check worker memory limits and logs, and persist results reused later.",
    )


def straggler(evidence: Evidence, ledger: Ledger) -> Draft | None:
    on_path: set[str] | None = None  # gathered once a group has a straggler
    # On a task-level path the slow task itself must be on it, not only its group.
    keys = None if evidence.path_of_groups else set(evidence.path.keys)
    best: tuple[float, GroupEvidence, float, float] | None = None
    for g in evidence.groups:
        slowest, typical = g.slowest_s, g.typical_s
        if slowest is None or not typical:
            continue
        if g.tasks < STRAGGLER_MIN_TASKS or slowest <= STRAGGLER_FACTOR * typical:
            continue
        if on_path is None:
            on_path = _on_path(evidence)
        if g.name not in on_path:
            continue
        if keys is not None and g.slowest_key not in keys:
            continue
        excess = slowest - typical
        if best is None or excess > best[0]:
            best = (excess, g, slowest, typical)
    if best is None:
        return None
    excess, g, slowest, typical = best
    return Draft(
        "straggler",
        g.name,
        GROUP,
        (
            ("task", g.slowest_key or ""),
            ("task_s", round(slowest, 6)),
            ("typical_s", round(typical, 6)),
            ("ratio", round(slowest / typical, 2)),
            ("group_tasks", g.tasks),
        ),
        ledger.claim(excess, "work"),
        "One task held the critical path far beyond its group's typical task: look at its"
        " input (a skewed partition) or its worker, and split or rebalance that work.",
    )


def tiny_tasks(evidence: Evidence, ledger: Ledger) -> Draft | None:
    tiny = [
        g
        for g in evidence.groups
        if g.tasks >= TINY_MIN_TASKS and g.compute_s and g.mean_s < TINY_TASK_S
    ]
    count = sum(g.tasks for g in tiny)
    if not count:
        return None
    worst = max(tiny, key=lambda g: (g.tasks, g.name))
    # The measured scheduler cost is a floor: on a loaded machine each task costs more,
    # on the scheduler and on the worker (deserialising, executor hand-off). Where a
    # group-level path runs through a tiny group, all of its step but its compute
    # spread over the threads is that per-task overhead. (A task-level path's waits
    # are not: they hold the start-up and any queueing as well.)
    names = {g.name: g for g in tiny}
    threads = max(evidence.peak_threads, 1)
    overhead = 0.0
    for s in evidence.path.steps if evidence.path_of_groups else ():
        group = names.get(s.task.group)
        if group is not None:
            overhead += max(s.compute_s - group.compute_s / threads, 0.0)
    return Draft(
        "tiny-tasks",
        worst.name,
        GROUP,
        (
            ("tiny_tasks", count),
            ("group_tasks", worst.tasks),
            ("mean_task_ms", round(worst.mean_s * 1e3, 4)),
            ("scheduler_ms_per_task", round(SCHEDULER_TASK_S * 1e3, 3)),
            ("overhead_on_path_s", round(overhead, 6)),
        ),
        ledger.claim(max(count * SCHEDULER_TASK_S, overhead), "wait", "inner", "work"),
        "Tasks compute for less than the scheduler spends on each (about 1 ms): use"
        " bigger chunks or partitions, aiming at tasks of 100 ms or more.",
    )


def _waited_for(evidence: Evidence, actions: tuple[str, ...]) -> float:
    """Seconds of the group-level path's waits that were ``actions`` (a group's
    ``transfer`` or ``disk-read`` phases: they run before its compute starts, so on the
    path they are the wait before its step), each wait up to its group's total."""
    if not evidence.path_of_groups:
        return 0.0
    by_name = {g.name: g for g in evidence.groups}
    waited = 0.0
    for s in evidence.path.steps:
        group = by_name.get(s.task.group)
        if group is not None:
            phases = sum(group.durations.get(a, 0.0) for a in actions)
            waited += min(max(s.wait_s - s.client_s, 0.0), phases)
    return waited


def _busiest_span(evidence: Evidence, activities: tuple[str, ...]) -> str:
    ranked = [
        (sum(acts.get(a, 0.0) for a in activities), name)
        for name, acts in evidence.span_activities.items()
    ]
    seconds, name = max(ranked, default=(0.0, evidence.name))
    return name if seconds > 0 else evidence.name


def _held_most(group: GroupEvidence | None) -> tuple[tuple[str, EvidenceValue], ...]:
    """Evidence naming the stage and group that held the most bytes at peak."""
    if group is None:
        return ()
    return (("span", group.span), ("group_peak_bytes", group.peak_bytes))


def spilling(evidence: Evidence, ledger: Ledger) -> Draft | None:
    disk = sum(evidence.activities.get(a, 0.0) for a in SPILL_ACTIVITIES)
    if disk <= 0:  # most workflows: no busy time summed
        return None
    busy = evidence.busy_s
    if busy <= 0:
        return None
    fraction = min(disk / busy, 1.0)
    subject, kind = _busiest_span(evidence, SPILL_ACTIVITIES), SPAN
    biggest = evidence.biggest_group
    if biggest is not None:  # what filled the memory, not where the disk time fell
        subject, kind = biggest.name, GROUP
    return Draft(
        "spilling",
        subject,
        kind,
        (
            ("disk_s", round(disk, 6)),
            ("of_worker_time", round(fraction, 4)),
            *(
                (a.replace("-", "_") + "_s", round(evidence.activities.get(a, 0.0), 6))
                for a in SPILL_ACTIVITIES
            ),
            *_held_most(biggest),
        ),
        ledger.claim(fraction * ledger.steps, "work", "inner")
        + ledger.claim(_waited_for(evidence, SPILL_ACTIVITIES), "wait"),
        "Workers wrote results to disk and read them back: give each worker more memory"
        " (fewer threads per worker, or bigger workers), use smaller partitions, or"
        " release intermediate results sooner.",
    )


def memory_pressure(evidence: Evidence, ledger: Ledger) -> Draft | None:
    spilled = evidence.spilled_bytes
    big_spill = spilled > 0 and spilled >= SPILL_PEAK_RATIO * evidence.peak_bytes
    if not (evidence.pauses or evidence.workers_lost or big_spill):
        return None
    biggest = evidence.biggest_group
    # A paused worker starts nothing: the path's tasks ready on it waited. The work
    # lost with a worker is recomputation's (claimed before this rule), so only the
    # pause seconds are claimed here, from what the ledger has left.
    return Draft(
        "memory-pressure",
        biggest.name if biggest is not None else evidence.name,
        GROUP if biggest is not None else WORKFLOW,
        (
            *_held_most(biggest),
            ("peak_bytes", evidence.peak_bytes),
            ("spilled_bytes", int(spilled)),
            ("unspilled_bytes", int(evidence.unspilled_bytes)),
            ("pauses", evidence.pauses),
            ("pause_s", round(evidence.pause_s, 6)),
            ("workers_lost", evidence.workers_lost),
        ),
        ledger.claim(evidence.pause_s, "wait", "inner"),
        "Workers ran out of memory (paused, spilled their results or were lost): give"
        " each worker more memory or fewer threads, use smaller partitions, and release"
        " or persist less of the group that held the most at once.",
    )


def data_transfer(evidence: Evidence, ledger: Ledger) -> Draft | None:
    moved = [g for g in evidence.groups if g.durations.get("transfer", 0.0) > 0]
    transfer = sum(g.durations["transfer"] for g in moved)
    if transfer <= 0 and evidence.path.transfer_s <= 0:
        return None
    fraction = transfer / (transfer + evidence.busy_s) if transfer > 0 else 0.0
    seconds = max(evidence.path.transfer_s, fraction * ledger.steps)
    waited = _waited_for(evidence, ("transfer",))
    worst = max(moved, key=lambda g: (g.durations["transfer"], g.name), default=None)
    return Draft(
        "data-transfer",
        worst.name if worst else evidence.name,
        GROUP if worst else WORKFLOW,
        (
            ("transfer_s", round(transfer, 6)),
            ("of_worker_time", round(fraction, 4)),
            ("on_critical_path_s", round(evidence.path.transfer_s, 6)),
        ),
        ledger.claim(seconds, "work", "inner") + ledger.claim(waited, "wait"),
        "Tasks waited for their inputs to cross workers: move less data (reduce before"
        " combining, smaller intermediates), or keep dependent work on fewer, bigger"
        " workers.",
    )


def gil_contention(evidence: Evidence, ledger: Ledger) -> Draft | None:
    threads = evidence.worker_threads
    if threads < 2:
        return None
    best: tuple[float, str, float, float] | None = None
    for name, acts in evidence.span_activities.items():
        cpu, off = acts.get(CPU_ACTIVITY, 0.0), acts.get(NONCPU_ACTIVITY, 0.0)
        on_thread = cpu + off
        if on_thread <= 0 or off / on_thread < GIL_NONCPU_SHARE:
            continue
        if cpu / on_thread * threads < GIL_MIN_CORE:
            continue  # almost no CPU: waiting on I/O, not on the GIL
        if best is None or off > best[0]:
            best = (off, name, cpu, on_thread)
    busy = evidence.busy_s if best is not None else 0.0  # summed only for a candidate
    if best is None or busy <= 0:
        return None
    off, name, cpu, on_thread = best
    return Draft(
        "gil-contention",
        name,
        SPAN,
        (
            ("thread_s", round(on_thread, 6)),
            ("cpu_s", round(cpu, 6)),
            ("noncpu_share", round(off / on_thread, 4)),
            ("threads_per_worker", threads),
        ),
        ledger.claim(min(off / busy, 1.0) * ledger.steps, "work", "inner"),
        "Threads of a worker waited for each other on the GIL (pure-Python tasks): run"
        " more worker processes with fewer threads each, or code that releases the GIL.",
    )


def client_bound(evidence: Evidence, ledger: Ledger) -> Draft | None:
    steps = [s for s in evidence.path.steps if s.client_s > 0]
    if not steps:
        return None
    worst = max(steps, key=lambda s: (s.client_s, s.task.group))
    return Draft(
        "client-bound",
        worst.task.group,
        GROUP,
        (("client_s", round(evidence.path.client_s, 6)), ("stages", len(steps) + 1)),
        ledger.claim(evidence.path.client_s, "client"),
        "The cluster waited for the client between a result and the next submission:"
        " submit dependent stages together (futures, persist, one compute of several"
        " collections) instead of compute, inspect, compute again.",
    )


def queueing(evidence: Evidence, ledger: Ledger) -> Draft | None:
    eff = evidence.efficiency
    if eff is None or eff < QUEUEING_EFFICIENCY:
        return None
    return Draft(
        "queueing",
        evidence.name,
        WORKFLOW,
        (
            ("waiting_s", round(ledger.left["wait"] + ledger.left["inner"], 6)),
            ("efficiency", round(eff, 4)),
            ("threads", evidence.peak_threads),
        ),
        ledger.claim(ledger.left["wait"] + ledger.left["inner"], "wait", "inner"),
        "Ready tasks waited for a free thread while every thread was busy: the cluster"
        " is small for this graph; more workers would bring the wall time towards the"
        " critical path.",
    )


def underutilised(evidence: Evidence, ledger: Ledger) -> Draft | None:
    eff = evidence.efficiency
    if eff is None or eff >= UNDERUTILISED_EFFICIENCY or evidence.peak_threads < 2:
        return None
    wall = evidence.wall_s
    sequential = sum(g.compute_s for g in evidence.groups)
    return Draft(
        "underutilised",
        evidence.name,
        WORKFLOW,
        (
            ("efficiency", round(eff, 4)),
            ("mean_parallelism", round(sequential / wall, 3) if wall > 0 else 0.0),
            ("threads", evidence.peak_threads),
        ),
        ledger.claim(sum(ledger.left.values()), "work", "inner", "wait"),
        "Most threads had nothing to run: the graph is narrower than the cluster, so"
        " its chain of dependent tasks set the wall time; use fewer workers, or split"
        " the work along that chain into parallel tasks.",
    )


#: Rules in the order they claim wall time: specific causes first, so that a broad
#: one (queueing, underutilised) only gets what no specific one explained.
RULES: tuple[Rule, ...] = (
    erred,
    recomputation,
    straggler,
    tiny_tasks,
    memory_pressure,
    spilling,
    data_transfer,
    gil_contention,
    client_bound,
    queueing,
    underutilised,
)
