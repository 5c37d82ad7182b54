"""The wall time of a workflow as pools that rules claim from, once.

The critical path splits the wall time into four pools that add up to it: *client*
(the client's time between a result and the next submission), *wait* (path tasks ready
but not running: scheduling, queueing for a thread, the time after the last task),
*inner* (at group granularity, the part of a group's step beyond its slowest task: its
other tasks running or waiting for a thread) and *work* (compute and transfers along
the path). Each rule of :mod:`.rules` asks pools for the seconds its evidence explains;
the :class:`Ledger` grants at most what is left, so no second of wall time is explained
twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from otel_spans.analysis.evidence import Evidence
from otel_spans.records import EvidenceValue

#: What a finding is about: a task group, a Dask span (joined tags) or the workflow.
GROUP, SPAN, WORKFLOW = "group", "span", "workflow"


class Ledger:
    """The wall time's pools; what is granted from one is gone for the next rule."""

    def __init__(self, evidence: Evidence) -> None:
        path = evidence.path
        inner = _inner_wait(evidence) if evidence.path_of_groups else 0.0
        self.wall = max(evidence.wall_s, 0.0)
        self.left = {
            "client": max(path.client_s, 0.0),
            "wait": max(path.scheduling_s, 0.0) + max(path.tail_s, 0.0),
            "inner": inner,
            "work": max(path.length_s - inner, 0.0),
        }
        #: Seconds of the path's steps (work and inner), for rules that explain a
        #: fraction of the time tasks ran.
        self.steps = self.left["work"] + inner
        self.granted = 0.0

    def claim(self, seconds: float, *pools: str) -> float:
        """Grant up to ``seconds`` from ``pools`` in order; never past the wall time."""
        want = min(max(seconds, 0.0), self.wall - self.granted)
        got = 0.0
        for pool in pools:
            take = min(want - got, self.left[pool])
            if take > 0:
                self.left[pool] -= take
                got += take
        self.granted += got
        return got


_name = attrgetter("name")


def _inner_wait(evidence: Evidence) -> float:
    """Seconds of the group-level path's steps beyond their slowest task: tasks of the
    group that were ready and waited (for a thread, or for each other)."""
    groups = evidence.groups
    by_name = dict(zip(map(_name, groups), groups, strict=True))  # no frame of its own
    total = 0.0
    for step in evidence.path.steps:
        group = by_name.get(step.task.group)
        if group is None:
            continue
        longest = group.slowest_s if group.slowest_s is not None else group.mean_s
        total += max(step.compute_s - longest, 0.0)
    return min(total, evidence.path.length_s)


@dataclass(frozen=True, slots=True)
class Draft:
    id: str
    subject: str
    subject_kind: str
    evidence: tuple[tuple[str, EvidenceValue], ...]
    seconds: float
    advice: str


Rule = Callable[[Evidence, Ledger], "Draft | None"]
