"""Counter deltas and gauge readings become OpenTelemetry metrics.

Every metric otel-spans defines (name, unit, description, buckets) and the
:class:`Instruments` that create the SDK's instruments on a meter. The histograms are
not SDK instruments: their specs (:data:`HISTOGRAMS`) are aggregated on the event loop
by :mod:`otel_spans.telemetry.histogram`. The scheduler side (``plugin``) reads
Dask's cumulative values on the event loop and hands over *deltas*;
:class:`~otel_spans.telemetry.metric_state.MetricsState` sums them into cumulative
series under a lock, applying the cardinality budget. The SDK's observable counters
read those sums from the metric reader's thread. Nothing here touches a live scheduler
object, so the loop and the export thread never share mutable Dask state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from otel_spans import semconv
from otel_spans.telemetry.histogram import HistogramSpec
from otel_spans.telemetry.metric_state import MetricsState

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
PIPELINES = ("traces", "logs")

EFFICIENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
#: Bytes from 1 MiB to 1 TiB, each bucket four times the last.
MEMORY_BUCKETS = tuple(float(2**20 * 4**i) for i in range(11))
SPAN_DURATION_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400)
TASK_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

#: One value per finished task; its exemplars stay on a cumulative point until
#: replaced (a bucket's slowest kept runs are exported once their group ends).
TASK_DURATION = HistogramSpec(
    semconv.M_TASK_DURATION,
    semconv.UNIT_SECONDS,
    "Compute time of tasks that computed or raised, by prefix",
    TASK_DURATION_BUCKETS,
    repeat_exemplars=True,
)
#: Every histogram: the task duration, and the values of a Dask span's export
#: (:class:`~otel_spans.records.HistogramSample`).
HISTOGRAMS: tuple[HistogramSpec, ...] = (
    TASK_DURATION,
    HistogramSpec(
        semconv.WORKFLOW_EFFICIENCY,
        semconv.UNIT_RATIO,
        "Share of the thread time available to a workflow its tasks used",
        EFFICIENCY_BUCKETS,
    ),
    HistogramSpec(
        semconv.M_SPAN_DURATION,
        semconv.UNIT_SECONDS,
        "Wall time of finished Dask spans",
        SPAN_DURATION_BUCKETS,
    ),
    HistogramSpec(
        semconv.DASK_SPAN_MEMORY_PEAK,
        semconv.UNIT_BYTES,
        "Most bytes of results a finished Dask span's own tasks held",
        MEMORY_BUCKETS,
    ),
)


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
    """Creates every SDK instrument on ``meter``: the observable counters and gauges."""

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
