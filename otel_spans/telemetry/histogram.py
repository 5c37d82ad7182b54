"""Histograms aggregated by otel-spans itself, in the OTel SDK's data shape.

Every histogram value is recorded on the scheduler's event loop: one per finished task
(the task duration) and a few per exported Dask span (its duration, memory peak, the
workflow's efficiency). The SDK's ``Histogram.record`` hashes attributes, takes locks
and fills exemplar reservoirs on every call (docs/performance.md has the figures). An
:class:`OwnHistogram` costs a dict lookup, a bisect and a few additions under a lock,
and adds its data points to each batch of metrics as it leaves (:meth:`Histograms.inject`)
in the OTLP shape the SDK would produce: explicit-bucket histogram, cumulative or
delta, with exemplars for the values whose spans were kept.

``metrics.max-series`` applies as the SDK applies it to an instrument: at each
collection the first ``series_limit`` series keep their attributes (in the order they
first appeared; for a delta reader, among those with values in the interval) and the
others are folded into one point marked ``otel.metric.overflow=true``, their exemplars
keeping the attributes they lost. How many were folded is reported at every collection
(``folded``), counted where the counters' folds are counted.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable
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
from otel_spans.records import Attrs, HistogramSample

#: (value, time ns, trace id, span id) of the latest kept value of a bucket.
ExemplarSlot = tuple[float, int, int, int]
#: Told, at each collection, a histogram's name and how many series it had then.
Folded = Callable[[str, int], None]

_CUMULATIVE = AggregationTemporality.CUMULATIVE
#: Most (span name, workflow labels) whose labels and series are kept at hand.
MAX_AT_HAND = 4_096
_OVERFLOW_ATTRIBUTES = {semconv.SDK_OVERFLOW: True}


@dataclass(frozen=True)
class HistogramSpec:
    """What a histogram is on the wire: name, unit, description and bucket bounds."""

    name: str
    unit: str
    description: str
    bounds: tuple[float, ...]
    #: A cumulative point's exemplars: every bucket's latest until replaced (True), or,
    #: as the SDK's reservoir, only those offered since the reader's last collection.
    repeat_exemplars: bool = False


@dataclass
class Series:
    """One series' buckets and totals. A series, once made, stays for the histogram's
    life: the per-task path may keep it (:meth:`OwnHistogram.series`)."""

    counts: list[int]
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")
    #: bucket index -> the latest kept value there (only values of kept spans).
    exemplars: dict[int, ExemplarSlot] = field(default_factory=dict)
    #: Per delta reader (by id): [min, max] of the values since its last collection
    #: (a delta point carries its own interval's extremes, not all-time ones).
    windows: dict[int, list[float]] = field(default_factory=dict)

    def copy(self) -> Series:
        return Series(
            list(self.counts), self.count, self.total, self.low, self.high, dict(self.exemplars)
        )


@dataclass
class _Point:
    """One series' share of a collection."""

    counts: list[int]
    count: int
    total: float
    low: float
    high: float
    #: bucket index -> (slot, attributes the point does not carry)
    exemplars: dict[int, tuple[ExemplarSlot, Attrs]]


def _empty_window() -> list[float]:
    return [float("inf"), float("-inf")]


def _add(series: Series, index: int, value: float, trace_id: int, span_id: int, now: int) -> None:
    """One value into bucket ``index`` of ``series``, the histogram's lock held."""
    series.counts[index] += 1
    series.count += 1
    series.total += value
    if value < series.low:
        series.low = value
    if value > series.high:
        series.high = value
    if series.windows:  # only while a delta reader collects
        for window in series.windows.values():
            if value < window[0]:
                window[0] = value
            if value > window[1]:
                window[1] = value
    if span_id:
        series.exemplars[index] = (value, now, trace_id, span_id)


class OwnHistogram:
    """Per-series bucket counts of one histogram; thread-safe."""

    def __init__(
        self,
        spec: HistogramSpec,
        series_limit: int | None = None,
        folded: Folded | None = None,
        lock: threading.Lock | None = None,
    ):
        self.spec = spec
        self.bounds = spec.bounds
        self._series_limit = series_limit
        self._folded = folded
        self._series: dict[Attrs, Series] = {}
        #: Held to record and to copy; :class:`Histograms` shares one among its own.
        self.lock = threading.Lock() if lock is None else lock
        self._start_ns = time.time_ns()
        #: Per delta reader (by id) the totals it last reported, for delta temporality.
        self._reported: dict[int, tuple[int, dict[Attrs, Series]]] = {}
        #: Per cumulative reader (by id) its last collection (for the SDK's exemplars).
        self._collected: dict[int, int] = {}
        #: Readers collecting deltas, whose min and max each series keeps (a few at most).
        self._delta_readers: tuple[int, ...] = ()

    def series(self, attrs: Attrs) -> Series:
        """The series of ``attrs``, made now if new; the caller may keep it and
        :meth:`record_in` it, which saves hashing ``attrs`` per value."""
        series = self._series.get(attrs)  # the hot path: no lock for known series
        if series is not None:
            return series
        with self.lock:
            return self.series_locked(attrs)

    def series_locked(self, attrs: Attrs) -> Series:
        """:meth:`series`, the lock held by the caller."""
        series = self._series.get(attrs)
        if series is None:
            series = self._series[attrs] = Series([0] * (len(self.bounds) + 1))
            for reader in self._delta_readers:
                series.windows[reader] = _empty_window()
        return series

    def record(self, attrs: Attrs, value: float, trace_id: int = 0, span_id: int = 0) -> None:
        self.record_in(self.series(attrs), value, trace_id, span_id)

    def record_in(self, series: Series, value: float, trace_id: int = 0, span_id: int = 0) -> None:
        """One value into a series of this histogram (from :meth:`series`); an
        exemplar only with a span id, i.e. for a span that is exported."""
        index = bisect.bisect_left(self.bounds, value)
        with self.lock:
            _add(series, index, value, trace_id, span_id, time.time_ns() if span_id else 0)

    def exemplar(self, attrs: Attrs, value: float, trace_id: int, span_id: int) -> None:
        """Point the bucket of ``value`` at a span, for a value already recorded."""
        index = bisect.bisect_left(self.bounds, value)
        with self.lock:
            series = self._series.get(attrs)
            if series is not None and series.counts[index]:
                series.exemplars[index] = (value, time.time_ns(), trace_id, span_id)

    def _collect(
        self, delta: bool, reader: int
    ) -> tuple[int, int, dict[Attrs, Series], dict[Attrs, Series], dict[Attrs, list[float]]]:
        """Under the lock: (start, now, current copies, previous totals, extremes), the
        copies holding only the exemplars this collection may carry."""
        with self.lock:
            now = time.time_ns()
            current = {attrs: s.copy() for attrs, s in self._series.items()}
            # Per series, [min, max] of the values its point covers.
            extremes: dict[Attrs, list[float]] = {}
            if delta:
                known = reader in self._delta_readers
                if not known:  # its first collection covers everything so far
                    self._delta_readers += (reader,)
                for attrs, s in self._series.items():
                    window = s.windows.get(reader)
                    extremes[attrs] = window if known and window is not None else [s.low, s.high]
                    s.windows[reader] = _empty_window()
                start, previous = self._reported.get(reader, (self._start_ns, {}))
                self._reported[reader] = (now, current)
                since = start
            else:
                start, previous = self._start_ns, {}
                extremes = {attrs: [s.low, s.high] for attrs, s in current.items()}
                since = 0 if self.spec.repeat_exemplars else self._collected.get(reader, 0)
                self._collected[reader] = now
        for s in current.values():
            s.exemplars = {i: slot for i, slot in s.exemplars.items() if slot[1] > since}
        return start, now, current, previous, extremes

    def metric(self, temporality: AggregationTemporality, reader: int) -> Metric | None:
        """This histogram's points of one collection by ``reader``, None without any."""
        delta = temporality == AggregationTemporality.DELTA
        start, now, current, previous, extremes = self._collect(delta, reader)
        points: list[tuple[Attrs, _Point]] = []
        for attrs, s in current.items():
            before = previous.get(attrs)
            count = s.count - (before.count if before else 0)
            if count == 0:  # nothing since the last collection (or never anything)
                continue
            counts = (
                s.counts
                if before is None
                else [a - b for a, b in zip(s.counts, before.counts, strict=True)]
            )
            total = s.total - (before.total if before else 0.0)
            low, high = extremes[attrs]
            kept: Attrs = ()  # a kept point carries its attributes itself
            exemplars = {i: (slot, kept) for i, slot in s.exemplars.items()}
            points.append((attrs, _Point(counts, count, total, low, high, exemplars)))
        if self._folded is not None:
            self._folded(self.spec.name, len(points))
        limit = self._series_limit
        if limit is not None and len(points) > limit:
            points = [*points[:limit], ((), _fold(points[limit:]))]
        if not points:
            return None
        data_points = [
            HistogramDataPoint(
                attributes=dict(attrs) if attrs else dict(_OVERFLOW_ATTRIBUTES),
                start_time_unix_nano=start,
                time_unix_nano=now,
                count=p.count,
                sum=p.total,
                bucket_counts=p.counts,
                explicit_bounds=self.bounds,
                min=p.low,
                max=p.high,
                exemplars=[
                    Exemplar(dict(lost), value, when, span_id, trace_id)
                    for (value, when, trace_id, span_id), lost in p.exemplars.values()
                ],
            )
            for attrs, p in points
        ]
        spec = self.spec
        return Metric(
            name=spec.name,
            description=spec.description,
            unit=spec.unit,
            data=Histogram(data_points=data_points, aggregation_temporality=temporality),
        )

    def inject(
        self, data: MetricsData, temporality: AggregationTemporality = _CUMULATIVE, reader: int = 0
    ) -> MetricsData:
        """``data`` with this histogram added to otel-spans' scope."""
        return add_metrics(data, [self.metric(temporality, reader)])


def _fold(points: list[tuple[Attrs, _Point]]) -> _Point:
    """The overflow point of the series past the limit: their sums, and per bucket the
    latest exemplar with the attributes its series had."""
    out = _Point([0] * len(points[0][1].counts), 0, 0.0, float("inf"), float("-inf"), {})
    for attrs, p in points:
        for i, n in enumerate(p.counts):
            out.counts[i] += n
        out.count += p.count
        out.total += p.total
        out.low = min(out.low, p.low)
        out.high = max(out.high, p.high)
        for i, (slot, _) in p.exemplars.items():
            held = out.exemplars.get(i)
            if held is None or slot[1] >= held[0][1]:
                out.exemplars[i] = (slot, attrs)
    return out


def add_metrics(data: MetricsData, metrics: Iterable[Metric | None]) -> MetricsData:
    """``data`` with ``metrics`` added to otel-spans' scope (made if absent)."""
    ours = [metric for metric in metrics if metric is not None]
    resource_metrics = list(data.resource_metrics)
    if not ours or not resource_metrics:
        return data
    first = resource_metrics[0]
    scopes = list(first.scope_metrics)
    for i, scope in enumerate(scopes):
        if scope.scope.name == semconv.SCOPE_NAME:
            scopes[i] = replace(scope, metrics=[*scope.metrics, *ours])
            break
    else:
        scope_of_ours = InstrumentationScope(semconv.SCOPE_NAME, __version__, semconv.SCHEMA_URL)
        scopes.append(ScopeMetrics(scope_of_ours, ours, semconv.SCHEMA_URL))
    resource_metrics[0] = replace(first, scope_metrics=scopes)
    return MetricsData(resource_metrics=resource_metrics)


@dataclass
class _AtHand:
    """A Dask span's resolved labels and its series of each histogram, once used."""

    attrs: Attrs
    series: dict[str, Series] = field(default_factory=dict)


#: What :meth:`Histograms.record` holds before its first sample resolves (never used).
_UNRESOLVED = _AtHand(())


class Histograms:
    """Every histogram of one process, by name, and the one hook that adds their
    points to each batch of metrics as it leaves."""

    def __init__(
        self,
        specs: Iterable[HistogramSpec],
        series_limit: int | None = None,
        folded: Folded | None = None,
    ):
        #: One lock for all: a span's values go in under one acquisition.
        self._lock = threading.Lock()
        self.by_name = {
            spec.name: OwnHistogram(spec, series_limit, folded, self._lock) for spec in specs
        }
        #: (tags, workflow labels) -> labels and series; the oldest past MAX_AT_HAND go.
        self._at_hand: dict[tuple[tuple[str, ...], Attrs], _AtHand] = {}

    def __getitem__(self, name: str) -> OwnHistogram:
        return self.by_name[name]

    def record(
        self,
        samples: Iterable[HistogramSample],
        labels: Callable[[tuple[str, ...], Attrs], Attrs],
    ) -> None:
        """A Dask span's export's values, under one acquisition of the lock: a dict
        lookup, a bisect, a few additions each (labels, asked of the cardinality budget,
        and series kept at hand). A negative value is left out, as the SDK leaves it."""
        by_name = self.by_name
        tags: tuple[str, ...] | None = None  # no sample's: the first one resolves
        attributes: Attrs = ()
        at_hand = _UNRESOLVED
        with self._lock:
            now = time.time_ns()  # the exemplars' (in the lock: after any collection's)
            for metric, sample_tags, sample_attributes, value, trace_id, span_id in samples:
                histogram = by_name.get(metric)
                if histogram is None or value < 0:
                    continue
                if sample_tags is not tags or sample_attributes is not attributes:
                    tags, attributes = sample_tags, sample_attributes
                    known = self._at_hand.get((tags, attributes))
                    at_hand = self._resolve(tags, attributes, labels) if known is None else known
                series = at_hand.series.get(metric)
                if series is None:
                    series = at_hand.series[metric] = histogram.series_locked(at_hand.attrs)
                index = bisect.bisect_left(histogram.bounds, value)
                _add(series, index, value, trace_id, span_id, now)

    def _resolve(
        self,
        tags: tuple[str, ...],
        attributes: Attrs,
        labels: Callable[[tuple[str, ...], Attrs], Attrs],
    ) -> _AtHand:
        """Labels and series of a span name not at hand (lock held; ``labels`` never
        takes it); :meth:`record` looks at hand first."""
        at_hand = self._at_hand[tags, attributes] = _AtHand(labels(tags, attributes))
        if len(self._at_hand) > MAX_AT_HAND:
            del self._at_hand[next(iter(self._at_hand))]
        return at_hand

    def inject(
        self, data: MetricsData, temporality: AggregationTemporality = _CUMULATIVE, reader: int = 0
    ) -> MetricsData:
        """``data`` with every histogram's points added to otel-spans' scope."""
        return add_metrics(data, [h.metric(temporality, reader) for h in self.by_name.values()])
