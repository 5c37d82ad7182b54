"""Parent spans cover their children: Dask span ⊇ task-group span ⊇ task span ⊇ phases,
and a task span covers the spans its code started, on designed worker reports.

Jaeger's clock-skew adjuster warns on every child that starts before or ends after its
parent (resources without ``host.*`` attributes are compared span by span). Two causes
are designed in here: a task span starts at its first phase, a transfer, while Dask's
``TaskGroup.start`` is its first compute; and workers report phases shifted by their
``scheduler_delay`` (one ahead, one behind), while task code keeps the worker's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from otel_spans.records import ns
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_records import covering
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.scheduler.task_groups import TaskGroups
from otel_spans.task_records import DeferredTask, GroupRecord, TaskRecord

#: Each worker's scheduler_delay: the scheduler's clock is 3 ms ahead of A's (as A
#: estimates it) and 2 ms behind B's.
DELAY = {"tcp://a:1": 0.003, "tcp://b:1": -0.002}
#: What each run did, on the clock of the worker that ran it (epoch seconds).
RUNS: dict[str, tuple[str, list[tuple[str, float, float]]]] = {
    "fit-0": ("tcp://a:1", [("transfer", 1000.000, 1000.004), ("compute", 1000.004, 1000.300)]),
    "fit-1": ("tcp://b:1", [("compute", 1000.010, 1000.310)]),
}
#: A span task code started in each run, on the worker's clock (inside its compute).
CODE_SPANS = {"fit-0": (1000.0041, 1000.2999), "fit-1": (1000.0101, 1000.3099)}
#: When the Dask span was enqueued (the scheduler's clock; on one host the same clock).
ENQUEUED = 999.9
#: 1 µs: the designed times are exact up to float rounding.
TOLERANCE_NS = 1_000


@dataclass(eq=False)
class FakeGroup:
    """What the task groups read of a Dask ``TaskGroup`` (hashed by identity, as Dask's)."""

    name: str
    prefix: Any
    start: float = 0.0
    stop: float = 0.0
    nbytes_total: int = 0
    all_durations: dict[str, float] = field(default_factory=dict)
    dependencies: set[Any] = field(default_factory=set)
    keys: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


def reported(worker: str, phases: list[tuple[str, float, float]]) -> list[dict[str, Any]]:
    """The phases as the worker sends them: shifted by its scheduler_delay."""
    d = DELAY[worker]
    return [{"action": a, "start": s + d, "stop": e + d} for a, s, e in phases]


def export(clock_events: bool) -> tuple[list[TaskRecord], GroupRecord, tuple[float, float]]:
    """Both runs through the task groups, exported; and the Dask span's bounds."""
    out: list[object] = []
    groups = TaskGroups(
        SimpleNamespace(computations=[]),  # type: ignore[arg-type]
        submit=out.append,
        log=None,
        max_error_stories=0,
        max_length=1000,
    )
    if clock_events:  # as the worker preload announces them, address added by Dask
        for worker, delay in DELAY.items():
            groups.clocks.reported({"delay": delay, "worker": worker})
    tg = FakeGroup("fit", SimpleNamespace(name="fit"), keys=list(RUNS))
    span = SpanIdentity("uuid", ("training",), trace_id=1, otel_span_id=2, policy=Policy("all"))
    for key, (worker, phases) in RUNS.items():
        startstops = reported(worker, phases)
        for p in startstops:  # what Dask's TaskGroup.add_duration keeps: computes only
            if p["action"] == "compute":
                tg.start = min(tg.start or p["start"], p["start"])
                tg.stop = max(tg.stop, p["stop"])
        ts = SimpleNamespace(key=key, group=tg, prefix=tg.prefix, dependencies=[])
        kwargs = {"worker": worker, "startstops": startstops, "thread": 1, "nbytes": 8}
        groups.task_finished(ts, "processing", "memory", kwargs, span, 0.3)  # type: ignore[arg-type]
    groups.export_groups([tg], span, fallback=ENQUEUED)  # type: ignore[list-item]
    tasks = [r.build() if isinstance(r, DeferredTask) else r for r in out[:-1]]
    assert all(isinstance(t, TaskRecord) for t in tasks)
    (group,) = out[-1:]
    assert isinstance(group, GroupRecord)
    dask_span = covering([tg], groups.bounds, ENQUEUED, max(tg.stop, ENQUEUED), done=True)  # type: ignore[list-item]
    return tasks, group, dask_span  # type: ignore[return-value]


def test_every_parent_covers_its_children() -> None:
    tasks, group, (first, last) = export(clock_events=True)
    assert sorted(t.key for t in tasks) == sorted(RUNS)
    assert ns(first) <= group.start_ns <= group.end_ns <= ns(last)
    for task in tasks:
        assert group.start_ns <= task.start_ns <= task.end_ns <= group.end_ns, task.key
        for phase in task.phases:
            assert task.start_ns <= phase.start_ns <= phase.end_ns <= task.end_ns, task.key
        code_start, code_end = CODE_SPANS[task.key]
        assert task.start_ns <= ns(code_start) and ns(code_end) <= task.end_ns, task.key


def test_task_runs_are_exported_on_their_workers_clocks() -> None:
    tasks, group, (first, last) = export(clock_events=True)
    for task in tasks:
        _, phases = RUNS[task.key]
        got = [(p.action, p.start_ns, p.end_ns) for p in task.phases]
        assert [a for a, _, _ in got] == [a for a, _, _ in phases]
        for (_, start, end), (_, s, e) in zip(got, phases, strict=True):
            assert abs(start - ns(s)) <= TOLERANCE_NS and abs(end - ns(e)) <= TOLERANCE_NS
    # The group from fit-0's transfer (not Dask's first compute) to fit-1's end.
    assert abs(group.start_ns - ns(1000.000)) <= TOLERANCE_NS
    assert abs(group.end_ns - ns(1000.310)) <= TOLERANCE_NS
    assert first == ENQUEUED and last == pytest.approx(1000.310, abs=1e-6)


def test_without_clock_events_the_scheduler_clock_stays_and_parents_still_cover() -> None:
    """A worker without the preload announces nothing: its phases stay as reported (the
    spans of its task code then have no parent of ours anyway); the design's fit-1
    shows what that costs a span its code starts, and the tree still nests."""
    tasks, group, (first, last) = export(clock_events=False)
    fit1 = next(t for t in tasks if t.key == "fit-1")
    assert fit1.end_ns < ns(CODE_SPANS["fit-1"][1])  # 2 ms early: the shift not undone
    assert ns(first) <= group.start_ns and group.end_ns <= ns(last)
    for task in tasks:
        assert group.start_ns <= task.start_ns <= task.end_ns <= group.end_ns, task.key


@pytest.mark.parametrize(
    "msg",
    [None, [], {"delay": 0.1}, {"worker": "tcp://a:1"}, {"worker": "tcp://a:1", "delay": "1"}]
    + [{"worker": "tcp://a:1", "delay": v} for v in (True, float("nan"), float("inf"))],
)
def test_a_malformed_clock_event_is_ignored(msg: object) -> None:
    groups = TaskGroups(
        SimpleNamespace(computations=[]),  # type: ignore[arg-type]
        submit=lambda record: None,
        log=None,
        max_error_stories=0,
        max_length=1000,
    )
    groups.clocks.reported(msg)
    assert groups.clocks.offset("tcp://a:1") == 0.0 and len(groups.clocks) == 0
