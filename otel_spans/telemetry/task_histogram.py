"""The task duration histogram, aggregated by otel-spans itself.

One value per finished task is the hottest metric path there is: the SDK's
``Histogram.record`` hashes attributes, takes locks and fills exemplar reservoirs on
every call, on the scheduler's event loop (docs/performance.md has the figures). This
accumulator costs a bisect and three additions per task, on the event loop, and adds
its data points to each batch of metrics as it leaves (:meth:`inject`) — in the same
OTLP shape the SDK would produce: explicit-bucket histogram, cumulative or delta, with
exemplars for the tasks whose spans were kept.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field, replace

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    ScopeMetrics,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_spans import __version__, semconv
from otel_spans.records import Attrs

BOUNDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass
class Series:
    """One series' buckets and totals. A series, once made, stays for the histogram's
    life: the per-task path may keep it (:meth:`TaskDurationHistogram.series`)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS) + 1))
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")
    #: bucket index -> (value, time ns, trace id, span id) of the latest kept task there.
    exemplars: dict[int, tuple[float, int, int, int]] = field(default_factory=dict)
    #: Per delta reader (by id): [min, max] of the values since its last collection
    #: (a delta point carries its own interval's extremes, not all-time ones).
    windows: dict[int, list[float]] = field(default_factory=dict)

    def copy(self) -> Series:
        return Series(
            list(self.counts), self.count, self.total, self.low, self.high, dict(self.exemplars)
        )


def _empty_window() -> list[float]:
    return [float("inf"), float("-inf")]


class TaskDurationHistogram:
    """Per-series bucket counts of task compute times; thread-safe."""

    def __init__(self) -> None:
        self._series: dict[Attrs, Series] = {}
        self._lock = threading.Lock()
        self._start_ns = time.time_ns()
        #: Per exporter (by id) the totals it last reported, for delta temporality.
        self._reported: dict[int, tuple[int, dict[Attrs, Series]]] = {}
        #: Readers collecting deltas, whose min and max each series keeps (a few at most).
        self._delta_readers: tuple[int, ...] = ()

    def series(self, attrs: Attrs) -> Series:
        """The series of ``attrs``, made now if new; the caller may keep it and
        :meth:`record_in` it, which saves hashing ``attrs`` per task."""
        with self._lock:
            series = self._series.get(attrs)
            if series is None:
                series = self._series[attrs] = Series()
                for reader in self._delta_readers:
                    series.windows[reader] = _empty_window()
            return series

    def record(self, attrs: Attrs, value: float, trace_id: int = 0, span_id: int = 0) -> None:
        self.record_in(self.series(attrs), value, trace_id, span_id)

    def record_in(self, series: Series, value: float, trace_id: int = 0, span_id: int = 0) -> None:
        """One value into a series of this histogram (from :meth:`series`)."""
        index = bisect.bisect_left(BOUNDS, value)
        with self._lock:
            series.counts[index] += 1
            series.count += 1
            series.total += value
            if value < series.low:
                series.low = value
            if value > series.high:
                series.high = value
            for window in series.windows.values():
                if value < window[0]:
                    window[0] = value
                if value > window[1]:
                    window[1] = value
            if span_id:
                series.exemplars[index] = (value, time.time_ns(), trace_id, span_id)

    def exemplar(self, attrs: Attrs, value: float, trace_id: int, span_id: int) -> None:
        """Point the bucket of ``value`` at a span, for a value already recorded."""
        index = bisect.bisect_left(BOUNDS, value)
        with self._lock:
            series = self._series.get(attrs)
            if series is not None and series.counts[index]:
                series.exemplars[index] = (value, time.time_ns(), trace_id, span_id)

    def _points(self, temporality: AggregationTemporality, reader: int) -> list[HistogramDataPoint]:
        now = time.time_ns()
        delta = temporality == AggregationTemporality.DELTA
        # Per series, the (min, max) of the values its point covers.
        extremes: dict[Attrs, tuple[float, float]] = {}
        with self._lock:
            current = {attrs: s.copy() for attrs, s in self._series.items()}
            if delta:
                known = reader in self._delta_readers
                if not known:  # its first collection covers everything so far
                    self._delta_readers += (reader,)
                for attrs, s in self._series.items():
                    window = s.windows.get(reader)
                    if known and window is not None:
                        extremes[attrs] = (window[0], window[1])
                    else:
                        extremes[attrs] = (s.low, s.high)
                    s.windows[reader] = _empty_window()
        start = self._start_ns
        previous: dict[Attrs, Series] = {}
        if delta:
            start, previous = self._reported.get(reader, (self._start_ns, {}))
            self._reported[reader] = (now, current)
        points = []
        for attrs, s in current.items():
            before = previous.get(attrs)
            counts = (
                s.counts
                if before is None
                else [a - b for a, b in zip(s.counts, before.counts, strict=True)]
            )
            count = s.count - (before.count if before else 0)
            if before is not None and count == 0:
                continue
            exemplars = [
                Exemplar({}, value, when, span_id, trace_id)
                for value, when, trace_id, span_id in s.exemplars.values()
                if before is None or when > start
            ]
            points.append(
                HistogramDataPoint(
                    attributes=dict(attrs),
                    start_time_unix_nano=start,
                    time_unix_nano=now,
                    count=count,
                    sum=s.total - (before.total if before else 0.0),
                    bucket_counts=counts,
                    explicit_bounds=BOUNDS,
                    min=extremes[attrs][0] if delta else s.low,
                    max=extremes[attrs][1] if delta else s.high,
                    exemplars=exemplars,
                )
            )
        return points

    def inject(
        self,
        data: MetricsData,
        temporality: AggregationTemporality = AggregationTemporality.CUMULATIVE,
        reader: int = 0,
    ) -> MetricsData:
        """``data`` with the task duration histogram added to otel-spans' scope."""
        points = self._points(temporality, reader)
        if not points:
            return data
        metric = Metric(
            name=semconv.M_TASK_DURATION,
            description="Compute time of tasks that computed or raised, by prefix",
            unit=semconv.UNIT_SECONDS,
            data=Histogram(data_points=points, aggregation_temporality=temporality),
        )
        resource_metrics = list(data.resource_metrics)
        if not resource_metrics:
            return data
        first = resource_metrics[0]
        scopes = list(first.scope_metrics)
        for i, scope in enumerate(scopes):
            if scope.scope.name == semconv.SCOPE_NAME:
                scopes[i] = replace(scope, metrics=[*scope.metrics, metric])
                break
        else:
            ours = InstrumentationScope(semconv.SCOPE_NAME, __version__, semconv.SCHEMA_URL)
            scopes.append(ScopeMetrics(ours, [metric], semconv.SCHEMA_URL))
        resource_metrics[0] = replace(first, scope_metrics=scopes)
        return MetricsData(resource_metrics=resource_metrics)
