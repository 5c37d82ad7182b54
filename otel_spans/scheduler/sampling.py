"""Which finished tasks become spans: a bounded budget, decided as tasks finish.

A trace must stay readable in Jaeger and Tempo for a million-task graph, so a task
span is kept only when it tells something:

* always: tasks that erred, tasks that ran more than once (retried, or recomputed
  after a worker was lost), and tasks whose code started spans of its own (their
  spans need this parent);
* the ``slowest`` K tasks of each task group (a min-heap of size K per group: a task
  that is not among the K slowest so far is dropped at once, without ever being
  recorded);
* optionally a deterministic ``ratio`` of the rest (by a hash of the key, so a rerun
  keeps the same tasks);
* but neither of these two for a run that computed for less than ``min_duration``
  (default 1 ms). Such a task spent less time on a thread than the scheduler spends on
  any task (0.4–1 ms): its span would show scheduling overhead, not work, and its
  group's span already sums it up. Graphs of tiny tasks are exactly the ones with the
  most tasks, so this is also where most of the cost of task spans would go;
* never more than ``max_per_trace`` task spans in one trace, whatever the reason.

State is O(groups × K) plus one counter per trace; per-task bookkeeping ends with the
decision. Everything here is pure bookkeeping over opaque records: it never sees Dask
or OTel objects, so the budget can be property-tested on its own.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from otel_spans.config import TaskMode

R = TypeVar("R")

#: Why a task span was kept (the ``dask.task.sampled_because`` attribute).
ERRED, RECOMPUTED, SLOWEST, RATIO, ALL = "erred", "recomputed", "slowest", "ratio", "all"
#: Kept because code running in the task started spans of its own under it.
CHILDREN = "children"


@dataclass(frozen=True)
class Policy:
    mode: TaskMode = "sampled"
    slowest: int = 5
    ratio: float = 0.0
    max_per_trace: int = 10_000
    #: Seconds of compute below which a run is not sampled (only kept for a reason).
    min_duration: float = 0.001


@dataclass
class GroupTally:
    """Per task group: the held slowest tasks and the counts of what was decided."""

    #: (duration, tie-breaker, record) of the K slowest tasks so far (a min-heap).
    held: list[tuple[float, int, object]] = field(default_factory=list)
    kept: int = 0
    dropped: int = 0


class TaskSampler(Generic[R]):
    """Decides, task by task, which task spans to keep; see the module docstring."""

    def __init__(self) -> None:
        #: Groups with tasks decided and not flushed yet (flushed at their export).
        self._groups: dict[Hashable, GroupTally] = {}
        #: trace id -> task spans kept; forgotten with the trace's root
        #: (:meth:`forget_trace`), so a caller's trace that spans several workflows
        #: starts a fresh budget once an earlier one's root is forgotten.
        self._per_trace: dict[int, int] = {}
        self._tiebreak = itertools.count()

    def _tally(self, group: Hashable) -> GroupTally:
        tally = self._groups.get(group)
        if tally is None:
            tally = self._groups[group] = GroupTally()
        return tally

    def _count(self, trace: int, n: int) -> None:
        self._per_trace[trace] = self._per_trace.get(trace, 0) + n

    def offer(
        self,
        group: Hashable,
        trace: int,
        policy: Policy,
        duration: float,
        must_keep: str | None,
        key_hash: int,
    ) -> str | None:
        """Decide about one finished task.

        Returns the reason to keep it *now* (the caller exports it at once), ``"hold"``
        when it joins the group's slowest (the caller must then :meth:`hold` the
        record), or None when it is dropped (counted here).
        """
        # Runs for every finished task: the tally and per-trace lookups written out.
        tally = self._groups.get(group)
        if tally is None:
            tally = self._groups[group] = GroupTally()
        mode = policy.mode
        if mode == "none":
            tally.dropped += 1
            return None
        kept_in_trace = self._per_trace.get(trace, 0)
        if kept_in_trace >= policy.max_per_trace:
            tally.dropped += 1
            return None
        if mode == "all":
            reason: str | None = ALL
        elif must_keep is not None:
            reason = must_keep
        elif duration < policy.min_duration:
            tally.dropped += 1
            return None
        elif policy.ratio and (key_hash % 1_000_000) < policy.ratio * 1_000_000:
            reason = RATIO
        else:
            reason = None
        if reason is not None:
            tally.kept += 1
            self._per_trace[trace] = kept_in_trace + 1
            return reason
        if policy.slowest and (len(tally.held) < policy.slowest or duration > tally.held[0][0]):
            return "hold"
        tally.dropped += 1
        return None

    def hold(self, group: Hashable, trace: int, policy: Policy, duration: float, record: R) -> None:
        """Keep ``record`` among the group's slowest; the fastest held one may drop out."""
        tally = self._tally(group)
        item = (duration, next(self._tiebreak), record)
        if len(tally.held) < policy.slowest:
            heapq.heappush(tally.held, item)
            self._count(trace, 1)
        else:
            heapq.heapreplace(tally.held, item)
            tally.dropped += 1

    def flush(self, group: Hashable) -> tuple[list[tuple[float, R]], int, int]:
        """The held (duration, record) pairs of a finished group, slowest first, and its
        kept/dropped counts.

        The group's state is released; a group that gets more tasks later (a
        recomputation) starts a fresh tally.
        """
        tally = self._groups.pop(group, None)
        if tally is None:
            return [], 0, 0
        held = [(d, record) for d, _, record in sorted(tally.held, key=lambda t: (-t[0], t[1]))]
        return held, tally.kept + len(held), tally.dropped  # type: ignore[return-value]

    def forget_trace(self, trace: int) -> None:
        self._per_trace.pop(trace, None)

    def traces(self) -> int:
        return len(self._per_trace)

    def held(self) -> int:
        """Task records held in memory right now (at most groups × K)."""
        return sum(len(t.held) for t in self._groups.values())
