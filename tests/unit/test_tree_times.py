"""``snapshots.tree_times`` computes a Dask span tree's stop, thread intervals and CPU
made available from one walk of its groups: it must give what Dask's own properties
give, for any history of the cluster's thread count, finished or not."""

from __future__ import annotations

from typing import Any

import pytest
from distributed.scheduler import ALL_TASK_STATES, TaskGroup, TaskPrefix
from distributed.spans import Span
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_spans.scheduler import snapshots


class Group:
    """What ``Span.start``/``stop``/``done`` read of a task group (hashable, like a TaskGroup)."""

    def __init__(self, stop: float, done: bool, start: float = 0.0):
        self.stop = stop
        self.states = {"memory": 1, "processing": 0 if done else 1}
        self.start = start

    @property
    def done(self) -> bool:
        return bool(TaskGroup.done.fget(self))  # type: ignore[attr-defined]


def tree(
    history: list[tuple[float, int]], offset: int, enqueued: float, groups: list[Group]
) -> Span:
    """A root with a child, the groups split between them, its clock and history set."""
    root = Span(("root",), "root-id", None, history[: offset + 1])
    child = Span(("root", "child"), "child-id", root, history[: offset + 1])
    root.children.append(child)
    for span in (root, child):
        span.enqueued = enqueued
        span._total_nthreads_history = history  # the scheduler's list, grown since
    root.groups = set(groups[::2])
    child.groups = set(groups[1::2])
    return root


@st.composite
def cases(draw: Any) -> tuple[list[tuple[float, int]], int, float, list[Group], float]:
    steps = draw(st.lists(st.integers(1, 50), min_size=1, max_size=8))
    times = [100.0]
    for step in steps:
        times.append(times[-1] + step / 10)
    history = [(t, draw(st.integers(0, 16))) for t in times]
    offset = draw(st.integers(0, len(history) - 1))
    # enqueued at or after the history entry current then, before the next one
    later = history[offset + 1][0] if offset + 1 < len(history) else history[offset][0] + 5
    enqueued = draw(st.floats(history[offset][0], later, exclude_max=True))
    stops = draw(st.lists(st.floats(enqueued - 1, times[-1] + 5), min_size=1, max_size=5))
    done = draw(st.lists(st.booleans(), min_size=len(stops), max_size=len(stops)))
    groups = [Group(s, d) for s, d in zip(stops, done, strict=True)]
    now = draw(st.floats(enqueued, times[-1] + 10))
    return history, offset, enqueued, groups, now


@settings(max_examples=400, deadline=None)
@given(cases())
def test_tree_times_are_dasks_stop_intervals_and_cpu(
    case: tuple[list[tuple[float, int]], int, float, list[Group], float],
) -> None:
    history, offset, enqueued, groups, now = case
    root = tree(history, offset, enqueued, groups)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("distributed.spans.time", lambda: now)
        mp.setattr(snapshots, "_now", lambda: now)
        try:
            intervals = root.nthreads_intervals
        except ValueError:  # Dask: no thread count before the end (stop == enqueued)
            intervals = []
        expected = (root.stop, intervals, sum((t1 - t0) * n for t0, t1, n in intervals))
        assert tuple(snapshots.tree_times(root)) == expected
        assert tuple(snapshots.tree_times(root, list(root.traverse_groups()))) == expected


def test_a_finished_tree_ends_at_its_last_group_and_counts_each_thread_change() -> None:
    """2 threads from enqueue, 6 from 102 (a worker joined), the last group ends at 105:
    2 s × 2 + 3 s × 6 threads offered; a group still running would make it "now"."""
    history = [(90.0, 2), (102.0, 6), (200.0, 8)]
    root = tree(history, 0, 100.0, [Group(104.0, True), Group(105.0, True)])
    times = snapshots.tree_times(root)
    assert times.stop == 105.0
    assert times.intervals == [(100.0, 102.0, 2), (102.0, 105.0, 6)]
    assert times.active_cpu_seconds == 2 * 2 + 3 * 6


@pytest.mark.parametrize(
    ("starts", "expected"), [((0.0, 0.0), 0.0), ((0.0, 103.0, 101.0), 101.0), ((99.5,), 100.0)]
)
def test_tree_start_is_dasks_start(starts: tuple[float, ...], expected: float) -> None:
    """The earliest compute start of the tree, 0 until a task finished, never before
    the span was enqueued (Dask absorbs a worker's clock error so)."""
    groups = [Group(0.0, False, start) for start in starts]
    root = tree([(90.0, 2)], 0, 100.0, groups)
    assert root.start == expected
    assert snapshots.tree_start(root, list(root.traverse_groups())) == expected


@given(st.lists(st.integers(0, 3), min_size=len(ALL_TASK_STATES), max_size=len(ALL_TASK_STATES)))
def test_group_done_is_dasks_done(counts: list[int]) -> None:
    """A group is done when every state that counts a task is final, as Dask has it."""
    tg = TaskGroup("x-1", TaskPrefix("x"))
    tg.states = dict(zip(sorted(ALL_TASK_STATES), counts, strict=True))
    assert snapshots.group_done(tg) is tg.done


_KEYS = st.sampled_from(
    [
        ("execute", "load", "thread-cpu", "seconds"),
        ("execute", "load", "thread-noncpu", "seconds"),
        ("execute", "step", "thread-cpu", "seconds"),
        ("execute", "step", "disk-write", "bytes"),
        ("execute", "seconds"),  # task time of another shape: subtracted, not busy
        snapshots.IDLE_KEY,  # as if a worker reported Dask's idle key itself
        ("gather-dep", "network", "seconds"),
        ("get-data", "serialize", "seconds"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(_KEYS, st.floats(0, 1e3), max_size=8), min_size=1, max_size=4),
    st.floats(0, 5e3),
)
def test_a_trees_busy_and_idle_are_those_of_its_cumulative_metrics(
    own: list[dict[tuple[str, ...], float]], active: float
) -> None:
    """A root's busy and idle thread-seconds, read from its tree's task time alone, are
    what its whole ``Span.cumulative_worker_metrics`` give, to the last bit."""
    root = Span(("root",), "root-id", None, [(0.0, 1)])
    nodes = [root]
    for i, metrics in enumerate(own[1:]):
        child = Span(("root", str(i)), f"child-{i}", root, [(0.0, 1)])
        child._cumulative_worker_metrics = metrics  # type: ignore[assignment]
        root.children.append(child)
        nodes.append(child)
    root._cumulative_worker_metrics = own[0]  # type: ignore[assignment]
    expected = snapshots.busy_and_idle(snapshots.tree_metrics(root, active, nodes))
    assert snapshots.tree_busy_and_idle(nodes, active) == expected
    assert snapshots.tree_idle(nodes, active) == expected[1]
