"""Bottlenecks and stragglers: where compute time went, by task prefix.

Both read each prefix's sorted compute times (the bottleneck's median and maximum, the
straggler's threshold over the median), so they share this module; neither walks the
task graph (that is :mod:`.critical_path`, whose result a bottleneck's critical share
reads). Inputs are integer nanoseconds; results are float seconds computed from integer
sums.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from otel_spans.analysis.critical_path import CriticalPath, critical_path
from otel_spans.analysis.model import TaskRun, Workflow

_NS_PER_S = 1e9


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
