"""Reading Dask's ``Span`` objects into records: snippets, states, events, deltas.

Functions here run on the scheduler's event loop (called by the other modules of
:mod:`otel_spans.scheduler`) and turn live ``Span``/``TaskGroup`` state into immutable
records and counter deltas. They never keep references to Dask objects and never
touch the OTel SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, MutableMapping
from collections.abc import Set as AbstractSet
from functools import partial
from itertools import compress, islice, pairwise
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from distributed.metrics import time as _now

from otel_spans import semconv
from otel_spans.config import CodeCapture
from otel_spans.records import CodeSnippet, CounterDelta, SpanEventRecord, counter_delta, ns

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import Computation, TaskGroup
    from distributed.spans import Span

#: States reported as a snapshot for spans exported unfinished (at shutdown).
PENDING_STATES = frozenset({"processing", "waiting", "queued", "no-worker"})

#: Dask's synthetic "idle" key in ``Span.cumulative_worker_metrics``.
IDLE_KEY = ("execute", "N/A", semconv.IDLE_ACTIVITY, "seconds")
#: A span's CPU made available, among the values it reported (see :func:`cpu_delta`).
_CPU_KEY = ("cpu",)


#: Fields of a Dask event that carry exception texts (``distributed.core.error_message``);
#: left out of log bodies under ``capture.exceptions: type``.
EXCEPTION_FIELDS = frozenset({"exception", "exception_text", "traceback", "traceback_text"})


def span_uuid_of_key(scheduler: Scheduler, key: Any) -> str | None:
    """The uuid of the Dask span a task's group is in; None for a key that is unknown,
    unhashable (keys named by messages and annotations are input) or in no span."""
    try:
        ts = scheduler.tasks.get(key)
    except TypeError:
        return None
    group = ts.group if ts is not None else None
    return group.span_id if group is not None and group.span_id else None


def submitted_at(
    scheduler: Scheduler, tg: TaskGroup, fed: list[Computation] | None = None
) -> float | None:
    """When the client submitted the computation that created ``tg``: the earliest
    start of Dask's recent computations (a bounded deque) holding it; None when none
    does. O(recent computations), a set lookup each; O(``fed``) given :func:`fed_by`
    of groups ``tg`` is one of (every computation holding it is there)."""
    computations = list(scheduler.computations) if fed is None else fed
    starts = [c.start for c in computations if tg in c.groups]
    return min(starts) if starts else None


def fed_by(
    scheduler: Scheduler, groups: AbstractSet[TaskGroup], first: Computation | None = None
) -> list[Computation]:
    """Dask's recent computations that hold any of ``groups`` (a span's own, or its
    tree's), oldest first: read once for the span's computation events and its groups'
    submission times.

    Dask adds a task group to one computation only, the newest at the group's creation
    (``Scheduler.new_task``): read newest first, the scan stops once every group is
    found, and at ``first`` (:func:`first_computation` of the span: no older one holds
    any of its groups), which is counted whether Dask still lists it or not. Groups no
    computation holds (scattered data) are looked for in all of them.
    """
    if not groups:  # a span with sub-spans alone (a root, often): no computation fed it
        return []
    out = []
    left = len(groups) - (len(groups & first.groups) if first is not None else 0)
    if left > 0:
        for computation in reversed(scheduler.computations):
            if computation is first:
                break
            held = computation.groups
            if not groups.isdisjoint(held):
                out.append(computation)
                left -= len(groups & held) if len(groups) > 1 else 1
                if left <= 0:
                    break
    if first is not None:
        out.append(first)
    out.reverse()
    return out


def first_computation(scheduler: Scheduler, span: Span) -> Computation | None:
    """The newest computation when it holds every group of ``span``: when the span is
    first seen in the graph that made it, the computation of that graph (any later
    group of the span is in a newer one); else None."""
    computations = scheduler.computations
    groups = span.groups
    if not computations or not groups:
        return None
    newest = computations[-1]
    return newest if groups <= newest.groups else None


def root_of(span: Span) -> Span:
    # Dask's ``parent`` dereferences a weak reference on each read: once per level.
    parent = span.parent
    while parent is not None:
        span, parent = parent, parent.parent
    return span


def tree_spans(span: Span) -> list[Span]:
    """``span`` and its sub-spans in ``Span.traverse_spans`` order (depth first, a
    parent before its children), read once by a caller that walks them several times:
    Dask's walk passes each span up through one generator per level."""
    if not span.children:
        return [span]
    out: list[Span] = []
    stack = [span]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def tree_groups(nodes: list[Span]) -> list[TaskGroup]:
    """The task groups of the spans ``nodes`` (:func:`tree_spans` of a tree), in
    ``Span.traverse_groups`` order; a span alone lists its own."""
    if len(nodes) == 1:
        return list(nodes[0].groups)
    return [tg for node in nodes for tg in node.groups]


def code_snippets(span: Span, capture: CodeCapture, keep: int) -> tuple[CodeSnippet, ...]:
    """The innermost captured frame of each computation that fed ``span`` directly.

    Snippets are cut to ``keep`` characters (``Settings.code_snippet_length``) and
    ``capture: none`` drops the location too, here, so nothing left out is queued.
    """
    if capture == "none":
        return ()
    out = []
    for frames in span._code:
        if frames:
            frame = frames[-1]
            out.append(CodeSnippet(frame.code[:keep], frame.filename, frame.lineno_frame))
    return tuple(out)


def pending_states(span: Span) -> dict[str, int]:
    """Tasks of the span tree not yet finished, by state."""
    states: dict[str, int] = {}
    for tg in span.traverse_groups():
        for state, count in tg.states.items():
            if count and state in PENDING_STATES:
                states[state] = states.get(state, 0) + count
    return states


def worker_metric(tags: tuple[str, ...] | None, key: Hashable, value: float) -> CounterDelta | None:
    """A delta of one fine-performance-metric key; None for keys of unknown shape.

    Per-span keys are ``("execute", prefix, activity, unit)`` and
    ``("p2p", where, activity, unit)``; cluster keys have other contexts too
    (``gather-dep``, ``get-data``...) with any number of middle elements.
    """
    if not isinstance(key, tuple) or len(key) < 3:
        return None
    context, unit, activity = str(key[0]), str(key[-1]), str(key[-2])
    names = semconv.DASK_UNITS.get(unit)
    if names is None:
        return None
    execute_metric, p2p_metric, cluster_metric, _ = names
    middle = "/".join(str(part) for part in key[1:-2])
    attrs: list[tuple[str, str]] = []
    if tags is None:
        metric = cluster_metric
        attrs.append((semconv.ATTR_CONTEXT, context))
        if context == "execute" and middle:
            attrs.append((semconv.DASK_TASK_PREFIX, middle))
        elif context == "p2p" and middle:
            attrs.append((semconv.ATTR_P2P_WHERE, middle))
    elif context == "execute":
        metric = execute_metric
        attrs.append((semconv.DASK_TASK_PREFIX, middle))
    elif context == "p2p":
        metric = p2p_metric
        attrs.append((semconv.ATTR_P2P_WHERE, middle))
    else:
        return None
    attrs.append((semconv.ATTR_ACTIVITY, activity))
    return CounterDelta(metric, tags, tuple(attrs), value)


def grown(seen: MutableMapping[Any, float], key: Hashable, value: float) -> float:
    """:func:`growth` of one value (0 when it did not grow), without the mapping and
    the generator one value does not need; updates ``seen``."""
    before = seen.get(key, 0.0)
    if value == before:
        return 0.0
    seen[key] = value
    return value - before if value > before else 0.0


def growth(
    current: Mapping[Any, float], seen: MutableMapping[Any, float]
) -> Iterator[tuple[Any, float]]:
    """How much each cumulative value grew since it was last seen; updates ``seen``.

    Values that went down (which Dask documents as possible for hand-made metrics)
    are taken as the new baseline: a counter never decreases.
    """
    for key, value in list(current.items()):
        delta = grown(seen, key, value)
        if delta:
            yield key, delta


def busy_and_idle(tree: Mapping[Any, float]) -> tuple[float, float]:
    """A workflow's busy and idle thread-seconds from its root's
    ``Span.cumulative_worker_metrics`` (the whole tree, with Dask's idle key): busy is
    every execute-context second of its tasks, idle what the cluster offered beside."""
    busy = idle = 0.0
    for key, value in list(tree.items()):
        if isinstance(key, tuple) and len(key) == 4 and key[0] == "execute":
            if key == IDLE_KEY:
                idle += value
            elif key[3] == "seconds":
                busy += value
    return busy, idle


class TreeTimes(NamedTuple):
    """A span tree's ``Span.stop``, ``nthreads_intervals`` and ``active_cpu_seconds``,
    computed as Dask's properties do but from one walk of its task groups: Dask's
    ``stop`` walks the tree twice (``done``, then the groups' stops), and its
    intervals read ``stop`` three times and ``done`` once more."""

    stop: float
    intervals: list[tuple[float, float, int]]
    active_cpu_seconds: float


#: A :class:`TreeTimes` by ``tuple.__new__`` (see ``records.log_entry``): read on every
#: export, where the NamedTuple's own ``__new__`` is a Python call, cold on the loop.
_tree_times: Callable[[tuple[float, list[tuple[float, float, int]], float]], TreeTimes] = partial(
    tuple.__new__, TreeTimes
)


def tree_times(span: Span, groups: list[TaskGroup] | None = None) -> TreeTimes:
    """:class:`TreeTimes` of ``span`` (``groups``: its tree's task groups, when the
    caller walked the tree already), its CPU integrated as Dask's property does."""
    if groups is None:
        groups = list(span.traverse_groups())
    enqueued = span.enqueued
    done = all(map(group_done, groups))
    stop = max(map(_STOP, groups), default=enqueued) if done else _now()
    if stop < enqueued:
        stop = enqueued
    if span.id == "(merged)":  # Dask's merge of several spans: its own gaps apply
        intervals = span.nthreads_intervals
    else:
        intervals = nthreads_intervals(
            span._total_nthreads_history, span._total_nthreads_offset, enqueued, stop, done
        )
    return _tree_times((stop, intervals, cpu_seconds(intervals)))


def cpu_seconds(intervals: list[tuple[float, float, int]]) -> float:
    """Thread-seconds made available over ``intervals``, summed as Dask sums them; one
    interval (the thread count did not change: nearly every span) without a generator
    (``0.0 +`` is the first step of that sum)."""
    if len(intervals) == 1:
        t0, t1, n = intervals[0]
        return 0.0 + (t1 - t0) * n
    return sum((t1 - t0) * n for t0, t1, n in intervals)


#: A task group's compute start and stop, read in C by ``map`` rather than by a
#: generator's frame per group.
_START = attrgetter("start")
_STOP = attrgetter("stop")

#: Task states that leave ``TaskGroup.done`` true, whatever their count.
_FINAL_STATES = frozenset({"memory", "erred", "released", "forgotten"})


def group_done(tg: TaskGroup) -> bool:
    """``TaskGroup.done``: every state that counts a task is final. Dask's property
    walks all its states in a generator; this picks the counted ones in C."""
    states = tg.states
    return all(map(_FINAL_STATES.__contains__, compress(states, states.values())))


def tree_start(span: Span, groups: list[TaskGroup]) -> float:
    """``Span.start`` given the tree's ``groups``: its earliest compute start, 0 if no
    task finished yet."""
    out = min(filter(None, map(_START, groups)), default=0.0)  # the groups with a start
    return max(out, span.enqueued) if out else out


def nthreads_intervals(
    history: list[tuple[float, int]], offset: int, enqueued: float, stop: float, done: bool
) -> list[tuple[float, float, int]]:
    """``Span.nthreads_intervals`` of a span (not a merge) given its ``stop`` and
    ``done``: the cluster's thread count (Dask's ``total_nthreads_history`` from the
    span's ``offset``, forward-filled) over each stretch of ``[enqueued, stop)``."""
    cut = stop if done else 0.0
    points: list[tuple[float, int]] = []
    for t, n in islice(history, offset, None):
        if cut and t >= cut:
            break
        points.append((t if t > enqueued else enqueued, n))
    if not points:
        return []
    if len(points) == 1 and points[0][0] == enqueued:
        # The common span: the thread count did not change while it ran.
        return [(enqueued, stop, points[0][1])] if enqueued < stop else []
    times = sorted({enqueued, stop, *(t for t, _ in points)})
    out = []
    i, threads, last = 0, 0, len(points)
    for t0, t1 in pairwise(times):
        while i < last and points[i][0] <= t0:
            threads = points[i][1]
            i += 1
        if enqueued <= t0 < stop:
            out.append((t0, t1, threads))
    return out


def tree_metrics(
    span: Span, active_cpu_seconds: float, nodes: list[Span] | None = None
) -> dict[Any, float]:
    """``Span.cumulative_worker_metrics`` with the tree's ``active_cpu_seconds`` given
    (read once by the caller), computed as Dask's property does: the sum of the tree's
    own metrics, and the seconds no task accounts for under Dask's idle key
    (``nodes``: :func:`tree_spans`, when the caller read them already)."""
    out = _summed(tree_spans(span) if nodes is None else nodes, all_keys=True)
    known = sum(v for k, v in out.items() if _execute_seconds(k))
    out[IDLE_KEY] = max(0.0, active_cpu_seconds - known)
    return out


def tree_idle(nodes: Iterable[Span], active_cpu_seconds: float) -> float:
    """``tree_metrics(root, active_cpu_seconds)[IDLE_KEY]`` of the tree of ``nodes``
    (its spans, top-down)."""
    return tree_busy_and_idle(nodes, active_cpu_seconds)[1]


def tree_busy_and_idle(nodes: Iterable[Span], active_cpu_seconds: float) -> tuple[float, float]:
    """:func:`busy_and_idle` of ``tree_metrics(root, active_cpu_seconds, nodes)``,
    summing only the tree's task time (the keys the idle share subtracts), in the same
    order: a root that is not diagnosed, and the idle share alone, want these two
    values, not the tree's every key."""
    busy = known = 0.0
    for key, value in _summed(nodes, all_keys=False).items():
        known += value
        if len(key) == 4 and key != IDLE_KEY:
            busy += value
    return busy, max(0.0, active_cpu_seconds - known)


def _execute_seconds(key: Any) -> bool:
    """Whether a worker metric key is task time, which the idle share subtracts."""
    return bool(key[0] == "execute" and key[-1] == "seconds")


def _summed(nodes: Iterable[Span], *, all_keys: bool) -> dict[Any, float]:
    """The spans' own worker metrics summed by key, first seen first (Dask's
    ``sum_mappings``, without its KeyError per first key): every key, or the task
    time alone."""
    out: dict[Any, float] = {}
    for node in nodes:
        for key, value in node._cumulative_worker_metrics.items():
            # _execute_seconds, inline: every key of every span of a finished workflow
            if all_keys or (key[0] == "execute" and key[-1] == "seconds"):
                out[key] = out[key] + value if key in out else value
    return out


def live_cpu_seconds(span: Span) -> float:
    """``Span.active_cpu_seconds`` of a running span, up to its latest finished task.

    Dask counts a running span up to *now*, but once it is done only up to the end of
    its last task, which the worker reported and which is earlier than the moment the
    scheduler heard of it. A counter cannot go back: read "up to now", a span read
    just before it turned done would report more CPU than it ends with. Up to the
    latest finished task (``TaskGroup.stop`` only grows) the live value never passes
    the final one. Walks the subtree, as Dask's own property does.
    """
    cap = max((tg.stop for tg in span.traverse_groups()), default=0.0)
    if cap <= span.enqueued:
        return 0.0
    return sum((min(t1, cap) - t0) * n for t0, t1, n in span.nthreads_intervals if t0 < cap)


def cpu_delta(
    tags: tuple[str, ...], reported: MutableMapping[Any, float], active_cpu_seconds: float
) -> list[CounterDelta]:
    """The growth of a span's CPU made available (``Span.active_cpu_seconds``)."""
    value = grown(reported, _CPU_KEY, active_cpu_seconds)
    return [counter_delta((semconv.M_SPAN_CPU_AVAILABLE, tags, (), value))] if value else []


def computation_events(
    scheduler: Scheduler, span: Span, limit: int, fed: list[Computation] | None = None
) -> tuple[SpanEventRecord, ...]:
    """One event per compute/persist/submit whose task groups fed this span
    (``fed``: :func:`fed_by`, when the caller read it already).

    ``limit`` is the longest code snippet kept (``Settings.code_snippet_length``).
    """
    own = span.groups
    events = []
    for computation in fed_by(scheduler, own) if fed is None else fed:
        groups = computation.groups
        shared = len(groups & own)
        attrs: tuple[tuple[str, str | int], ...] = (
            (semconv.DASK_COMPUTATION_ID, str(computation.id)),
            (semconv.DASK_COMPUTATION_GROUPS, shared),
        )
        if limit:  # the first snippet (a SortedSet of frame stacks: iterated, not copied)
            frames = next(iter(computation.code), None)
            if frames:
                attrs += ((semconv.DASK_SPAN_CODE_SNIPPET, frames[-1].code[:limit]),)
        events.append(SpanEventRecord(semconv.EVENT_COMPUTATION, ns(computation.start), attrs))
    return tuple(events)
