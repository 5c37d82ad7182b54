"""A task group's submission time is read from Dask's recent computations once per
tracked group: its group span and its root's analysis both use it, and the scan is
O(recent computations)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from otel_spans import semconv
from otel_spans.scheduler import snapshots
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.scheduler.task_groups import TaskGroups


class Group:
    """Hashable, as Dask's TaskGroup."""

    def __init__(self, name: str):
        self.name = name


def computation(start: float, *groups: Group) -> Any:
    return SimpleNamespace(start=start, groups=set(groups))


def test_the_computation_holding_the_group_read_once_per_tracked_group() -> None:
    fit, score, untracked = Group("fit-1"), Group("score-1"), Group("plot-1")
    computations = deque([computation(100.0, fit), computation(105.0, score)], maxlen=3)
    scheduler = SimpleNamespace(computations=computations)
    groups = TaskGroups(
        scheduler,  # type: ignore[arg-type]
        submit=lambda record: None,
        log=None,
        max_error_stories=0,
        max_length=100,
    )
    span = SpanIdentity("uuid", ("train",), trace_id=1, otel_span_id=2, policy=Policy("all"))
    groups.group(fit, span)  # type: ignore[arg-type]
    groups.group(score, span)  # type: ignore[arg-type]
    assert groups.submitted_at(fit) == 100.0  # type: ignore[arg-type]
    assert groups.submitted_at(score) == 105.0  # type: ignore[arg-type]
    assert groups.submitted_at(untracked) is None  # type: ignore[arg-type]
    # Dask's deque moves on: the first computation falls out. The tracked groups keep
    # what was read; an untracked one is read again each time.
    computations.extend([computation(110.0, untracked), computation(120.0), computation(130.0)])
    assert groups.submitted_at(fit) == 100.0  # type: ignore[arg-type]
    assert groups.submitted_at(score) == 105.0  # type: ignore[arg-type]
    assert groups.submitted_at(untracked) == 110.0  # type: ignore[arg-type]
    # a tracked group no computation held: None, also remembered
    lost = Group("lost-1")
    groups.group(lost, span)  # type: ignore[arg-type]
    assert groups.submitted_at(lost) is None  # type: ignore[arg-type]
    computations.append(computation(140.0, lost))
    assert groups.submitted_at(lost) is None  # type: ignore[arg-type]


def test_the_computations_that_fed_a_span_give_what_the_full_scan_gives() -> None:
    """An export reads the computations holding its span's groups once
    (``snapshots.fed_by``); its groups' submission times and computation events from
    those are what a scan of all of Dask's recent computations gives. As in Dask, a
    group is held by the computation that was newest when it was created, and no other
    (``tests/cluster/test_traces.py`` holds Dask to that)."""
    fit, score, other = Group("fit-1"), Group("score-1"), Group("plot-1")
    computations = deque(
        [
            computation(100.0, fit),
            computation(101.0, other),
            computation(105.0, score, Group("score-2")),
            computation(106.0),
        ]
    )
    for c in computations:
        c.id, c.code = f"c-{c.start}", []
    scheduler: Any = SimpleNamespace(computations=computations)
    span: Any = SimpleNamespace(groups={fit, score})
    fed = snapshots.fed_by(scheduler, span.groups)
    assert [c.start for c in fed] == [100.0, 105.0]
    for tg in (fit, score):
        assert snapshots.submitted_at(scheduler, tg, fed) == snapshots.submitted_at(scheduler, tg)
    events = snapshots.computation_events(scheduler, span, 10)
    assert snapshots.computation_events(scheduler, span, 10, fed) == events
    assert [dict(e.attributes)[semconv.DASK_COMPUTATION_GROUPS] for e in events] == [1, 1]
    assert snapshots.fed_by(scheduler, set()) == []


def test_the_scan_for_a_spans_computations_stops_once_each_group_is_found() -> None:
    """Newest first, and no further than the oldest computation holding one of the
    span's groups: a long-lived scheduler's 100 recent computations are not each read
    for every export. A group that no computation holds (scattered data) is looked for
    in all of them."""
    fit, score, scattered = Group("fit-1"), Group("score-1"), Group("data-1")
    never_read: Any = SimpleNamespace(start=1.0)  # no groups: reading it raises
    computations = deque(
        [never_read, computation(100.0, fit), computation(101.0), computation(105.0, score)]
    )
    scheduler: Any = SimpleNamespace(computations=computations)
    assert [c.start for c in snapshots.fed_by(scheduler, {fit, score})] == [100.0, 105.0]
    assert [c.start for c in snapshots.fed_by(scheduler, {score})] == [105.0]
    with pytest.raises(AttributeError):
        snapshots.fed_by(scheduler, {score, scattered})
    computations.popleft()
    assert [c.start for c in snapshots.fed_by(scheduler, {score, scattered})] == [105.0]


def test_a_roots_analysis_reads_its_trees_submissions_from_one_scan() -> None:
    """``TaskGroups.submitted_in`` gives what ``submitted_at`` gives for each group of
    the tree, tracked or not, scanning Dask's recent computations once."""
    fit, score, untracked = Group("fit-1"), Group("score-1"), Group("plot-1")
    computations = deque(
        [computation(100.0, fit), computation(101.0), computation(105.0, score, untracked)]
    )
    scheduler: Any = SimpleNamespace(computations=computations)
    groups = TaskGroups(
        scheduler, submit=lambda record: None, log=None, max_error_stories=0, max_length=100
    )
    span = SpanIdentity("uuid", ("train",), trace_id=1, otel_span_id=2, policy=Policy("all"))
    groups.group(fit, span)  # type: ignore[arg-type]
    groups.group(score, span)  # type: ignore[arg-type]
    tree: Any = SimpleNamespace(traverse_groups=lambda: iter([fit, score, untracked]))
    scans = []
    fed_by = snapshots.fed_by

    def counted(*args: Any) -> Any:
        scans.append(args)
        return fed_by(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(snapshots, "fed_by", counted)
        submitted = groups.submitted_in(tree)
        assert [submitted(tg) for tg in (fit, score, untracked)] == [100.0, 105.0, 105.0]
    assert len(scans) == 1
    assert groups.submitted_at(fit) == 100.0  # type: ignore[arg-type]
    assert groups.submitted_at(score) == 105.0  # type: ignore[arg-type]


def test_a_spans_first_computation_counts_after_dask_dropped_it() -> None:
    """A busy scheduler rolls Dask's recent computations over before a span is
    exported: the computation that held every group of the span when it was first seen
    (``first_computation``) still feeds its events and its groups' submission times,
    and no computation older than it is read."""
    fit, score, data = Group("fit-1"), Group("score-1"), Group("data-1")
    first = computation(100.0, fit)
    never_read: Any = SimpleNamespace(start=1.0)  # no groups: reading it raises
    scheduler: Any = SimpleNamespace(computations=deque([never_read, first]))
    assert snapshots.first_computation(scheduler, SimpleNamespace(groups={fit})) is first  # type: ignore[arg-type]
    partly: Any = SimpleNamespace(groups={fit, score})  # a group made by an older graph
    assert snapshots.first_computation(scheduler, partly) is None
    assert snapshots.first_computation(scheduler, SimpleNamespace(groups=set())) is None  # type: ignore[arg-type]
    later = computation(110.0, score)
    # dropped by Dask: the first still counts, before those Dask lists
    scheduler.computations = deque([computation(105.0), later, computation(120.0)])
    assert [c.start for c in snapshots.fed_by(scheduler, {fit}, first)] == [100.0]
    assert [c.start for c in snapshots.fed_by(scheduler, {fit, score}, first)] == [100.0, 110.0]
    # still listed: the scan stops there, also for a group no computation holds
    scheduler.computations = deque([never_read, first, later])
    assert [c.start for c in snapshots.fed_by(scheduler, {fit, score}, first)] == [100.0, 110.0]
    assert [c.start for c in snapshots.fed_by(scheduler, {fit, data}, first)] == [100.0]
