"""Counter deltas and observations become OpenTelemetry metrics.

The scheduler side (``plugin``) reads Dask's cumulative values on the event loop and
hands over *deltas*; :class:`MetricsState` sums them into cumulative series under a
lock, applying the cardinality budget. The SDK's observable counters read those sums
from the metric reader's thread. Nothing here touches a live scheduler object, so the
loop and the export thread never share mutable Dask state.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Histogram, Meter, Observation
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_spans import records, semconv
from otel_spans.names import LABEL_LENGTH, clean
from otel_spans.records import Attrs, CounterDelta, GaugeValue
from otel_spans.settings import MetricsSettings
from otel_spans.telemetry.cardinality import CardinalityLimiter

#: (metric, unit, description) of every observable counter fed by deltas.
COUNTERS: tuple[tuple[str, str, str], ...] = (
    (semconv.M_EXECUTE_TIME, semconv.UNIT_SECONDS, "Worker time of the span's own tasks"),
    (semconv.M_EXECUTE_BYTES, semconv.UNIT_BYTES, "Bytes handled by the span's own tasks"),
    (semconv.M_EXECUTE_COUNT, semconv.UNIT_EVENTS, "Events counted by the span's own tasks"),
    (semconv.M_P2P_TIME, semconv.UNIT_SECONDS, "P2P shuffle time of the span"),
    (semconv.M_P2P_BYTES, semconv.UNIT_BYTES, "P2P shuffle bytes of the span"),
    (semconv.M_P2P_COUNT, semconv.UNIT_EVENTS, "P2P shuffle events of the span"),
    (semconv.M_SPAN_TASKS, semconv.UNIT_TASKS, "Tasks of the span that reached a final state"),
    (semconv.M_SPAN_OUTPUT, semconv.UNIT_BYTES, "Bytes of task outputs the span produced"),
    (
        semconv.M_SPAN_CPU_AVAILABLE,
        semconv.UNIT_SECONDS,
        "Thread-seconds the cluster made available while the span ran",
    ),
    (semconv.M_CLUSTER_TIME, semconv.UNIT_SECONDS, "Worker time, whole cluster"),
    (semconv.M_CLUSTER_BYTES, semconv.UNIT_BYTES, "Worker bytes, whole cluster"),
    (semconv.M_CLUSTER_COUNT, semconv.UNIT_EVENTS, "Worker events, whole cluster"),
    (
        semconv.M_CLUSTER_CPU_AVAILABLE,
        semconv.UNIT_SECONDS,
        "Thread-seconds the cluster's workers made available",
    ),
    (
        semconv.M_CLUSTER_CPU_IDLE,
        semconv.UNIT_SECONDS,
        "Thread-seconds the cluster made available that no Dask span's tasks used",
    ),
    (semconv.DASK_SPAN_MEMORY_SPILLED, semconv.UNIT_BYTES, "Bytes the span's tasks spilled"),
    (
        semconv.DASK_SPAN_MEMORY_UNSPILLED,
        semconv.UNIT_BYTES,
        "Bytes the span's tasks read back from disk",
    ),
    (
        semconv.DASK_SPAN_MEMORY_PAUSES,
        semconv.UNIT_PAUSES,
        "Worker memory pauses that overlapped the span's tasks",
    ),
    (
        semconv.DASK_SPAN_MEMORY_PAUSE_DURATION,
        semconv.UNIT_SECONDS,
        "Seconds of worker memory pauses that overlapped the span's tasks",
    ),
    (
        semconv.DASK_SPAN_MEMORY_WORKERS_LOST,
        semconv.UNIT_WORKERS,
        "Workers lost while running or holding the span's tasks",
    ),
)

#: (metric, unit, description) of every observable gauge of running spans.
GAUGES: tuple[tuple[str, str, str], ...] = (
    (semconv.M_OPEN_TASKS, semconv.UNIT_TASKS, "Own tasks of a running Dask span by state"),
    (semconv.M_OPEN_ELAPSED, semconv.UNIT_SECONDS, "Seconds since a running Dask span appeared"),
    (
        semconv.DASK_SPAN_MEMORY_HELD,
        semconv.UNIT_BYTES,
        "Bytes of results of a live Dask span's own tasks held on the cluster",
    ),
    (semconv.M_WORKER_MEMORY, semconv.UNIT_BYTES, "A worker's memory by type"),
    (semconv.M_WORKER_MEMORY_LIMIT, semconv.UNIT_BYTES, "A worker's memory limit"),
    (semconv.M_CLUSTER_MEMORY, semconv.UNIT_BYTES, "The workers' memory by type, summed"),
)

#: ``otel_spans.outcome`` values of ``otel_spans.records`` (see the export pipeline's
#: counters: ``rejected`` counts items a collector's partial success rejected;
#: ``deleted``, records exported to the embedded default's files that its cap deleted).
OUTCOMES = (
    "submitted",
    "exported",
    "dropped",
    "failed",
    "rejected",
    "too_large",
    "unsent",
    "suppressed",
    "deleted",
)

#: ``otel_spans.signal`` values of ``otel_spans.records``: the export pipelines.
PIPELINES = ("traces", "observations", "logs")

EFFICIENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
#: Bytes from 1 MiB to 1 TiB, each bucket four times the last.
MEMORY_BUCKETS = tuple(float(2**20 * 4**i) for i in range(11))
SPAN_DURATION_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400)

#: Deltas the cost model reads: span worker time (its busy share) and cluster time offered.
_COST_INPUTS = frozenset({semconv.M_EXECUTE_TIME, semconv.M_CLUSTER_CPU_AVAILABLE})
_WORKFLOWS_SHARE: Attrs = ((semconv.ATTR_COST_SHARE, semconv.COST_SHARE_WORKFLOWS),)
_IDLE_SHARE: Attrs = ((semconv.ATTR_COST_SHARE, semconv.COST_SHARE_IDLE),)

logger = logging.getLogger(__name__)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
#: Longest metric attribute value (span names, prefixes, activities...).
MAX_LABEL_LENGTH = LABEL_LENGTH
#: Most (span name, workflow labels, prefix) label sets memoised for the task path.
MAX_TASK_LABELS = 4_096


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
        out: list[tuple[str, str]] = []
        if tags is not None:
            name = clean("/".join(tags), MAX_LABEL_LENGTH)
            out.append((semconv.DASK_SPAN_NAME, self.span_names(name)))
            root = clean(tags[0], MAX_LABEL_LENGTH) if tags else ""
            out.append((semconv.ATTR_SPAN_ROOT, self.span_names(root)))
        for key, value in attributes:
            value = clean(value, MAX_LABEL_LENGTH)
            if key == semconv.DASK_TASK_PREFIX:
                value = self.prefixes(value)
            elif key == semconv.DASK_WORKER_ADDRESS:
                value = self.workers(value)
            else:
                limiter = self.workflow_labels.get(key)
                if limiter is not None:
                    value = limiter(value)
            out.append((key, value))
        return tuple(out)

    def add(self, deltas: Iterable[CounterDelta]) -> None:
        with self._lock:
            accounted = False
            for delta in deltas:
                attrs = self.labels(delta.tags, delta.attributes)
                series = self._sums[delta.metric]
                series[attrs] = series.get(attrs, 0.0) + delta.value
                if delta.metric in _COST_INPUTS:
                    accounted = self._account(delta) or accounted
            if accounted:
                self._settle_idle()

    def _account(self, delta: CounterDelta) -> bool:
        """Feed the cost model (docs/telemetry.md, Cost): a span's cost is the thread
        time its own tasks used; the cluster's is the thread time its workers offered."""
        if delta.metric == semconv.M_CLUSTER_CPU_AVAILABLE:
            self._available += delta.value
            return True
        if delta.tags is None or (semconv.ATTR_ACTIVITY, semconv.IDLE_ACTIVITY) in delta.attributes:
            return False
        self._busy += delta.value
        price = self.settings.cpu_hour_price
        if price is not None:
            workflow = tuple(a for a in delta.attributes if a[0] in self.workflow_labels)
            attrs = self.labels(delta.tags, workflow)
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
        for value in values:
            attrs = self.labels(value.tags, value.attributes)
            series = gauges[value.metric]
            # two spans whose names fold into (overflow) add up
            series[attrs] = series.get(attrs, 0.0) + value.value
        with self._lock:
            self._gauges = dict(gauges)

    def read_gauge(self, metric: str) -> list[tuple[Attrs, float]]:
        with self._lock:
            return list(self._gauges.get(metric, {}).items())

    def observed(self, metric: str, series: int) -> None:
        """One collection reported ``series`` series of ``metric``: the SDK keeps
        ``series_limit`` of them and folds the rest into one overflow point. Counted here,
        where the number is known, so that no series vanishes uncounted."""
        folded = series - self.series_limit
        if folded <= self._folded.get(metric, 0):
            return
        if not self._folded:
            logger.warning(
                "otel-spans: %s has %d series, more than metrics.max-series (%d); the OTel "
                "SDK folds the rest into one otel.metric.overflow point (counted in %s)",
                metric,
                series,
                self.series_limit,
                semconv.M_OVERFLOW,
            )
        self._folded[metric] = folded

    def _limiters(self) -> list[CardinalityLimiter]:
        return [self.span_names, self.prefixes, *self.workflow_labels.values()]

    def overflow_forgotten(self) -> int:
        """Replaced values the budgets forgot (each counts again if it comes back)."""
        return sum(limiter.forgotten for limiter in self._limiters())

    def overflow(self) -> dict[str, int]:
        return {
            semconv.DASK_SPAN_NAME: self.span_names.overflowed,
            semconv.DASK_TASK_PREFIX: self.prefixes.overflowed,
            semconv.DASK_WORKER_ADDRESS: self.workers.overflowed,
            **{name: limiter.overflowed for name, limiter in self.workflow_labels.items()},
            semconv.LIMITED_SERIES: sum(self._folded.values()),
        }


def _observe(state: MetricsState, metric: str) -> Callable[[CallbackOptions], list[Observation]]:
    def callback(options: CallbackOptions) -> list[Observation]:
        observations = [Observation(value, dict(attrs)) for attrs, value in state.read(metric)]
        state.observed(metric, len(observations))
        return observations

    return callback


def _observe_gauge(
    state: MetricsState, metric: str
) -> Callable[[CallbackOptions], list[Observation]]:
    def callback(options: CallbackOptions) -> list[Observation]:
        observations = [
            Observation(value, dict(attrs)) for attrs, value in state.read_gauge(metric)
        ]
        state.observed(metric, len(observations))
        return observations

    return callback


class Instruments:
    """Creates every instrument on ``meter`` and records observations into histograms."""

    def __init__(
        self,
        meter: Meter,
        state: MetricsState,
        self_stats: Callable[[], Mapping[str, Any]],
    ):
        self.state = state
        for name, unit, description in COUNTERS:
            meter.create_observable_counter(
                name, callbacks=[_observe(state, name)], unit=unit, description=description
            )
        for name, unit, description in GAUGES:
            meter.create_observable_gauge(
                name, callbacks=[_observe_gauge(state, name)], unit=unit, description=description
            )
        if state.settings.cpu_hour_price is not None:
            currency = "{" + state.settings.currency + "}"
            meter.create_observable_counter(
                semconv.M_SPAN_COST,
                callbacks=[_observe(state, semconv.M_SPAN_COST)],
                unit=currency,
                description="Cost of the thread time the span's own tasks used",
            )
            meter.create_observable_counter(
                semconv.M_CLUSTER_COST,
                callbacks=[_observe(state, semconv.M_CLUSTER_COST)],
                unit=currency,
                description="Cost of the thread time the cluster made available, by share",
            )
        self._histograms: dict[str, Histogram] = {
            semconv.WORKFLOW_EFFICIENCY: meter.create_histogram(
                semconv.WORKFLOW_EFFICIENCY,
                unit=semconv.UNIT_RATIO,
                description="Share of the thread time available to a workflow its tasks used",
                explicit_bucket_boundaries_advisory=EFFICIENCY_BUCKETS,
            ),
            semconv.M_SPAN_DURATION: meter.create_histogram(
                semconv.M_SPAN_DURATION,
                unit=semconv.UNIT_SECONDS,
                description="Wall time of finished Dask spans",
                explicit_bucket_boundaries_advisory=SPAN_DURATION_BUCKETS,
            ),
            semconv.DASK_SPAN_MEMORY_PEAK: meter.create_histogram(
                semconv.DASK_SPAN_MEMORY_PEAK,
                unit=semconv.UNIT_BYTES,
                description="Most bytes of results a finished Dask span's own tasks held",
                explicit_bucket_boundaries_advisory=MEMORY_BUCKETS,
            ),
        }

        def records_cb(options: CallbackOptions) -> list[Observation]:
            out = []
            stats = self_stats()
            for signal in PIPELINES:
                counters = stats.get(signal)
                if not isinstance(counters, Mapping):
                    continue
                for outcome in OUTCOMES:
                    attrs = {semconv.ATTR_SIGNAL: signal, semconv.ATTR_OUTCOME: outcome}
                    out.append(Observation(counters.get(outcome, 0), attrs))
            return out

        def overflow_cb(options: CallbackOptions) -> list[Observation]:
            return [
                Observation(count, {semconv.ATTR_LIMITED: attribute})
                for attribute, count in state.overflow().items()
            ]

        def errors_cb(options: CallbackOptions) -> list[Observation]:
            return [Observation(int(self_stats().get("internal_errors", 0)))]

        meter.create_observable_counter(
            semconv.M_RECORDS,
            callbacks=[records_cb],
            unit=semconv.UNIT_RECORDS,
            description="Telemetry records of otel-spans by signal and outcome",
        )
        meter.create_observable_counter(
            semconv.M_OVERFLOW,
            callbacks=[overflow_cb],
            unit=semconv.UNIT_VALUES,
            description="Attribute values replaced by (overflow) to keep cardinality bounded",
        )

        def disabled_cb(options: CallbackOptions) -> list[Observation]:
            return [Observation(int(self_stats().get("hooks_disabled", 0)))]

        meter.create_observable_gauge(
            semconv.M_HOOKS_DISABLED,
            callbacks=[disabled_cb],
            unit=semconv.UNIT_STATE,
            description="1 once otel-spans stopped following tasks after repeated internal errors",
        )
        meter.create_observable_counter(
            semconv.M_INTERNAL_ERRORS,
            callbacks=[errors_cb],
            unit=semconv.UNIT_ERRORS,
            description="Errors inside otel-spans caught before they reached Dask",
        )

    def record(self, batch: list[records.HistogramSample]) -> bool:
        """Record histogram observations (on the pipeline thread, never the loop)."""
        for obs in batch:
            histogram = self._histograms.get(obs.metric)
            if histogram is None:
                continue
            context = trace.set_span_in_context(
                NonRecordingSpan(
                    SpanContext(obs.trace_id, obs.span_id, is_remote=True, trace_flags=_SAMPLED)
                )
            )
            histogram.record(obs.value, dict(self.state.labels(obs.tags, obs.attributes)), context)
        return True
