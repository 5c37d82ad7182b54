"""Cumulative sums of every counter series, fed by deltas, and the gauges' last reading.

The scheduler side reads Dask's cumulative values on the event loop and hands over
*deltas* (:meth:`Signals.submit_deltas <otel_spans.telemetry.signals.Signals.submit_deltas>`);
:class:`MetricsState` sums them into cumulative series under a lock, applying the
cardinality budget to every label and feeding the cost model. The instruments of
:mod:`otel_spans.telemetry.metrics` read those sums from the metric reader's thread.
Nothing here touches a live scheduler object.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable

from otel_spans import semconv
from otel_spans.names import LABEL_LENGTH, clean
from otel_spans.records import Attrs, CounterDelta, GaugeValue
from otel_spans.settings import MetricsSettings
from otel_spans.telemetry.cardinality import CardinalityLimiter

#: Deltas the cost model reads: span worker time (its busy share) and cluster time offered.
_COST_INPUTS = frozenset({semconv.M_EXECUTE_TIME, semconv.M_CLUSTER_CPU_AVAILABLE})
_WORKFLOWS_SHARE: Attrs = ((semconv.ATTR_COST_SHARE, semconv.COST_SHARE_WORKFLOWS),)
_IDLE_SHARE: Attrs = ((semconv.ATTR_COST_SHARE, semconv.COST_SHARE_IDLE),)
#: The attribute of the idle share among a span's execute times (not its tasks' cost).
_IDLE_ACTIVITY = (semconv.ATTR_ACTIVITY, semconv.IDLE_ACTIVITY)

#: The metrics' logger, by the name log filters and pipelines know (not this module's).
logger = logging.getLogger("otel_spans.telemetry.metrics")
#: Longest metric attribute value (span names, prefixes, activities...).
MAX_LABEL_LENGTH = LABEL_LENGTH
#: Most (span name, workflow labels, prefix) label sets memoised for the task path.
MAX_TASK_LABELS = 4_096
#: Most (tags, attributes) -> labels memoised for deltas and gauges: a live span's
#: series are read on every metrics tick, each with the same tags and attributes.
MAX_SERIES_LABELS = 8_192


class MetricsState:
    """Cumulative sums of every counter series, fed by deltas; thread-safe."""

    def __init__(self, settings: MetricsSettings, series_limit: int | None = None):
        self.settings = settings
        self.span_names = CardinalityLimiter(settings.max_span_names)
        self.prefixes = CardinalityLimiter(settings.max_prefixes)
        self.workers = CardinalityLimiter(settings.max_workers)
        #: One budget per workflow attribute of ``metrics.attribute-labels``.
        self.workflow_labels = {
            name: CardinalityLimiter(settings.max_attribute_values)
            for name in settings.attribute_labels
        }
        #: The SDK's cardinality limit per instrument, as configured on the provider.
        self.series_limit = settings.max_series if series_limit is None else series_limit
        #: metric -> most series the SDK folded into its overflow point at one collection.
        self._folded: dict[str, int] = {}
        self._sums: dict[str, dict[Attrs, float]] = defaultdict(dict)
        #: Gauge series of the last complete reading (replaced as a whole).
        self._gauges: dict[str, dict[Attrs, float]] = {}
        self._lock = threading.Lock()
        #: (tags, workflow labels, prefix) -> labels, for the per-task path: a cache
        #: of at most ``MAX_TASK_LABELS``, oldest evicted first (then computed again),
        #: counted in ``task_labels_evicted``.
        self._task_labels: dict[tuple[tuple[str, ...], Attrs, str], Attrs] = {}
        self.task_labels_evicted = 0
        #: (tags, attributes) -> labels of the deltas' and gauges' series whose values
        #: every budget had admitted (see :meth:`series_labels`), oldest evicted first.
        self._series_labels: dict[tuple[tuple[str, ...] | None, Attrs], Attrs] = {}
        #: The cost model's running totals (thread-seconds; see :meth:`_account`).
        self._busy = 0.0
        self._available = 0.0
        self._idle = 0.0

    def task_labels(self, tags: tuple[str, ...], labels: Attrs, prefix: str) -> Attrs:
        """:meth:`labels` for a span and a prefix, memoised: called once per task."""
        key = (tags, labels, prefix)
        attrs = self._task_labels.get(key)
        if attrs is None:
            attrs = self._task_labels[key] = self.labels(
                tags, ((semconv.DASK_TASK_PREFIX, prefix), *labels)
            )
            if len(self._task_labels) > MAX_TASK_LABELS:
                del self._task_labels[next(iter(self._task_labels))]
                self.task_labels_evicted += 1
        return attrs

    def labels(self, tags: tuple[str, ...] | None, attributes: Attrs) -> Attrs:
        """The bounded metric attributes of a series.

        Every value is cut to ``MAX_LABEL_LENGTH`` by :func:`otel_spans.names.clean`,
        the rule names already met where they entered: a value that did not pass there
        (a worker's activity name) cannot make the SDK's encoder drop the label.
        """
        return self._labels(tags, attributes)[0]

    def series_labels(self, tags: tuple[str, ...] | None, attributes: Attrs) -> Attrs:
        """:meth:`labels`, memoised: a live span's series come again on every tick.

        Only label sets whose every value its budget admitted are kept: an admitted
        value stays admitted, so those are what :meth:`labels` would give again, and no
        budget is asked less often than without the memo for a value it replaced (each
        such value is still offered every time, as ``overflowed`` and
        ``overflow_forgotten`` count). Used on the event loop only.
        """
        key = (tags, attributes)
        labels = self._series_labels.get(key)
        if labels is None:
            labels, admitted = self._labels(tags, attributes)
            if admitted:
                memo = self._series_labels
                if len(memo) >= MAX_SERIES_LABELS:
                    del memo[next(iter(memo))]
                memo[key] = labels
        return labels

    def _labels(self, tags: tuple[str, ...] | None, attributes: Attrs) -> tuple[Attrs, bool]:
        """:meth:`labels`, and whether every budget admitted its value as it is."""
        out: list[tuple[str, str]] = []
        admitted = True
        if tags is not None:
            name = clean("/".join(tags), MAX_LABEL_LENGTH)
            kept = self.span_names(name)
            admitted = _admitted(self.span_names, name, kept)
            out.append((semconv.DASK_SPAN_NAME, kept))
            root = clean(tags[0], MAX_LABEL_LENGTH) if tags else ""
            kept = self.span_names(root)
            admitted = _admitted(self.span_names, root, kept) and admitted
            out.append((semconv.ATTR_SPAN_ROOT, kept))
        for key, value in attributes:
            value = clean(value, MAX_LABEL_LENGTH)
            if key == semconv.DASK_TASK_PREFIX:
                limiter: CardinalityLimiter | None = self.prefixes
            elif key == semconv.DASK_WORKER_ADDRESS:
                limiter = self.workers
            else:
                limiter = self.workflow_labels.get(key)
            if limiter is not None:
                kept = limiter(value)
                admitted = _admitted(limiter, value, kept) and admitted
                value = kept
            out.append((key, value))
        return tuple(out), admitted

    def add(self, deltas: Iterable[CounterDelta]) -> None:
        """Sum ``deltas`` into their series. A span's deltas come in a row with the
        same tags, several with the very same attributes too: labels are looked up
        again only when those change (the budgets, asked the same value twice in a
        row, would answer and count nothing new)."""
        sums, memo = self._sums, self._series_labels
        tags: tuple[str, ...] | None = ()
        attributes: Attrs | None = None
        attrs: Attrs = ()
        with self._lock:
            accounted = False
            for delta in deltas:
                metric, delta_tags, delta_attributes, value = delta
                if delta_tags is not tags or delta_attributes is not attributes:
                    tags, attributes = delta_tags, delta_attributes
                    known = memo.get((tags, attributes))  # series_labels' memo, inline
                    attrs = self.series_labels(tags, attributes) if known is None else known
                series = sums[metric]
                series[attrs] = series.get(attrs, 0.0) + value
                if metric in _COST_INPUTS:
                    accounted = self._account(delta) or accounted
            if accounted:
                self._settle_idle()

    def _account(self, delta: CounterDelta) -> bool:
        """Feed the cost model (docs/telemetry.md, Cost): a span's cost is the thread
        time its own tasks used; the cluster's is the thread time its workers offered."""
        if delta.metric == semconv.M_CLUSTER_CPU_AVAILABLE:
            self._available += delta.value
            return True
        if delta.tags is None or _IDLE_ACTIVITY in delta.attributes:
            return False
        self._busy += delta.value
        price = self.settings.cpu_hour_price
        if price is not None:
            workflow = tuple(a for a in delta.attributes if a[0] in self.workflow_labels)
            attrs = self.series_labels(delta.tags, workflow)
            cost = self._sums[semconv.M_SPAN_COST]
            cost[attrs] = cost.get(attrs, 0.0) + delta.value / 3600 * price
        return True

    def _settle_idle(self) -> None:
        """Idle is what the cluster offered minus what the spans' tasks used, and a
        counter: it only grows. Work reported after its interval was read (worker
        metrics travel with heartbeats) is not taken back from idle, so the cluster's
        cost (workflows + idle) can run ahead of the thread time offered by that much
        until idle time catches up; it never leaves a thread-second unaccounted."""
        self._idle = max(self._idle, self._available - self._busy)
        self._sums[semconv.M_CLUSTER_CPU_IDLE][()] = self._idle
        price = self.settings.cpu_hour_price
        if price is not None:
            self._sums[semconv.M_CLUSTER_COST] = {
                _WORKFLOWS_SHARE: self._busy / 3600 * price,
                _IDLE_SHARE: self._idle / 3600 * price,
            }

    def read(self, metric: str) -> list[tuple[Attrs, float]]:
        with self._lock:
            return list(self._sums.get(metric, {}).items())

    def set_gauges(self, values: Iterable[GaugeValue]) -> None:
        """Replace every gauge series by ``values``: series of exported spans vanish."""
        gauges: dict[str, dict[Attrs, float]] = defaultdict(dict)
        for metric, tags, attributes, value in values:
            attrs = self.series_labels(tags, attributes)
            series = gauges[metric]
            # two spans whose names fold into (overflow) add up
            series[attrs] = series.get(attrs, 0.0) + value
        with self._lock:
            self._gauges = dict(gauges)

    def read_gauge(self, metric: str) -> list[tuple[Attrs, float]]:
        with self._lock:
            return list(self._gauges.get(metric, {}).items())

    def observed(self, metric: str, series: int) -> None:
        """One collection reported ``series`` series of ``metric``: the SDK (or, for a
        histogram, :mod:`otel_spans.telemetry.histogram`) keeps ``series_limit`` of them
        and folds the rest into one overflow point. Counted here, where the number is
        known, so that no series vanishes uncounted. Called from the metric reader
        threads (a Prometheus scrape's among them), hence the lock."""
        folded = series - self.series_limit
        if folded <= self._folded.get(metric, 0):
            return
        with self._lock:
            first = not self._folded
            self._folded[metric] = max(folded, self._folded.get(metric, 0))
        if first:
            logger.warning(
                "otel-spans: %s has %d series, more than metrics.max-series (%d); the rest "
                "are folded into one otel.metric.overflow point (counted in %s)",
                metric,
                series,
                self.series_limit,
                semconv.M_OVERFLOW,
            )

    def _limiters(self) -> list[CardinalityLimiter]:
        return [self.span_names, self.prefixes, *self.workflow_labels.values()]

    def overflow_forgotten(self) -> int:
        """Replaced values the budgets forgot (each counts again if it comes back)."""
        return sum(limiter.forgotten for limiter in self._limiters())

    def _series_folded(self) -> int:
        with self._lock:
            return sum(self._folded.values())

    def overflow(self) -> dict[str, int]:
        return {
            semconv.DASK_SPAN_NAME: self.span_names.overflowed,
            semconv.DASK_TASK_PREFIX: self.prefixes.overflowed,
            semconv.DASK_WORKER_ADDRESS: self.workers.overflowed,
            **{name: limiter.overflowed for name, limiter in self.workflow_labels.items()},
            semconv.LIMITED_SERIES: self._series_folded(),
        }


def _admitted(limiter: CardinalityLimiter, value: str, kept: str) -> bool:
    """Whether ``limiter`` gave ``value`` back as admitted (it returns the very object)."""
    return kept is value and value is not limiter.overflow_value
