"""Which run of a key is which attempt (``TaskGroups._reruns``), and that every attempt
of a key in a Dask span is exported under one span id (docs/trace-context.md, Reruns).

The scheduler plugin calls :meth:`TaskGroups.abandoned` when a key leaves
``processing`` or ``erred`` for ``released``, :meth:`TaskGroups.lost` for results lost
with a worker, and :meth:`TaskGroups.forget_key` when a key is forgotten.
"""

from __future__ import annotations

from otel_spans import ids
from otel_spans.task_records import DeferredTask
from tests.support.scheduler_standins import Group, Scheduler, Task, finished, groups, identity


def finish(key: str, *before: str) -> DeferredTask:
    """The exported record of ``key``'s finished run, after the bookkeeping ``before``
    (its group exported, so that a run held among the slowest is exported too)."""
    submitted: list[object] = []
    dag = groups(Scheduler(), submitted)
    for step in before:
        if step == "lost":
            dag.lost([key])
        else:
            getattr(dag, step)(key)
    group, span = Group("inc", 1), identity("sampled")
    dag.task_finished(Task(key, group), "processing", "memory", finished("w"), span, 0.5)
    assert dag.stats()["pending_reruns"] == 0  # the finished run took its entry
    dag.export_groups([group], span, 0.0)  # type: ignore[list-item]
    (record,) = [r for r in submitted if isinstance(r, DeferredTask)]
    return record


def test_each_abandoned_or_lost_run_is_one_more_attempt_under_the_same_span_id() -> None:
    """Catches: a span id that depends on the attempt (the worker cannot know it); an
    abandoned run not counted, or its rerun not kept (it has no other reason here)."""
    first = finish("inc-1")
    assert (first.attempt, first.sampled_because) == (1, "slowest")
    rerun = finish("inc-1", "abandoned", "lost", "abandoned")
    assert (rerun.attempt, rerun.sampled_because) == (4, "recomputed")
    assert first.span_id == rerun.span_id == ids.task_span_id("uuid-1", "inc-1")


def test_a_forgotten_key_submitted_again_is_attempt_one() -> None:
    """Catches: a released key's abandoned run counted as an attempt of a new task."""
    again = finish("inc-1", "abandoned", "forget_key")
    assert (again.attempt, again.sampled_because) == (1, "slowest")
