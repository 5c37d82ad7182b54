"""The metrics tick: growth of every live Dask span's cumulative values, as deltas.

Dask accumulates per-span worker metrics (``Span._cumulative_worker_metrics``) from
worker heartbeats, so they keep growing for a while after a span is done. Every
``metrics.interval`` this reads the spans still *live* (open, or exported less than
``metrics.settle`` ago) and hands over how much each value grew since the last
reading; a settled span is read once more and forgotten.
"""

from __future__ import annotations

import time as _time
from collections.abc import Hashable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from distributed.metrics import time

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.records import Attrs, CounterDelta, GaugeValue, counter_delta, gauge_value
from otel_spans.scheduler import snapshots
from otel_spans.scheduler.slices import LOOP_BUDGET, Resume
from otel_spans.scheduler.span_state import TrackedSpan
from otel_spans.scheduler.tracking import SpanTracker
from otel_spans.scheduler.worker_memory import WorkerMemory
from otel_spans.telemetry.signals import Signals

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.spans import Span

_PREFIX = semconv.DASK_TASK_PREFIX
_STATE = semconv.DASK_TASK_STATE
#: Per-span memory counters, each started at 0 on a span's first reading (a series
#: that exists from the start: ``increase()`` sees the first spill, pause or loss).
_MEMORY_COUNTERS = (
    semconv.DASK_SPAN_MEMORY_SPILLED,
    semconv.DASK_SPAN_MEMORY_UNSPILLED,
    semconv.DASK_SPAN_MEMORY_PAUSES,
    semconv.DASK_SPAN_MEMORY_PAUSE_DURATION,
    semconv.DASK_SPAN_MEMORY_WORKERS_LOST,
)
#: Key in ``TrackedSpan.reported`` saying that a span's memory counters were started.
_MEMORY_STARTED = ("memory", "started")
#: The activities of a span's own metrics that are its spilling, by counter.
_DISK = {
    "disk-write": semconv.DASK_SPAN_MEMORY_SPILLED,
    "disk-read": semconv.DASK_SPAN_MEMORY_UNSPILLED,
}


def _idle_series() -> tuple[str, Attrs]:
    """The metric and attributes of a root's idle share: those of Dask's idle key,
    the same for every root."""
    delta = snapshots.worker_metric((), snapshots.IDLE_KEY, 0.0)
    assert delta is not None  # a key of Dask's own shape
    return delta.metric, delta.attributes


_IDLE_METRIC, _IDLE_ATTRIBUTES = _idle_series()

#: A span's worker metric key as a series: metric, attributes, the spilling counter
#: it adds to (None for most).
_KeySeries = tuple[str, Attrs, str | None]
#: Most worker metric keys whose series are remembered (cleared beyond).
_MAX_KEYS = 4_096
#: Not remembered yet (None: a key of no series).
_UNSEEN: Any = object()


class SpanMetricsTick:
    """Reads live spans' cumulative values in time slices (see :meth:`tick`)."""

    def __init__(
        self,
        scheduler: Scheduler,
        settings: Settings,
        signals: Signals,
        tracker: SpanTracker,
        resume_tick: Resume,
        worker_memory: WorkerMemory | None = None,
    ):
        self._scheduler = scheduler
        self._settings = settings
        self._signals = signals
        self._tracker = tracker
        self._resume_tick = resume_tick
        self._worker_memory = worker_memory
        #: Live spans the current pass has still to read (read from the end).
        self._pending: list[str] = []
        #: The cluster's cumulative values already handed over.
        self._cluster_reported: dict[tuple[Hashable, ...], float] = {}
        #: Progress of the running spans read so far in this pass (published at its end).
        self._progress: list[GaugeValue] = []
        #: A span's worker metric key -> its series (see :meth:`_new_series`), bounded.
        self._series_of: dict[Hashable, _KeySeries | None] = {}
        # Dask's record since 2023.9; an older scheduler offers no thread-seconds
        history = getattr(scheduler, "total_nthreads_history", None)
        self._offered = ThreadSeconds(history if isinstance(history, list) else [], time())

    def clear(self) -> None:
        self._pending.clear()
        self._progress.clear()
        self._cluster_reported.clear()
        self._series_of.clear()

    def tick(self, final: bool) -> None:
        """Hand over the growth of every live span's cumulative values since last time.

        Reading a span's values costs tens of µs, and a workflow of 1,000 sub-spans
        keeps them all live until they settle: one pass over them is split into slices
        of ``LOOP_BUDGET``, each in its own loop iteration. A tick that finds a pass
        still under way continues it rather than starting over; shutdown's final tick
        finishes it at once.
        """
        tracker = self._tracker
        if not self._pending:
            # A new pass: first discover the spans that appeared since the last poll.
            tracker.poll(final=False)
            self._pending = list(tracker.live)
        settle = self._settings.metrics.settle
        now = time()
        deadline = _time.perf_counter() + LOOP_BUDGET
        deltas: list[CounterDelta] = []
        pending, progress = self._pending, self._progress
        live, tracks, open_spans = tracker.live, tracker.tracks, tracker.open
        while pending:
            uuid = pending.pop()
            span = live.get(uuid)
            if span is not None:
                track = tracks[uuid]
                own = self._span_deltas(span, track, now)
                gauges = self._span_progress(span, track, now) if uuid in open_spans else []
                gauges.append(
                    gauge_value(
                        (semconv.DASK_SPAN_MEMORY_HELD, track.tags, (), float(track.memory.held))
                    )
                )
                settled = track.exported_at is not None and now - track.exported_at >= settle
                if (settled or final) and track.is_root:
                    own.extend(self._idle_delta(span, track))
                labels = track.labels
                if labels:  # most workflows have none: no copies
                    own, gauges = _labelled(own, labels), _labelled(gauges, labels)
                deltas.extend(own)
                progress.extend(gauges)
                if settled:
                    del live[uuid]
                    tracker.release_settled(span)
            if pending and not final and _time.perf_counter() > deadline:
                # Out of budget (after at least one span: every slice makes progress).
                self._resume_tick.soon()
                break
        if not pending:
            for key, value in snapshots.growth(
                self._scheduler.cumulative_worker_metrics, self._cluster_reported
            ):
                delta = snapshots.worker_metric(None, key, value)
                if delta is not None:
                    deltas.append(delta)
            offered = self._offered.since_last(now)
            deltas.append(CounterDelta(semconv.M_CLUSTER_CPU_AVAILABLE, None, (), offered))
            self._progress = []
            if self._worker_memory is not None:
                progress.extend(self._worker_memory.gauges())
            self._signals.submit_gauges(progress)
        self._signals.submit_deltas(deltas)

    @staticmethod
    def _span_progress(span: Span, track: TrackedSpan, now: float) -> list[GaugeValue]:
        """A running span's own tasks by state (O(its own task groups)), and its age."""
        counts: dict[str, int] = {}
        for tg in span.groups:
            states = tg.states
            for state in semconv.PROGRESS_STATES:
                n = states.get(state, 0)
                if n:
                    counts[state] = counts.get(state, 0) + n
        tags = track.tags
        out = [
            GaugeValue(semconv.M_OPEN_TASKS, tags, ((_STATE, state),), float(n))
            for state, n in counts.items()
        ]
        out.append(GaugeValue(semconv.M_OPEN_ELAPSED, tags, (), max(now - span.enqueued, 0.0)))
        return out

    def _span_deltas(self, span: Span, track: TrackedSpan, now: float) -> list[CounterDelta]:
        out: list[CounterDelta] = []
        tags, reported = track.tags, track.reported
        disk: dict[str, float] = {}
        own = span._cumulative_worker_metrics
        if own:  # roots: none
            series_of = self._series_of
            for key, value in list(own.items()):
                # snapshots.grown, inline: a span's every key, on every tick
                before = reported.get(key, 0.0)
                if value == before:
                    continue
                reported[key] = value
                if not value > before:  # went down: the new baseline (or not a number)
                    continue
                series = series_of.get(key, _UNSEEN)
                if series is _UNSEEN:
                    series = self._new_series(key)
                if series is not None:
                    metric, attrs, spilling = series
                    grown = value - before
                    out.append(counter_delta((metric, tags, attrs, grown)))
                    if spilling is not None:
                        disk[spilling] = disk.get(spilling, 0.0) + grown
        _memory_deltas(track, disk, now, out)
        for key, n in track.finished.items():
            counted, attrs = _tasks_series(key)
            value = snapshots.grown(reported, counted, float(n))
            if value:
                out.append(counter_delta((semconv.M_SPAN_TASKS, tags, attrs, value)))
        for prefix, n in track.output.items():
            produced, attrs = _output_series(prefix)
            value = snapshots.grown(reported, produced, float(n))
            if value:
                out.append(counter_delta((semconv.M_SPAN_OUTPUT, tags, attrs, value)))
        if track.is_root and track.live_cpu and span.id in self._tracker.open:
            # Dask computes active_cpu_seconds by walking the span's whole subtree
            # (O(subtree x depth)): live growth for running workflows (roots) only;
            # every span's value is completed when it is exported. A workflow so large
            # that one read outlasts a slice (thousands of sub-spans) is read live
            # once, then only at its export.
            started = _time.perf_counter()
            cpu = snapshots.live_cpu_seconds(span)
            if _time.perf_counter() - started > LOOP_BUDGET:
                track.live_cpu = False
            out.extend(snapshots.cpu_delta(tags, reported, cpu))
        return out

    def _new_series(self, key: Hashable) -> _KeySeries | None:
        """What :func:`snapshots.worker_metric` makes of a span's metric key (metric
        and attributes, the same for every span: only its tags differ), and the spilling
        counter it adds to; remembered, since each key comes again on every tick."""
        delta = snapshots.worker_metric((), key, 0.0)
        series: _KeySeries | None = None
        if delta is not None and isinstance(key, tuple):  # it reads tuples only
            spilling = None
            if key[0] == "execute" and key[-1] == "bytes" and key[-2] in _DISK:
                spilling = _DISK[key[-2]]
            series = (delta.metric, delta.attributes, spilling)
        if len(self._series_of) >= _MAX_KEYS:  # prefixes of a long-lived cluster
            self._series_of.clear()
        self._series_of[key] = series
        return series

    @staticmethod
    def _idle_delta(root: Span, track: TrackedSpan) -> list[CounterDelta]:
        """The root's "idle or other spans" share, once its tree's values are final.

        It is active CPU minus all known task time of the whole tree, so it can only be
        computed once late heartbeats have landed; reported on the root only, so that
        summing a workflow's series by root counts it once. Read as an export reads it
        (Dask's values), from one walk of the tree: Dask's own
        ``cumulative_worker_metrics`` walks the tree four times for it.
        """
        nodes = snapshots.tree_spans(root)
        groups = snapshots.tree_groups(nodes)
        active = snapshots.tree_times(root, groups).active_cpu_seconds
        idle = snapshots.tree_idle(nodes, active)
        value = snapshots.grown(track.reported, snapshots.IDLE_KEY, idle)
        return [counter_delta((_IDLE_METRIC, track.tags, _IDLE_ATTRIBUTES, value))] if value else []


def _memory_deltas(
    track: TrackedSpan, disk: dict[str, float], now: float, out: list[CounterDelta]
) -> None:
    """A span's memory counters, onto ``out``: its own spilled and unspilled bytes
    (growth read with its worker metrics), and the growth of its pauses and lost
    workers."""
    tags, reported, ledger = track.tags, track.reported, track.memory
    if _MEMORY_STARTED not in reported:
        reported[_MEMORY_STARTED] = 1.0
        out.extend(_memory_started(tags))
    if disk:
        out.extend(CounterDelta(metric, tags, (), value) for metric, value in disk.items())
    if not (ledger.pauses or ledger.workers_lost):
        # Nearly every span: no pause began and no worker was lost, so every value
        # is 0 and always was (they only grow): there is no growth to read.
        return
    current = {
        ("memory", semconv.DASK_SPAN_MEMORY_PAUSES): float(ledger.pauses),
        ("memory", semconv.DASK_SPAN_MEMORY_PAUSE_DURATION): ledger.pause_seconds_at(now),
        ("memory", semconv.DASK_SPAN_MEMORY_WORKERS_LOST): float(ledger.workers_lost),
    }
    for (_, metric), value in snapshots.growth(current, reported):
        out.append(CounterDelta(metric, tags, (), value))


#: Most entries of each memory below: each holds immutable values that are a pure
#: function of its key (a span name's tags, a prefix, a state), so any scheduler of
#: the process may share them, and a long-lived cluster's many names only evict.
_MAX_REMEMBERED = 4_096


@lru_cache(maxsize=_MAX_REMEMBERED)
def _memory_started(tags: tuple[str, ...]) -> tuple[CounterDelta, ...]:
    """The deltas of 0 that start a span's memory counters: the same for every span of
    one name (a delta is immutable)."""
    return tuple(CounterDelta(metric, tags, (), 0.0) for metric in _MEMORY_COUNTERS)


@lru_cache(maxsize=_MAX_REMEMBERED)
def _tasks_series(finished: tuple[str, str]) -> tuple[tuple[str, str, str], Attrs]:
    """The key in ``TrackedSpan.reported`` and the attributes of the tasks counter of a
    ``TrackedSpan.finished`` key: the same for every span."""
    prefix, state = finished
    return ("tasks", prefix, state), ((_PREFIX, str(prefix)), (_STATE, str(state)))


@lru_cache(maxsize=_MAX_REMEMBERED)
def _output_series(prefix: str) -> tuple[tuple[str, str], Attrs]:
    """:func:`_tasks_series` of the output counter of a prefix."""
    return ("output", prefix), ((_PREFIX, str(prefix)),)


_Series = TypeVar("_Series", CounterDelta, GaugeValue)


def _labelled(series: list[_Series], labels: Attrs) -> list[_Series]:
    """A span's series with its workflow's metric labels (``metrics.attribute-labels``)."""
    if not labels:
        return series
    return [s._replace(attributes=s.attributes + labels) for s in series]


class ThreadSeconds:
    """The thread-seconds the cluster's workers offered, read in increments.

    ``Scheduler.total_nthreads_history`` is Dask's own append-only record of
    ``(time, total_nthreads)`` at every worker arrival and departure, the record
    ``Span.active_cpu_seconds`` integrates too. Each read integrates only the entries
    appended since the previous one, so it is O(workers that came or went).
    """

    def __init__(self, history: list[tuple[float, int]], now: float):
        self._history = history
        self._seen = len(history)
        self._nthreads = history[-1][1] if history else 0
        self._since = now

    def since_last(self, now: float) -> float:
        seconds = 0.0
        history = self._history
        for t, nthreads in history[self._seen :]:
            if t > self._since:
                seconds += self._nthreads * (t - self._since)
                self._since = t
            self._nthreads = nthreads
        self._seen = len(history)
        if now > self._since:
            seconds += self._nthreads * (now - self._since)
            self._since = now
        return seconds
