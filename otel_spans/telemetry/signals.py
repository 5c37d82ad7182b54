"""The OTel side of the scheduler: records in, signals out.

The scheduler's modules only ever hand records to :class:`Signals`; which signals
exist and how they are encoded is decided here, where they go in :mod:`otel_spans.export`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import View

from otel_spans import __version__, semconv
from otel_spans.export import wire
from otel_spans.export.disk import DiskBudget
from otel_spans.export.files import budget_of
from otel_spans.export.outcome import Delivery, deliver
from otel_spans.export.pipeline import ExportPipeline
from otel_spans.export.prometheus import PrometheusEndpoint
from otel_spans.export.resource import build_resource
from otel_spans.export.sdk import CountingMetricExporter, Inject, make_metric_exporter
from otel_spans.export.senders import make_request_sender
from otel_spans.names import LABEL_LENGTH, clean
from otel_spans.records import (
    Attrs,
    CounterDelta,
    GaugeValue,
    HistogramSample,
    LogEntry,
    ProfileRecord,
    SpanRecord,
)
from otel_spans.settings import ConfigError, Settings, bounded
from otel_spans.task_records import DeferredTask, GroupRecord, TaskRecord
from otel_spans.telemetry import logs, python_logs, traces
from otel_spans.telemetry.histogram import Histograms, OwnHistogram, Series
from otel_spans.telemetry.metric_state import MetricsState
from otel_spans.telemetry.metrics import HISTOGRAMS, TASK_DURATION, Instruments

#: Everything that becomes spans: Dask spans, task groups, task runs (with phases).
TraceRecord = SpanRecord | GroupRecord | TaskRecord | DeferredTask

logger = logging.getLogger("otel_spans")


#: Seconds each part may take to stop when construction failed (nothing is queued yet).
_ABORT_TIMEOUT = 1.0

#: The fixed per-instrument cardinality limit of OTel SDKs whose View cannot set one.
SDK_DEFAULT_SERIES_LIMIT = 2000


def series_limit_views(max_series: int) -> tuple[list[View], int]:
    """Views that set the SDK's cardinality limit to ``max_series``, and the limit the
    SDK will apply (its fixed default where a View cannot set it)."""
    if "aggregation_cardinality_limit" in inspect.signature(View).parameters:
        return [View(instrument_name="*", aggregation_cardinality_limit=max_series)], max_series
    return [], SDK_DEFAULT_SERIES_LIMIT


def _listen(host: str, port: int, inject: Inject) -> PrometheusEndpoint:
    """The Prometheus endpoint; a port that cannot be bound is a configuration error."""
    try:
        return PrometheusEndpoint(host, port, inject)
    except OSError as error:
        raise ConfigError(
            f"otel-spans.metrics.prometheus-port: cannot listen on {host}:{port} "
            f"({error.strerror or error}); choose a free port, or 0 for any"
        ) from error


class Signals:
    """Resource, exporters and pipelines of one process."""

    def __init__(
        self,
        settings: Settings,
        *,
        role: str,
        instance_id: str,
        scheduler_address: str,
        loop_errors: Callable[[], int] = lambda: 0,
        hooks_disabled: Callable[[], int] = lambda: 0,
    ):
        self.settings = settings
        self.resource = build_resource(
            settings, instance_id=instance_id, scheduler_address=scheduler_address
        )
        #: Errors of ours caught on the event loop, as the plugin counts them now.
        self._loop_errors = loop_errors
        #: The plugin's self-protection: how many times it switched its hooks off.
        self._hooks_disabled = hooks_disabled
        #: ... and on the exporter threads.
        self._export_errors = 0
        #: The embedded default's cap and counters, when a signal goes to files.
        targets = (settings.traces.target, settings.metrics.target, settings.logs.target)
        self._disk: DiskBudget | None = next(
            (budget_of(target) for target in targets if target.kind == "file"), None
        )
        #: Records of Python's logging go out with the logs (see export_python_logs).
        self.python_logs: python_logs.PythonLogs | None = None
        self.meter_provider: MeterProvider | None = None
        self.prometheus: PrometheusEndpoint | None = None
        self._pipelines: list[ExportPipeline[Any]] = []
        self._readers: list[MetricReader] = []
        self._metric_exporter: CountingMetricExporter | None = None
        #: The metric exports' counts once the exporter is released.
        self._final_metric_exports: dict[str, int] | None = None
        try:
            self._init_traces(role)
            self._init_metrics(role)
            self._init_logs(role)
        except BaseException:
            # A later step failed (a port in use): stop every thread and server the
            # earlier ones started, or they would run for the life of the process.
            self._abort()
            raise

    # -- traces ------------------------------------------------------------------------
    def _init_traces(self, role: str) -> None:
        settings = self.settings
        trace_settings = settings.traces
        #: False when traces go nowhere: then nothing is built for them at all.
        self.traces_enabled = trace_settings.target.enabled
        self._trace_sender = make_request_sender(trace_settings.target, signal="traces", role=role)
        encoder = self._request_encoder()
        limits = settings.record_limits

        def encode_spans(batch: Sequence[TraceRecord]) -> bytes:
            spans = []
            for record in batch:
                if isinstance(record, SpanRecord):
                    spans.append(traces.dask_span(record, limits=limits))
                elif isinstance(record, GroupRecord):
                    spans.append(traces.group_span(record, limits=limits))
                elif isinstance(record, TaskRecord):
                    spans.extend(traces.task_spans(record, limits=limits))
                else:
                    task = self._build(record)
                    if task is not None:
                        spans.extend(traces.task_spans(task, limits=limits))
            return encoder.request(spans)

        def send_spans(batch: list[TraceRecord]) -> Delivery:
            return deliver(batch, encode_spans, self._trace_sender.send)

        self.spans: ExportPipeline[TraceRecord] = ExportPipeline(
            "traces",
            send_spans,
            self._trace_sender.shutdown,
            queue_size=settings.queue_size,
            batch_size=settings.batch_size,
            batch_wait=trace_settings.batch_wait,
        )
        self._pipelines.append(self.spans)

    def _build(self, pending: DeferredTask) -> TaskRecord | None:
        """The record of a kept task, on the exporter thread; a bad one costs only itself."""
        try:
            return pending.build()
        except Exception:
            self._export_errors += 1
            if self._export_errors == 1:
                logger.exception("otel-spans: task %r could not be recorded (ignored)", pending.key)
            return None

    def submit_span(self, record: TraceRecord) -> bool:
        if not self.traces_enabled:
            return True
        return self.spans.submit(record)

    def _request_encoder(self) -> wire.RequestEncoder:
        return wire.RequestEncoder(
            self.resource.attributes, semconv.SCOPE_NAME, __version__, semconv.SCHEMA_URL
        )

    # -- logs --------------------------------------------------------------------------
    def _init_logs(self, role: str) -> None:
        self.logs: ExportPipeline[logs.LogSource] = logs.log_pipeline(
            self.settings, self.resource.attributes, role=role, scope_name=semconv.SCOPE_NAME
        )
        self._pipelines.append(self.logs)

    def submit_log(self, entry: LogEntry) -> bool:
        return self.logs.submit(entry)

    def submit_profile(self, record: ProfileRecord) -> bool:
        """A workflow's profile of one prefix, folded on the logs exporter thread."""
        return self.logs.submit(record)

    def export_python_logs(self, about: python_logs.About) -> None:
        """Records of Python's logging (``logs.python``) into the logs pipeline, from
        whichever thread logs them; ``about`` names what a task key or span id means."""
        settings = self.settings
        if not (settings.logs.python.enabled and settings.logs.target.enabled):
            return
        sink = python_logs.PythonLogs(
            settings.logs.python,
            self.logs.producer(),
            about,
            exception_messages=settings.capture.exceptions == "message",
        )
        if python_logs.attach(sink):
            self.python_logs = sink

    # -- metrics -----------------------------------------------------------------------
    def _init_metrics(self, role: str) -> None:
        m = self.settings.metrics
        views, series_limit = series_limit_views(m.max_series)
        self.metric_state = MetricsState(m, series_limit)
        readers = self._readers
        self._histograms(series_limit)
        inject = self.histograms.inject
        if m.prometheus_port is not None:
            # First: the one step that can fail on the machine (the port is taken).
            self.prometheus = _listen(m.prometheus_host, m.prometheus_port, inject)
            readers.append(self.prometheus.reader)
        self._prometheus_port = self.prometheus.port if self.prometheus is not None else None
        exporter = make_metric_exporter(m.target, m.temporality, role=role)
        if exporter is not None:
            self._metric_exporter = CountingMetricExporter(exporter, inject)
            readers.append(
                PeriodicExportingMetricReader(
                    self._metric_exporter,
                    export_interval_millis=m.interval * 1000,
                    export_timeout_millis=bounded(m.export_timeout) * 1000,
                )
            )
        self.meter_provider = MeterProvider(
            resource=self.resource,
            metric_readers=readers,
            # Every instrument keeps metrics.max-series series before the SDK folds the
            # rest into its overflow point; MetricsState counts what is folded.
            views=views,
        )
        meter = self.meter_provider.get_meter(
            semconv.SCOPE_NAME, __version__, schema_url=semconv.SCHEMA_URL
        )
        self._instruments: Instruments | None = Instruments(meter, self.metric_state, self.stats)

    def _histograms(self, series_limit: int | None) -> None:
        """Every histogram, aggregated here (:mod:`.histogram`), folded past the limit the
        SDK applies to its instruments and counted where their folds are counted."""
        state = self.metric_state
        self.histograms = Histograms(HISTOGRAMS, series_limit, state.observed)
        self.task_durations: OwnHistogram = self.histograms[TASK_DURATION.name]

    def submit_deltas(self, deltas: Iterable[CounterDelta]) -> None:
        self.metric_state.add(deltas)

    def submit_gauges(self, values: Iterable[GaugeValue]) -> None:
        """The progress of every running span, replacing the previous reading."""
        self.metric_state.set_gauges(values)

    def record_samples(self, samples: Iterable[HistogramSample]) -> None:
        """A Dask span's histogram values, on the event loop (:meth:`Histograms.record`)."""
        self.histograms.record(samples, self.metric_state.labels)

    def record_task_duration(
        self,
        tags: tuple[str, ...],
        labels: Attrs,
        prefix: str,
        seconds: float,
        trace_id: int,
        span_id: int,
        error_type: str = "",
    ) -> None:
        """One finished task (on the event loop): a bisect and a few additions. An
        erred task's point carries ``error.type``, as the conventions' durations do."""
        attrs = self.metric_state.task_labels(tags, labels, prefix)
        if error_type:
            attrs = (*attrs, (semconv.ERROR_TYPE, clean(error_type, LABEL_LENGTH)))
        self.task_durations.record(attrs, seconds, trace_id, span_id)

    def task_series(self, tags: tuple[str, ...], labels: Attrs, prefix: str) -> Series:
        """The duration histogram's series of a span's prefix, for the per-task path to
        keep (:meth:`OwnHistogram.record_in`): the labels are resolved, and
        counted against their budgets, once per span and prefix instead of per task."""
        return self.task_durations.series(self.metric_state.task_labels(tags, labels, prefix))

    def task_exemplar(
        self,
        tags: tuple[str, ...],
        labels: Attrs,
        prefix: str,
        seconds: float,
        trace_id: int,
        span_id: int,
    ) -> None:
        """A task span exported after its task was counted (one of its group's slowest):
        the duration histogram may point at it from now on."""
        self.task_durations.exemplar(
            self.metric_state.task_labels(tags, labels, prefix), seconds, trace_id, span_id
        )

    # -- bookkeeping ---------------------------------------------------------------------
    def describe(self) -> str:
        m = self.settings.metrics
        text = (
            f"traces to {self.settings.traces.target.describe()}; "
            f"metrics every {m.interval:g}s to {m.target.describe()}; "
            f"logs to {self.settings.logs.target.describe()}"
        )
        if self.prometheus is not None:
            text += f"; Prometheus endpoint on {self.prometheus.host}:{self.prometheus.port}"
        return text

    def stats(self) -> dict[str, Any]:
        crashes = sum(pipeline.stats().crashes for pipeline in self._pipelines)
        out: dict[str, Any] = {
            "traces": {**self.spans.stats().as_dict(), "deleted": self._deleted("traces")},
            "logs": {**self.logs.stats().as_dict(), "deleted": self._deleted("logs")},
            "python_logs": self.python_logs.stats() if self.python_logs else {"active": False},
            "internal_errors": self._loop_errors() + self._export_errors + crashes,
            "hooks_disabled": self._hooks_disabled(),
            "task_labels_evicted": self.metric_state.task_labels_evicted,
            "overflow_forgotten": self.metric_state.overflow_forgotten(),
        }
        metric_exports = self._metric_export_counts()
        if metric_exports is not None:
            out["metric_exports"] = metric_exports
        if self._prometheus_port is not None:
            out["prometheus_port"] = self._prometheus_port
        if self._disk is not None:
            out["files"] = self._disk.stats()
        return out

    def _deleted(self, signal: str) -> int:
        """Records of ``signal`` in files the cap deleted (exported, then deleted)."""
        counts = self._disk.counts.get(signal) if self._disk is not None else None
        return counts.deleted_records if counts is not None else 0

    def _metric_export_counts(self) -> dict[str, int] | None:
        exporter = self._metric_exporter
        if exporter is None:
            return self._final_metric_exports
        return {"exported": exporter.counts.exported, "failed": exporter.counts.failed}

    def close(self, timeout: float) -> None:
        """Flush and stop everything within about ``timeout`` seconds in all."""
        share = timeout / 4
        if self.python_logs is not None:
            python_logs.detach(self.python_logs)
        for pipeline in self._pipelines:
            pipeline.flush(share)
        try:
            # A final collection and export, bounded by the share of the deadline; the
            # pipelines' transports are still open (see ExportPipeline.flush).
            if self.meter_provider is not None:
                self.meter_provider.shutdown(timeout_millis=share * 1000)
        except Exception:
            logger.exception("otel-spans: metrics shutdown failed")
        for pipeline in self._pipelines:
            pipeline.stop()
        if self.prometheus is not None:
            self.prometheus.close()
        self._release_metrics()

    def _abort(self) -> None:
        """Undo a construction that failed halfway: nothing was submitted yet."""
        for pipeline in self._pipelines:
            pipeline.close(_ABORT_TIMEOUT)
        try:
            if self.meter_provider is not None:
                self.meter_provider.shutdown(timeout_millis=_ABORT_TIMEOUT * 1000)
            else:  # readers start their threads before a provider owns them
                for reader in self._readers:
                    reader.shutdown(timeout_millis=_ABORT_TIMEOUT * 1000)
        except Exception:
            logger.exception("otel-spans: metrics shutdown failed")
        if self.prometheus is not None:
            self.prometheus.close()
        self._release_metrics()

    def _release_metrics(self) -> None:
        """Let go of the metric SDK and of every series once closed.

        A closed scheduler can stay alive, and its plugins with it: distributed keeps
        every handler it was asked about in an unbounded cache (``core._expects_comm``),
        so each scheduler a process ever ran lives on. Held from there, the meter
        provider, its series and the histograms would be tens of thousands of
        objects per scheduler that every full garbage collection walks again.
        """
        self._final_metric_exports = self._metric_export_counts()
        self._metric_exporter = None
        self._readers = []
        self.prometheus = None
        self.meter_provider = None
        self._instruments = None
        self.metric_state = MetricsState(self.settings.metrics)
        self._histograms(None)
