"""The critical path: the chain of dependent tasks that determined a workflow's wall time.

Its own module because it is the one analysis that walks the task graph (the others
aggregate by prefix or by thread), and the scheduler reads it alone on every finished
root (:mod:`otel_spans.scheduler.root_analysis`) as does the run comparison
(:mod:`otel_spans.report.compare`). Inputs are integer nanoseconds; results are float
seconds computed from integer sums. Iterative and ``O(n log n)`` in the number of tasks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from otel_spans.analysis.model import Phase, TaskRun, Workflow

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
    ends = list(map(_end, by_end))
    task = by_end[-1]
    backwards = [task]
    seen = {task.key}
    while True:
        best: TaskRun | None = None
        best_rank = (0, 0, "")
        local = not task.transfers  # a group-level step: its inputs arrive as they end
        for dep_key in task.dependencies:
            dep = by_key.get(dep_key)
            if dep is None or dep_key in seen:
                continue
            end = dep.end_ns
            rank = (end if local else _arrival_ns(dep, task), end, dep_key)
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
    by_key = dict(zip(map(_key, tasks), tasks, strict=True))
    if len(by_key) != len(tasks):
        # Rare (recomputed keys): only then pay for comparing runs.
        for task in tasks:
            if task.end_ns > by_key[task.key].end_ns:
                by_key[task.key] = task
    return by_key


#: Tasks by end, ties by key.
_finish_order = attrgetter("end_ns", "key")
_end, _key = attrgetter("end_ns"), attrgetter("key")


def _inputs_from(task: TaskRun, dep: TaskRun) -> list[Phase]:
    """The transfers into ``task`` that may have carried ``dep``'s data."""
    return [p for p in task.transfers if p.source is None or p.source == dep.worker]


def _arrival_ns(dep: TaskRun, task: TaskRun) -> int:
    arrival = dep.end_ns
    if not task.transfers:  # a group-level step, or a task with local inputs
        return arrival
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
    # name -> [tasks, compute ns]
    prefixes: dict[str, list[int]] = {}
    groups: dict[str, list[int]] = {}
    previous: TaskRun | None = None
    for task in chain:
        start, end = task.start_ns, task.end_ns
        ready = workflow.start_ns if previous is None else previous.end_ns
        transfer = 0
        if task.transfers:
            inputs = task.transfers if previous is None else _inputs_from(task, previous)
            transfer = _covered_ns(inputs, ready, start) if inputs else 0
        wait = max(0, start - ready - transfer)
        client = 0
        if previous is not None and task.submitted_ns is not None:
            client = min(wait, max(0, task.submitted_ns - ready))
        steps.append(PathStep(task, transfer / _NS_PER_S, wait / _NS_PER_S, client / _NS_PER_S))
        compute = end - start
        compute_ns += compute
        transfer_ns += transfer
        wait_ns += wait
        client_ns += client
        for totals, name in ((prefixes, task.prefix), (groups, task.group)):
            total = totals.get(name)
            if total is None:
                totals[name] = [1, compute]
            else:
                total[0] += 1
                total[1] += compute
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
    shares = []
    for name, (count, ns) in totals.items():
        shares.append(Share(name, count, ns / _NS_PER_S, ns / whole_ns if whole_ns else 0.0))
    return tuple(sorted(shares, key=lambda s: (-s.seconds, s.name)))
