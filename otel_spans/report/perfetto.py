"""A workflow as a Perfetto trace (ui.perfetto.dev; chrome://tracing opens it too).

The file is Chrome Trace Event JSON in its "JSON Object Format": ``{"traceEvents":
[...], "displayTimeUnit": "ms", "otherData": {...}}`` with timestamps in microseconds since
the earliest instant in the workflow (``otherData.origin_unix_ns`` is that instant as
epoch nanoseconds, so absolute times can be recovered without float precision loss).

Layout:

- process "workflow": the Dask span hierarchy as nested complete events, then a
  "critical path" track with the tasks on the critical path;
- one process per worker, one track per worker thread with a complete event per
  compute phase, and "transfers" tracks with the incoming transfers;
- flow arrows along dependencies whose two tasks ran on different tracks, critical
  path edges first, at most ``max_flows`` of them (10,000 by default): viewers slow
  down and clutter with more, and a same-track dependency needs no arrow.

Viewers only nest complete events that are properly nested on one track, so events
that would overlap without nesting (concurrent transfers, sibling spans, tasks of
unknown thread) are spread over extra tracks instead of being dropped by the viewer.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from typing import Any

from otel_spans.analysis.model import SpanTimes, TaskRun, Workflow
from otel_spans.analysis.workflow import Analysis
from otel_spans.report.markup import printable
from otel_spans.report.trace_events import ArgValue, Complete, Event, Flow, Metadata, pieces

#: Default cap on dependency arrows.
MAX_FLOWS = 10_000
#: Chrome's reserved colour names (Perfetto picks its own colours and ignores them).
CRITICAL_COLOR = "terrible"
ERRED_COLOR = "bad"
_WORKFLOW_PID = 1
_FLOW_NUDGE_US = 0.001  # 1 ns: flow ends bind to the slice they sit strictly inside


def render(
    workflow: Workflow,
    analysis: Analysis,
    spans: Iterable[SpanTimes] = (),
    *,
    max_flows: int = MAX_FLOWS,
) -> str:
    """The trace as compact JSON (see the module docstring for the layout).

    Parameters
    ----------
    workflow, analysis
        The workflow and ``analyse(workflow)``; critical path tasks are marked with
        ``args.critical`` and the ``cname`` :data:`CRITICAL_COLOR`.
    spans
        Dask spans as ``(tags root first, start_ns, end_ns)``.
    max_flows
        Most dependency arrows to draw; how many were left out is
        ``otherData.flows_dropped``.
    """
    return "".join(stream(workflow, analysis, spans, max_flows=max_flows))


def stream(
    workflow: Workflow,
    analysis: Analysis,
    spans: Iterable[SpanTimes] = (),
    *,
    max_flows: int = MAX_FLOWS,
) -> Iterator[str]:
    """:func:`render`'s text in pieces, an event at a time, for writing to a file: a
    million-task trace is then never held as one string beside its events."""
    events, other = _events(workflow, analysis, spans, max_flows)
    return pieces(events, other)


def _events(
    workflow: Workflow, analysis: Analysis, spans: Iterable[SpanTimes], max_flows: int
) -> tuple[list[Event], dict[str, Any]]:
    if max_flows < 0:
        raise ValueError(f"max_flows must be >= 0, got {max_flows}")
    spans = list(spans)
    origin = _origin(workflow, spans)
    builder = _Builder(origin)
    builder.workflow_process(spans, analysis)
    path = [step.task for step in analysis.critical_path.steps]
    tracks = builder.worker_processes(workflow.tasks, path)
    dropped = builder.flows(workflow.tasks, tracks, path, max_flows)
    other = {
        "workflow": printable(workflow.name),
        "origin_unix_ns": origin,
        "flows_dropped": dropped,
    }
    return builder.events, other


def _origin(workflow: Workflow, spans: Sequence[SpanTimes]) -> int:
    origin = workflow.start_ns
    for task in workflow.tasks:
        origin = min(origin, task.start_ns, *(p.start_ns for p in task.transfers))
    return min([origin, *(start for _, start, _ in spans)])


def _lanes(intervals: Sequence[tuple[int, int]]) -> list[int]:
    """The lowest free lane for each interval so that no lane holds an overlap.

    Greedy in start order with a heap of busy lanes: the fewest lanes possible,
    ``O(n log n)``.
    """
    lanes = [0] * len(intervals)
    busy: list[tuple[int, int]] = []
    free: list[int] = []
    count = 0
    for i in sorted(range(len(intervals)), key=intervals.__getitem__):
        start, end = intervals[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lanes[i] = heapq.heappop(free)
        else:
            lanes[i], count = count, count + 1
        heapq.heappush(busy, (end, lanes[i]))
    return lanes


def _nested_lanes(intervals: Sequence[tuple[int, int]]) -> list[int]:
    """Lanes in which intervals either nest or are disjoint (for the span tree).

    Intervals sorted parent-first go into the first lane whose innermost open interval
    contains them (or which has none open).
    """
    lanes = [0] * len(intervals)
    stacks: list[list[int]] = []
    for i in sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1])):
        start, end = intervals[i]
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                lanes[i] = lane
                break
        else:
            lanes[i] = len(stacks)
            stacks.append([end])
    return lanes


class _Builder:
    """Accumulates events for one :func:`render` call; never reused."""

    def __init__(self, origin: int) -> None:
        self.origin = origin
        self.events: list[Event] = []

    def us(self, ns: int) -> float:
        return (ns - self.origin) / 1000

    def track(self, pid: int, tid: int, name: str) -> None:
        self.events.append(Metadata("thread_name", pid, tid, printable(name)))
        self.events.append(Metadata("thread_sort_index", pid, tid, tid))

    def process(self, pid: int, name: str) -> None:
        self.events.append(Metadata("process_name", pid, 0, printable(name)))
        self.events.append(Metadata("process_sort_index", pid, 0, pid))

    def workflow_process(self, spans: Sequence[SpanTimes], analysis: Analysis) -> None:
        self.process(_WORKFLOW_PID, "workflow")
        lanes = _nested_lanes([(start, end) for _, start, end in spans])
        for lane in sorted(set(lanes)):
            self.track(_WORKFLOW_PID, lane + 1, "Dask spans" + (f" ({lane + 1})" if lane else ""))
        order = sorted(range(len(spans)), key=lambda i: (spans[i][1], -spans[i][2], spans[i][0]))
        for i in order:
            name, start, end = spans[i]
            self.events.append(
                Complete(
                    name=printable(name[-1] if name else ""),
                    cat="span",
                    pid=_WORKFLOW_PID,
                    tid=lanes[i] + 1,
                    ts=self.us(start),
                    dur=(end - start) / 1000,
                    args={"span": printable(" / ".join(name))},
                )
            )
        # Skewed worker clocks can make consecutive steps overlap: spread those too.
        first = max(lanes, default=-1) + 2
        steps = [step.task for step in analysis.critical_path.steps]
        path_lanes = _lanes([(task.start_ns, task.end_ns) for task in steps])
        for lane in sorted(set(path_lanes)):
            self.track(
                _WORKFLOW_PID, first + lane, "critical path" + (f" ({lane + 1})" if lane else "")
            )
        for task, lane in zip(steps, path_lanes, strict=True):
            self.events.append(self.compute(task, _WORKFLOW_PID, first + lane, critical=True))

    def compute(self, task: TaskRun, pid: int, tid: int, *, critical: bool) -> Complete:
        args: dict[str, ArgValue] = {
            "key": printable(task.key),
            "prefix": printable(task.prefix),
            "group": printable(task.group),
            "state": printable(task.state),
            "nbytes": task.nbytes,
        }
        if task.count != 1:  # a task group standing for its tasks (sampled task spans)
            args["tasks"] = task.count
        if task.span_name:
            args["span"] = printable(" / ".join(task.span_name))
        if critical:
            args["critical"] = True
        cname = CRITICAL_COLOR if critical else ERRED_COLOR if task.state == "erred" else None
        return Complete(
            name=printable(task.prefix),
            cat="compute",
            pid=pid,
            tid=tid,
            ts=self.us(task.start_ns),
            dur=task.compute_ns / 1000,
            args=args,
            cname=cname,
        )

    def worker_processes(
        self, tasks: Sequence[TaskRun], path: Sequence[TaskRun]
    ) -> list[tuple[int, int]]:
        """Compute and transfer events by worker; returns each task's ``(pid, tid)``."""
        # Keys first: comparing whole runs (a recomputed key has two) costs a hash.
        critical_keys = {task.key for task in path}
        critical = set(path)
        by_worker: dict[str, list[int]] = defaultdict(list)
        for i, task in enumerate(tasks):
            by_worker[task.worker].append(i)
        tracks: list[tuple[int, int]] = [(0, 0)] * len(tasks)
        for pid, worker in enumerate(sorted(by_worker), _WORKFLOW_PID + 1):
            self.process(pid, f"worker {worker}")
            members = by_worker[worker]
            by_thread: dict[int | None, list[int]] = defaultdict(list)
            for i in members:
                by_thread[tasks[i].thread].append(i)
            tid = 0
            for thread in sorted(by_thread, key=lambda t: (t is None, t or 0)):
                indices = by_thread[thread]
                lanes = _lanes([(tasks[i].start_ns, tasks[i].end_ns) for i in indices])
                label = f"thread {thread}" if thread is not None else "thread unknown"
                for lane in range(max(lanes) + 1):
                    self.track(pid, tid + lane + 1, label + (f" ({lane + 1})" if lane else ""))
                for i, lane in zip(indices, lanes, strict=True):
                    tracks[i] = (pid, tid + lane + 1)
                    task = tasks[i]
                    self.events.append(
                        self.compute(
                            task,
                            pid,
                            tid + lane + 1,
                            critical=task.key in critical_keys and task in critical,
                        )
                    )
                tid += max(lanes) + 1
            self.transfers(pid, tid, [tasks[i] for i in members])
        return tracks

    def transfers(self, pid: int, first_tid: int, tasks: Sequence[TaskRun]) -> None:
        phases = [(task, phase) for task in tasks for phase in task.transfers]
        lanes = _lanes([(phase.start_ns, phase.end_ns) for _, phase in phases])
        for lane in sorted(set(lanes)):
            self.track(pid, first_tid + lane + 1, f"transfers ({lane + 1})")
        for (task, phase), lane in zip(phases, lanes, strict=True):
            args: dict[str, ArgValue] = {"key": printable(task.key)}
            if phase.source is not None:
                args["source"] = printable(phase.source)
            self.events.append(
                Complete(
                    name=printable(phase.action),
                    cat="transfer",
                    pid=pid,
                    tid=first_tid + lane + 1,
                    ts=self.us(phase.start_ns),
                    dur=(phase.end_ns - phase.start_ns) / 1000,
                    args=args,
                )
            )

    def flows(
        self,
        tasks: Sequence[TaskRun],
        tracks: Sequence[tuple[int, int]],
        path: Sequence[TaskRun],
        max_flows: int,
    ) -> int:
        """Arrows along cross-track dependencies, critical ones first; returns how many
        were left out."""
        # Like the analysis, an edge to a recomputed key leads to its run that ended last.
        index: dict[str, int] = {}
        for i, task in enumerate(tasks):
            j = index.get(task.key)
            if j is None or task.end_ns > tasks[j].end_ns:
                index[task.key] = i
        on_path = [index[task.key] for task in path if task.key in index]
        edges: list[tuple[int, int]] = list(pairwise(on_path))
        path_edges = set(edges)
        for consumer, task in enumerate(tasks):
            for dep in task.dependencies:
                producer = index.get(dep)
                if producer is not None and (producer, consumer) not in path_edges:
                    edges.append((producer, consumer))
        drawn = dropped = 0
        for producer, consumer in edges:
            if tracks[producer] == tracks[consumer]:
                continue
            if drawn >= max_flows:
                dropped += 1
                continue
            drawn += 1
            for i, start in ((producer, True), (consumer, False)):
                task, (pid, tid) = tasks[i], tracks[i]
                nudge = min(_FLOW_NUDGE_US, task.compute_ns / 2000)
                ts = self.us(task.end_ns) - nudge if start else self.us(task.start_ns) + nudge
                self.events.append(Flow(drawn, start, pid, tid, ts))
        return dropped
