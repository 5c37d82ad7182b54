"""The memory ledger of spans and groups, and worker pauses and losses, from designed
events (no cluster: the scheduler objects are stand-ins with the fields read).

The cluster tests (tests/cluster/test_memory.py) plant a real pause and a real kill;
these pin the arithmetic exactly, which a real pause's timing cannot.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from otel_spans import semconv
from otel_spans.records import LogEntry
from otel_spans.scheduler import memory, worker_memory
from otel_spans.scheduler.memory import SpanMemory
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_state import TrackedSpan
from otel_spans.telemetry.traces import GROUP_MEMORY, SPAN_MEMORY, memory_attributes


def track(uuid: str, *tags: str) -> TrackedSpan:
    return TrackedSpan(
        uuid, tags, trace_id=7, otel_span_id=int(uuid, 16), policy=Policy(), is_root=len(tags) == 1
    )


def test_peak_is_the_most_held_at_once_for_span_group_and_tree() -> None:
    root, stage = SpanMemory(), SpanMemory()
    root.root = root
    stage.root = root
    memory.held_changed(stage, "load", 100)
    memory.held_changed(stage, "load", 100)
    memory.held_changed(stage, "load", -100)  # released: the peak stays at 200
    memory.held_changed(stage, "sum", 50)
    memory.held_changed(root, "final", 10)
    assert (stage.held, stage.peak) == (150, 200)
    assert (stage.group_of("load").held, stage.group_of("load").peak) == (100, 200)
    assert (stage.group_of("sum").held, stage.group_of("sum").peak) == (50, 50)
    assert (root.held, root.peak) == (10, 10)
    assert (root.tree_held, root.tree_peak) == (160, 200)
    # a key leaving memory that was never counted cannot make anything negative
    memory.held_changed(stage, "other", -1000)
    assert stage.held == 0 and stage.group_of("other").held == 0 and root.tree_held == 0


def test_pause_seconds_count_ended_and_running_pauses() -> None:
    ledger = SpanMemory()
    memory.paused(ledger, "w1", ("load",), now=10.0)
    memory.paused(ledger, "w1", ("load",), now=11.0)  # the same pause seen again
    memory.paused(ledger, "w2", ("load", "sum"), now=12.0)
    memory.resumed(ledger, "w1", now=13.0)
    assert ledger.pauses == 2
    assert ledger.pause_seconds == 3.0
    assert ledger.pause_seconds_at(15.0) == 3.0 + 3.0  # w2's, still under way
    record = memory.group_footprint(ledger, "sum", "sum", {}, now=15.0)
    assert (record.pauses, record.pause_seconds) == (1, 3.0)
    assert memory.group_footprint(ledger, "load", "load", {}, now=15.0).pauses == 2


def test_disk_bytes_are_the_span_s_own_execute_disk_bytes() -> None:
    own = {
        ("execute", "load", "disk-write", "bytes"): 300.0,
        ("execute", "load", "disk-write", "seconds"): 0.5,
        ("execute", "sum", "disk-read", "bytes"): 200.0,
        ("execute", "sum", "disk-write", "bytes"): 100.0,
        ("p2p", "background", "disk-write", "bytes"): 999.0,
    }
    assert memory.disk_bytes(own) == (400.0, 200.0)
    assert memory.disk_bytes(own, "load") == (300.0, 0.0)
    ledger = SpanMemory(peak=5, held=4, tree_peak=9)
    record = memory.span_footprint(ledger, own, is_root=False, now=0.0)
    assert (record.peak, record.held, record.tree_peak, record.spilled) == (5, 4, 0, 400.0)
    assert memory.span_footprint(ledger, own, is_root=True, now=0.0).tree_peak == 9


def test_attributes_leave_out_absent_pauses_and_losses() -> None:
    record = memory.span_footprint(SpanMemory(peak=5, held=4), {}, is_root=False, now=0.0)
    assert memory_attributes(record, SPAN_MEMORY) == {
        semconv.DASK_SPAN_MEMORY_PEAK: 5,
        semconv.DASK_SPAN_MEMORY_HELD: 4,
        semconv.DASK_SPAN_MEMORY_SPILLED: 0,
        semconv.DASK_SPAN_MEMORY_UNSPILLED: 0,
    }
    ledger = SpanMemory(pauses=1, pause_seconds=2.5, workers_lost=1)
    group = memory.group_footprint(ledger, "g", "g", {}, now=0.0)
    attrs = memory_attributes(
        memory.span_footprint(ledger, {}, is_root=False, now=0.0), SPAN_MEMORY
    )
    assert attrs[semconv.DASK_SPAN_MEMORY_PAUSES] == 1
    assert attrs[semconv.DASK_SPAN_MEMORY_PAUSE_DURATION] == 2.5
    assert attrs[semconv.DASK_SPAN_MEMORY_WORKERS_LOST] == 1
    assert semconv.DASK_TASK_GROUP_MEMORY_PAUSES not in memory_attributes(group, GROUP_MEMORY)


# -- worker events -------------------------------------------------------------------------
def task(key: str, group: str, uuid: str, state: str = "processing") -> Any:
    return SimpleNamespace(key=key, state=state, group=SimpleNamespace(name=group, span_id=uuid))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(worker_memory, "time", clock)
    return clock


def test_a_pause_is_charged_to_the_spans_processing_on_that_worker(clock: Clock) -> None:
    load, other = track("a1", "wf", "load"), track("b2", "wf", "other")
    tasks = {"x-1": task("x-1", "x", "a1"), "y-1": task("y-1", "y", "a1")}
    ws = SimpleNamespace(processing=[tasks["x-1"], tasks["y-1"]])
    scheduler = SimpleNamespace(workers={"tcp://w:1": ws}, tasks=tasks)
    tracks = {"a1": load, "b2": other}
    events = worker_memory.WorkerMemory(scheduler, tracks.get, None, 100)  # type: ignore[arg-type]
    status = {"action": "worker-status-change", "prev-status": "running"}
    events.log_event("tcp://w:1", {**status, "status": "paused"})
    clock.now = 102.5
    events.log_event("tcp://w:1", {**status, "prev-status": "paused", "status": "running"})
    assert (load.memory.pauses, load.memory.pause_seconds) == (1, 2.5)
    assert load.memory.group_of("x").pauses == load.memory.group_of("y").pauses == 1
    assert load.memory.group_of("y").pause_seconds == 2.5
    assert other.memory.pauses == 0


def test_a_lost_worker_is_explained_and_charged(clock: Clock) -> None:
    load = track("a1", "wf", "load")
    tasks = {
        "x-1": task("x-1", "x", "a1", state="erred"),  # KilledWorker
        "x-2": task("x-2", "x", "a1"),
        "z-1": task("z-1", "z", "a1", state="released"),  # held there, to recompute
    }
    heartbeat = {"managed_bytes": 300, "memory": 900, "spilled_bytes": {"memory": 0, "disk": 40}}
    ws = SimpleNamespace(processing=[], metrics=heartbeat, memory_limit=1000)
    scheduler = SimpleNamespace(workers={"tcp://w:1": ws}, tasks=tasks)
    logs: list[LogEntry] = []
    events = worker_memory.WorkerMemory(scheduler, {"a1": load}.get, logs.append, 100)  # type: ignore[arg-type]
    del scheduler.workers["tcp://w:1"]  # Dask forgets the worker before it logs the event
    message = {
        "action": "remove-worker",
        "processing-tasks": {"x-1", "x-2"},
        "lost-computed-tasks": {"z-1"},
        "expected": False,
        "worker": "tcp://w:1",
    }
    events.log_event("tcp://w:1", message)  # the per-worker copy: handled under "all"
    assert not logs
    events.log_event("all", message)
    (record,) = logs
    attrs = dict(record.attributes)
    assert attrs[semconv.DASK_WORKER_LOST_TASKS] == ("x-1", "x-2")
    assert attrs[semconv.DASK_WORKER_LOST_KILLED_TASKS] == ("x-1",)
    assert attrs[semconv.DASK_WORKER_LOST_GROUPS] == ("x",)
    assert attrs[semconv.DASK_WORKER_LOST_SPANS] == ("wf/load",)
    assert attrs[semconv.DASK_WORKER_LOST_HELD] == 300
    assert attrs[semconv.DASK_WORKER_LOST_PROCESS_MEMORY] == 900
    assert attrs[semconv.DASK_WORKER_LOST_SPILLED] == 40
    assert attrs[semconv.DASK_WORKER_LOST_MEMORY_LIMIT] == 1000
    assert record.event_name == semconv.EVENT_WORKER_LOST
    assert (record.trace_id, record.span_id) == (7, 0xA1)
    assert "x-1 (x in 'wf/load', KilledWorker)" in str(record.body)
    assert load.memory.workers_lost == 1
    assert load.memory.group_of("x").workers_lost == load.memory.group_of("z").workers_lost == 1
    (event,) = load.memory.lost_events
    assert dict(event.attributes)[semconv.DASK_WORKER_LOST_TASKS] == ("x-1", "x-2")


def test_a_nanny_s_kill_reading_wins_and_retirement_is_no_loss(clock: Clock) -> None:
    ws = SimpleNamespace(processing=[], metrics={"memory": 10}, memory_limit=1000)
    scheduler = SimpleNamespace(workers={"tcp://w:1": ws, "tcp://w:2": ws}, tasks={})
    logs: list[LogEntry] = []
    events = worker_memory.WorkerMemory(scheduler, {}.get, logs.append, 100)  # type: ignore[arg-type]
    events.log_event("worker-restart-memory", {"worker": "tcp://w:1", "pid": 1, "rss": 990})
    events.log_event("all", {"action": "remove-worker", "worker": "tcp://w:1", "expected": False})
    events.log_event("all", {"action": "remove-worker", "worker": "tcp://w:2", "expected": True})
    # a worker that closed itself with nothing running or held loses nothing
    scheduler.workers["tcp://w:3"] = ws
    events.add_worker("tcp://w:3")
    closing = {"action": "worker-status-change", "prev-status": "running", "status": "closing"}
    events.log_event("tcp://w:3", closing)
    events.log_event("all", {"action": "remove-worker", "worker": "tcp://w:3", "expected": False})
    (record,) = logs
    assert dict(record.attributes)[semconv.DASK_WORKER_LOST_PROCESS_MEMORY] == 990
    assert "killed by its nanny at 990 bytes" in str(record.body)
    assert events.lost == 1


def test_worker_addresses_on_metrics_are_bounded() -> None:
    from otel_spans.settings import MetricsSettings
    from otel_spans.telemetry.metric_state import MetricsState

    settings = MetricsSettings(
        target=None,  # type: ignore[arg-type]
        interval=1.0,
        temporality="cumulative",  # type: ignore[arg-type]
        prometheus_port=None,
        prometheus_host="",
        max_span_names=10,
        max_prefixes=10,
        max_series=100,
        settle=1.0,
        cpu_hour_price=None,
        currency="USD",
        max_workers=2,
    )
    state = MetricsState(settings)
    seen = [
        dict(state.labels(None, ((semconv.DASK_WORKER_ADDRESS, f"tcp://w:{i}"),))) for i in range(3)
    ]
    assert [s[semconv.DASK_WORKER_ADDRESS] for s in seen] == [
        "tcp://w:0",
        "tcp://w:1",
        semconv.OVERFLOW_VALUE,
    ]
    assert state.overflow()[semconv.DASK_WORKER_ADDRESS] == 1
