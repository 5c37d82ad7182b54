"""The metrics tick's deltas of one span (``SpanMetricsTick._span_deltas``) are what
``snapshots.worker_metric`` and the memory ledger say, tick after tick, whether a
metric key's series was remembered, forgotten at the bound, or never had one."""

from __future__ import annotations

import random
from collections.abc import Hashable
from types import SimpleNamespace
from typing import Any

import pytest
from distributed.scheduler import TaskGroup

from otel_spans import semconv
from otel_spans.records import CounterDelta
from otel_spans.scheduler import memory, metrics_tick, snapshots
from otel_spans.scheduler.metrics_tick import SpanMetricsTick
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_state import TrackedSpan

TAGS = ("etl", "load")
KEYS: list[Hashable] = [
    *(
        ("execute", prefix, activity, unit)
        for prefix in ("load", "sum", "x" * 300)
        for activity in ("thread-cpu", "disk-write", "disk-read", "other")
        for unit in ("seconds", "bytes", "count")
    ),
    ("p2p", "shuffle", "disk-write", "bytes"),
    ("execute", "load", "thread-cpu", "furlongs"),  # unknown unit: no series
    ("gather-dep", "x", "seconds"),  # not a span's context: no series
    "not-a-tuple",
    ("short",),
]


def expected(track: TrackedSpan, own: dict[Any, float], now: float) -> list[CounterDelta]:
    """The deltas as the tick computed them before it remembered keys' series."""
    tags, reported, ledger = track.tags, track.reported, track.memory
    out, disk = [], {}
    for key, value in snapshots.growth(own, reported):
        delta = snapshots.worker_metric(tags, key, value)
        if delta is not None:
            out.append(delta)
            assert isinstance(key, tuple)
            if (
                key[0] == "execute"
                and key[-1] == "bytes"
                and key[-2] in ("disk-write", "disk-read")
            ):
                metric = {
                    "disk-write": semconv.DASK_SPAN_MEMORY_SPILLED,
                    "disk-read": semconv.DASK_SPAN_MEMORY_UNSPILLED,
                }[key[-2]]
                disk[metric] = disk.get(metric, 0.0) + value
    started = ("memory", "started")
    if started not in reported:
        reported[started] = 1.0
        out += [
            CounterDelta(m, tags, (), 0.0)
            for m in (
                semconv.DASK_SPAN_MEMORY_SPILLED,
                semconv.DASK_SPAN_MEMORY_UNSPILLED,
                semconv.DASK_SPAN_MEMORY_PAUSES,
                semconv.DASK_SPAN_MEMORY_PAUSE_DURATION,
                semconv.DASK_SPAN_MEMORY_WORKERS_LOST,
            )
        ]
    out += [CounterDelta(m, tags, (), v) for m, v in disk.items()]
    current = {
        ("memory", semconv.DASK_SPAN_MEMORY_PAUSES): float(ledger.pauses),
        ("memory", semconv.DASK_SPAN_MEMORY_PAUSE_DURATION): ledger.pause_seconds_at(now),
        ("memory", semconv.DASK_SPAN_MEMORY_WORKERS_LOST): float(ledger.workers_lost),
    }
    out += [CounterDelta(k[1], tags, (), v) for k, v in snapshots.growth(current, reported)]
    finished = {("tasks", p, s): float(n) for (p, s), n in track.finished.items()}
    for (_, prefix, state), value in snapshots.growth(finished, reported):
        attrs = ((semconv.DASK_TASK_PREFIX, prefix), (semconv.DASK_TASK_STATE, state))
        out.append(CounterDelta(semconv.M_SPAN_TASKS, tags, attrs, value))
    output = {("output", p): float(n) for p, n in track.output.items()}
    for (_, prefix), value in snapshots.growth(output, reported):
        attrs = ((semconv.DASK_TASK_PREFIX, prefix),)
        out.append(CounterDelta(semconv.M_SPAN_OUTPUT, tags, attrs, value))
    return out


def track() -> TrackedSpan:
    return TrackedSpan("u", TAGS, 1, 2, Policy(), is_root=False)


@pytest.mark.parametrize("max_keys", [metrics_tick._MAX_KEYS, 5])
def test_span_deltas_are_the_worker_metrics_and_ledger(
    monkeypatch: pytest.MonkeyPatch, max_keys: int
) -> None:
    monkeypatch.setattr(metrics_tick, "_MAX_KEYS", max_keys)
    scheduler = SimpleNamespace(total_nthreads_history=[])
    tracker = SimpleNamespace(open={})
    tick = SpanMetricsTick(scheduler, None, None, tracker, None)  # type: ignore[arg-type]
    rng = random.Random(3)
    tracks = [track(), track()]
    mirrors = [track(), track()]  # the same span, computed the old way
    owns: list[dict[Any, float]] = [{}, {}]
    for now in range(1, 40):
        for i in range(2):
            own = owns[i]
            for key in rng.sample(KEYS, 8):
                own[key] = own.get(key, 0.0) + rng.choice([0.0, 1.5, 7.0])
            if rng.random() < 0.1:
                memory.paused(tracks[i].memory, "w", ("g",), now)
                memory.paused(mirrors[i].memory, "w", ("g",), now)
            if rng.random() < 0.1:
                memory.resumed(tracks[i].memory, "w", now)
                memory.resumed(mirrors[i].memory, "w", now)
            if rng.random() < 0.05:
                memory.lost(tracks[i].memory, ("g",))
                memory.lost(mirrors[i].memory, ("g",))
            prefix, state = rng.choice(["load", "sum"]), rng.choice(["memory", "erred"])
            for t in (tracks[i], mirrors[i]):
                t.finished[prefix, state] = t.finished.get((prefix, state), 0) + 1
                t.output[prefix] = t.output.get(prefix, 0) + 10
            span = SimpleNamespace(_cumulative_worker_metrics=own, id="u")
            got = tick._span_deltas(span, tracks[i], float(now))  # type: ignore[arg-type]
            assert got == expected(mirrors[i], dict(own), float(now))
            assert tracks[i].reported == mirrors[i].reported
        assert len(tick._series_of) <= max_keys
    assert any(t.memory.pauses for t in tracks)  # the ledger's growth was read too


class Group:
    """What a span tree's times read of a task group (hashable, like a TaskGroup)."""

    def __init__(self, stop: float, done: bool = True):
        self.stop, self.start = stop, 0.0
        self.states = {"memory": 1, "processing": 0 if done else 1}

    @property
    def done(self) -> bool:
        return bool(TaskGroup.done.fget(self))  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(30))
def test_idle_delta_is_dasks_idle_share(seed: int) -> None:
    """The root's idle delta is the growth of Dask's own "idle or other spans" value."""
    from distributed.spans import Span

    rng = random.Random(seed)
    history = [(100.0, 2), (100.0 + rng.uniform(0, 5), rng.randrange(1, 9)), (300.0, 4)]
    root = Span(("root",), "root-id", None, history[:1])
    child = Span(("root", "child"), "child-id", root, history[:1])
    root.children.append(child)
    for node in (root, child):
        node.enqueued = 100.0
        node._total_nthreads_history = history
        node.groups = {Group(100.0 + rng.uniform(0, 10))}  # type: ignore[assignment]
        for key in rng.sample(KEYS[:36], 10):
            node._cumulative_worker_metrics[key] = rng.uniform(0, 8)  # type: ignore[index]
    track_ = track()
    track_.is_root = True
    reported = {snapshots.IDLE_KEY: rng.choice([0.0, 1.0, 50.0])}
    track_.reported.update(reported)
    idle = root.cumulative_worker_metrics[snapshots.IDLE_KEY]
    expected = [
        snapshots.worker_metric(TAGS, k, v)
        for k, v in snapshots.growth({snapshots.IDLE_KEY: idle}, reported)
    ]
    assert SpanMetricsTick._idle_delta(root, track_) == expected
    assert track_.reported == reported


def test_grown_is_the_growth_of_one_value() -> None:
    """``snapshots.grown`` (and ``cpu_delta``, which reads with it) is ``growth`` of a
    mapping of one value: the same growth, the same values remembered."""
    rng = random.Random(5)
    seen: dict[Any, float] = {}
    mirror: dict[Any, float] = {}
    cpu_seen: dict[Any, float] = {}
    for _ in range(200):
        value = rng.choice([0.0, 1.0, 2.5, 7.0, 7.0, rng.uniform(0, 10)])
        expected = dict(snapshots.growth({("cpu",): value}, mirror)).get(("cpu",), 0.0)
        assert snapshots.grown(seen, ("cpu",), value) == expected
        assert seen == mirror
        deltas = snapshots.cpu_delta(TAGS, cpu_seen, value)
        assert deltas == (
            [CounterDelta(semconv.M_SPAN_CPU_AVAILABLE, TAGS, (), expected)] if expected else []
        )
        assert cpu_seen == mirror
