"""Which run of a key is which attempt (``TaskGroups.reruns``), and that every attempt
of a key in a Dask span is exported under one span id (docs/trace-context.md, Reruns).

The scheduler plugin calls :meth:`TaskGroups.abandoned` when a key leaves
``processing`` or ``erred`` for ``released``, :meth:`TaskGroups.lost` for results lost
with a worker, and :meth:`TaskGroups.forget_key` when a key is forgotten. Driven here
with Dask's own ``TaskGroup`` and ``TaskState``, as the scheduler hook would.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from distributed.scheduler import TaskGroup, TaskPrefix, TaskState

from otel_spans import ids
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.scheduler.task_groups import TaskGroups
from otel_spans.task_records import DeferredTask

UUID = "span-uuid"


def finish(key: str, *before: str) -> DeferredTask:
    """The exported record of ``key``'s finished run, after the bookkeeping ``before``
    (its group exported, so that a run held among the slowest is exported too)."""
    scheduler: Any = SimpleNamespace(computations=[], story=lambda *keys: [])
    records: list[object] = []
    groups = TaskGroups(
        scheduler, submit=records.append, log=None, max_error_stories=10, max_length=100
    )
    for step in before:
        if step == "lost":
            groups.lost([key])
        else:
            getattr(groups, step)(key)
    tg = TaskGroup("inc", TaskPrefix("inc"))
    ts = TaskState(key, None, "memory", tg, False)
    tg.add(ts)
    identity = SpanIdentity(UUID, ("reruns",), 1, 2, Policy())
    startstops = [{"action": "compute", "start": 1.0, "stop": 2.0}]
    groups.task_finished(ts, "processing", "memory", {"startstops": startstops}, identity, 1.0)
    assert groups.stats()["pending_reruns"] == 0  # the finished run took its entry
    groups.export_groups([tg], identity, fallback=1.0)
    (record,) = [r for r in records if isinstance(r, DeferredTask)]
    return record


def test_each_abandoned_or_lost_run_is_one_more_attempt_under_the_same_span_id() -> None:
    """Catches: a span id that depends on the attempt (the worker cannot know it); an
    abandoned run not counted, or its rerun not kept (it has no other reason here)."""
    first = finish("inc-1")
    assert (first.attempt, first.sampled_because) == (1, "slowest")
    rerun = finish("inc-1", "abandoned", "lost", "abandoned")
    assert (rerun.attempt, rerun.sampled_because) == (4, "recomputed")
    assert first.span_id == rerun.span_id == ids.task_span_id(UUID, "inc-1")


def test_a_forgotten_key_submitted_again_is_attempt_one() -> None:
    """Catches: a released key's abandoned run counted as an attempt of a new task."""
    again = finish("inc-1", "abandoned", "forget_key")
    assert (again.attempt, again.sampled_because) == (1, "slowest")
