"""What each Dask span's own tasks and each task group did to the cluster's memory.

One :class:`SpanMemory` per tracked span (on its
:class:`~otel_spans.scheduler.span_state.TrackedSpan`, so it lives and goes with it),
one :class:`GroupMemory` per task group in it, fed from three places:

* the transition hook, O(1) per task entering or leaving ``memory``
  (:func:`held_changed`): bytes of results held now and at most, by the scheduler's
  ``TaskState.nbytes``, the span's own, its group's and its root's whole tree's;
* Dask's events (:mod:`otel_spans.scheduler.worker_memory`): worker pauses that
  overlapped a span's tasks, workers lost while running or holding them;
* the span's own fine performance metrics at its export (:func:`span_footprint`):
  bytes its tasks spilled to disk (``disk-write``) and read back (``disk-read``).

Nothing here keeps a reference to a Dask object: groups are keyed by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_spans.records import MemoryRecord, SpanEventRecord

#: Most ``dask.worker.lost`` events kept for one Dask span's export.
MAX_LOST_EVENTS = 8
#: Most task groups of one span whose memory is followed (the rest are not).
MAX_GROUPS = 10_000


@dataclass(slots=True)
class GroupMemory:
    """Memory of one task group of a span."""

    held: int = 0
    peak: int = 0
    pauses: int = 0
    pause_seconds: float = 0.0
    workers_lost: int = 0


@dataclass(slots=True)
class SpanMemory:
    """Memory of one Dask span's own tasks (and, on a root, of its whole tree's)."""

    held: int = 0
    peak: int = 0
    #: Roots only: every span of the tree together.
    tree_held: int = 0
    tree_peak: int = 0
    pauses: int = 0
    #: Seconds of the pauses that ended.
    pause_seconds: float = 0.0
    #: Pauses under way: worker address -> (when it paused, the groups it overlapped).
    paused: dict[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)
    workers_lost: int = 0
    #: Its task groups' memory (at most ``MAX_GROUPS``, see :meth:`group_of`): the first
    #: group's inline, since a span of one group then fills no dict the garbage
    #: collector would track, and the others' by name.
    first_group: str | None = None
    first: GroupMemory | None = None
    groups: dict[str, GroupMemory] = field(default_factory=dict)
    #: ``dask.worker.lost`` events for the next export (at most ``MAX_LOST_EVENTS``): a
    #: tuple, grown by copying, since nearly every span has none and a list per span
    #: would be one more object for the garbage collector to walk.
    lost_events: tuple[SpanEventRecord, ...] = ()
    #: Lost-worker events left out beyond ``MAX_LOST_EVENTS``.
    lost_events_dropped: int = 0
    #: The root's ledger, whose tree counters this span's tasks feed (itself on a root);
    #: None until the first task of the span held something.
    root: SpanMemory | None = None

    def group_of(self, name: str) -> GroupMemory | None:
        """The memory of its task group ``name``; None while none is kept."""
        return self.first if name == self.first_group else self.groups.get(name)

    def group(self, name: str) -> GroupMemory | None:
        """The memory of its task group ``name``, kept from now on unless ``MAX_GROUPS``
        are kept already."""
        group = self.group_of(name)
        if group is None:
            if self.first is None:
                self.first_group, group = name, GroupMemory()
                self.first = group
            elif len(self.groups) < MAX_GROUPS - 1:
                group = self.groups[name] = GroupMemory()
        return group

    def pause_seconds_at(self, now: float) -> float:
        """Seconds of its pauses, those under way counted up to ``now``."""
        if not self.paused:  # nearly always (read for every span of a finished root)
            return self.pause_seconds
        return self.pause_seconds + sum(max(now - t, 0.0) for t, _ in self.paused.values())

    def add_lost_event(self, event: SpanEventRecord) -> None:
        if len(self.lost_events) < MAX_LOST_EVENTS:
            self.lost_events += (event,)
        else:
            self.lost_events_dropped += 1


def held_changed(memory: SpanMemory, group: str, delta: int) -> None:
    """A result of ``group`` entered (``delta`` > 0) or left memory: O(1).

    Written without ``max()`` and method calls: it runs twice per task."""
    held = memory.held + delta
    memory.held = held = held if held > 0 else 0
    if held > memory.peak:
        memory.peak = held
    # SpanMemory.group_of, inline
    state = memory.first if group == memory.first_group else memory.groups.get(group)
    if state is None:
        state = memory.group(group)
    if state is not None:
        held = state.held + delta
        state.held = held = held if held > 0 else 0
        if held > state.peak:
            state.peak = held
    root = memory.root
    if root is not None:
        held = root.tree_held + delta
        root.tree_held = held = held if held > 0 else 0
        if held > root.tree_peak:
            root.tree_peak = held


def paused(memory: SpanMemory, worker: str, groups: tuple[str, ...], now: float) -> None:
    """A worker running tasks of ``groups`` of this span paused."""
    if worker in memory.paused:
        return
    memory.pauses += 1
    memory.paused[worker] = (now, groups)
    for name in groups:
        state = memory.group(name)
        if state is not None:
            state.pauses += 1


def resumed(memory: SpanMemory, worker: str, now: float) -> None:
    """A pause of ``worker`` that overlapped this span's tasks ended (or it was lost)."""
    started = memory.paused.pop(worker, None)
    if started is None:
        return
    seconds = max(now - started[0], 0.0)
    memory.pause_seconds += seconds
    for name in started[1]:
        state = memory.group_of(name)
        if state is not None:
            state.pause_seconds += seconds


def lost(memory: SpanMemory, groups: tuple[str, ...]) -> None:
    """A worker running or holding tasks of ``groups`` of this span was lost."""
    memory.workers_lost += 1
    for name in groups:
        state = memory.group(name)
        if state is not None:
            state.workers_lost += 1


def disk_bytes(own: Mapping[Any, float], prefix: str | None = None) -> tuple[float, float]:
    """Bytes written to disk (spilled) and read back (unspilled) by a span's own tasks,
    of one ``prefix`` or all, from ``Span._cumulative_worker_metrics``."""
    spilled = unspilled = 0.0
    for key, value in list(own.items()):
        if not (isinstance(key, tuple) and len(key) == 4 and key[0] == "execute"):
            continue
        if key[3] != "bytes" or (prefix is not None and key[1] != prefix):
            continue
        if key[2] == "disk-write":
            spilled += value
        elif key[2] == "disk-read":
            unspilled += value
    return spilled, unspilled


def span_footprint(
    memory: SpanMemory, own: Mapping[Any, float], *, is_root: bool, now: float
) -> MemoryRecord:
    """The memory record of a span's export. O(its own metric keys)."""
    spilled, unspilled = disk_bytes(own)
    return MemoryRecord(
        peak=memory.peak,
        held=memory.held,
        tree_peak=memory.tree_peak if is_root else 0,
        spilled=spilled,
        unspilled=unspilled,
        pauses=memory.pauses,
        pause_seconds=memory.pause_seconds_at(now),
        workers_lost=memory.workers_lost,
    )


def group_footprint(
    memory: SpanMemory, name: str, prefix: str, own: Mapping[Any, float], now: float
) -> MemoryRecord:
    """The memory record of one task group of the span (disk bytes: its prefix's in
    the span, which Dask's metrics do not split further)."""
    state = memory.group_of(name) or GroupMemory()
    pause_seconds = state.pause_seconds
    if memory.paused:  # pauses under way, counted up to now
        pause_seconds += sum(
            max(now - t, 0.0) for t, groups in memory.paused.values() if name in groups
        )
    spilled, unspilled = disk_bytes(own, prefix)
    return MemoryRecord(
        peak=state.peak,
        held=state.held,
        spilled=spilled,
        unspilled=unspilled,
        pauses=state.pauses,
        pause_seconds=pause_seconds,
        workers_lost=state.workers_lost,
    )
