"""The OTel SDK's exporters, configured from :class:`~otel_spans.settings.ExportTarget`.

The SDK exports the spans user code starts in tasks on workers (the scheduler's own
spans and logs are pre-encoded and go through :mod:`otel_spans.export.senders`); its
metric reader drives the metric exporters made here, which for a collector are our
own (:mod:`otel_spans.export.otlp_metrics`). Every option is passed to the SDK explicitly, so its
own reading of ``OTEL_*`` never disagrees with the settings resolved in
:mod:`otel_spans.config`, and every exporter is wrapped so that its outcomes are counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_spans.export.console import (
    ConsoleMetricExporter,
    ConsoleSpanExporter,
    TeeMetricExporter,
    TeeSpanExporter,
)
from otel_spans.export.files import OtlpJsonMetricExporter, OtlpJsonSpanExporter, writer_for
from otel_spans.export.http_session import http_session
from otel_spans.export.otlp_metrics import make_otlp_metric_exporter
from otel_spans.export.otlp_retry import user_agent
from otel_spans.export.tls import grpc_credentials
from otel_spans.settings import ExportTarget, Temporality, bounded

logger = logging.getLogger("otel_spans")

_CUMULATIVE = AggregationTemporality.CUMULATIVE
_DELTA = AggregationTemporality.DELTA
#: Adds data points aggregated outside the SDK to a batch: (data, temporality, reader id).
Inject = Callable[[MetricsData, AggregationTemporality, int], MetricsData]


class _Metadata(tuple):  # type: ignore[type-arg]
    """gRPC metadata that is true even when empty: the SDK's gRPC exporters read
    ``OTEL_EXPORTER_OTLP_HEADERS`` themselves when given none."""

    def __bool__(self) -> bool:
        return True


_E = TypeVar("_E")
#: Set while this thread builds an SDK exporter (see :func:`_quiet_header_parser`).
_building = threading.local()


class _SdkHeaderParserFilter(logging.Filter):
    """Drops the SDK header parser's warnings about variables this thread's exporter
    construction made it read: they print the malformed entry, value included, and
    :func:`otel_spans.redact.parse_headers` has already warned without it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_building, "active", False)


_PARSER_LOGGER = logging.getLogger("opentelemetry.util.re")
_PARSER_FILTER = _SdkHeaderParserFilter()


@contextmanager
def _quiet_header_parser() -> Iterator[None]:
    """The SDK's OTLP/HTTP exporters parse ``OTEL_EXPORTER_OTLP_*HEADERS`` whatever
    headers they are given: keep that parser quiet in this thread meanwhile."""
    if _PARSER_FILTER not in _PARSER_LOGGER.filters:
        _PARSER_LOGGER.addFilter(_PARSER_FILTER)
    _building.active = True
    try:
        yield
    finally:
        _building.active = False


def _only_our_headers(exporter: _E, target: ExportTarget) -> _E:
    """An SDK OTLP/HTTP exporter sending exactly ``target.headers``: it merges the
    ``OTEL_*`` headers variables under the headers it is given, though the settings
    may have set them aside (``otel-spans.headers`` wins) or dropped a malformed
    entry. Private in the SDK; without it the variables' headers are also sent."""
    from opentelemetry.exporter.otlp.proto.http import _OTLP_HTTP_HEADERS

    client: Any = getattr(exporter, "_client", None)
    if isinstance(getattr(client, "_headers", None), dict):
        headers = {k.lower(): v for k, v in _OTLP_HTTP_HEADERS.items()}
        headers["user-agent"] = user_agent()  # the same as our own senders'
        headers.update({k.lower(): v for k, v in target.headers.items()})
        client._headers = headers
    return exporter


def _otlp_options(target: ExportTarget) -> dict[str, Any]:
    """The constructor arguments every OTLP exporter of ``target``'s protocol takes."""
    if target.protocol == "grpc":
        import grpc

        return {
            "endpoint": target.endpoint,
            "insecure": target.insecure,
            "credentials": grpc_credentials(target),
            "headers": _Metadata((k.lower(), v) for k, v in target.headers.items()),
            "timeout": bounded(target.timeout),
            "compression": grpc.Compression.Gzip if target.compression else None,
            # the same user agent as our own senders' (the SDK's default otherwise)
            "channel_options": (("grpc.primary_user_agent", user_agent()),),
        }
    from opentelemetry.exporter.otlp.proto.http import Compression

    return {
        "endpoint": target.endpoint,
        "certificate_file": target.certificate,
        "client_certificate_file": target.client_certificate,
        "client_key_file": target.client_key,
        "headers": dict(target.headers),
        "timeout": bounded(target.timeout),
        "compression": Compression.Gzip if target.compression else Compression.NoCompression,
        "session": http_session(target),
    }


# -- counting ---------------------------------------------------------------------------------
@dataclass
class ExportCounts:
    """How many items an exporter delivered and how many it gave up on.

    The one place where an SDK exporter's outcome is counted (and its exceptions kept
    from the SDK thread): the SDK itself only logs failures.
    """

    exported: int = 0
    failed: int = 0

    def run(self, what: str, items: int, export: Callable[[], bool]) -> bool:
        try:
            ok = export()
        except Exception:
            logger.exception("otel-spans: exporting %s failed", what)
            ok = False
        if ok:
            self.exported += items
        else:
            self.failed += items
        return ok


class CountingSpanExporter(SpanExporter):
    """A span exporter whose spans are counted (exported or failed)."""

    def __init__(self, inner: SpanExporter):
        self.inner = inner
        self.counts = ExportCounts()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = self.counts.run(
            f"{len(spans)} worker spans",
            len(spans),
            lambda: self.inner.export(spans) == SpanExportResult.SUCCESS,
        )
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingMetricExporter(MetricExporter):
    """A metric exporter whose exports are counted, with outside points injected.

    A failed metrics export loses nothing with cumulative temporality (the next one
    carries the totals), but the operator still needs to see that exports fail.
    """

    def __init__(self, inner: MetricExporter, inject: Inject | None = None):
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner = inner
        self.inject = inject
        self.counts = ExportCounts()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        def export() -> bool:
            data = metrics_data
            if self.inject is not None:
                temporality = (self._preferred_temporality or {}).get(Histogram, _CUMULATIVE)
                data = self.inject(data, temporality, id(self))
            result = self.inner.export(data, timeout_millis=timeout_millis)
            return result == MetricExportResult.SUCCESS

        ok = self.counts.run("metrics", 1, export)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)


# -- spans ----------------------------------------------------------------------------------------
class _NoSpanExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def make_span_exporter(target: ExportTarget, *, role: str) -> SpanExporter:
    """The SDK span exporter for ``target``, every option passed explicitly."""
    primary = _primary_span_exporter(target, role=role)
    if not target.console:
        return primary
    console = ConsoleSpanExporter()
    return console if target.kind == "none" else TeeSpanExporter(primary, console)


def _primary_span_exporter(target: ExportTarget, *, role: str) -> SpanExporter:
    if target.kind == "none":
        return _NoSpanExporter()
    if target.kind == "file":
        return OtlpJsonSpanExporter(writer_for(target, "traces", role))
    options = _otlp_options(target)  # now: a TLS file that cannot be read fails here
    if target.protocol == "grpc":

        def build() -> SpanExporter:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )

            return GrpcSpanExporter(**options)

        return _FirstUseSpanExporter(build)

    def build_http() -> SpanExporter:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        with _quiet_header_parser():
            return _only_our_headers(HttpSpanExporter(**options), target)

    return _FirstUseSpanExporter(build_http)


class _FirstUseSpanExporter(SpanExporter):
    """The SDK's OTLP span exporter, built by the first export.

    Most workers never see a span from task code. Built with the worker, the exporter
    would import the SDK's OTLP exporter with its generated protobuf modules (thousands
    of objects every full collection walks) and open a gRPC channel, in every worker
    process, or at every start of an in-process cluster, for nothing.
    """

    def __init__(self, build: Callable[[], SpanExporter]):
        self._build = build
        self._inner: SpanExporter | None = None
        self._closed = False
        self._lock = threading.Lock()

    def _exporter(self) -> SpanExporter | None:
        with self._lock:
            if self._inner is None and not self._closed:
                self._inner = self._build()
            return self._inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        inner = self._exporter()
        return SpanExportResult.FAILURE if inner is None else inner.export(spans)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            inner = self._inner
        if inner is not None:
            inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        inner = self._inner
        return True if inner is None else inner.force_flush(timeout_millis)


# -- metrics --------------------------------------------------------------------------------------
def temporality_preference(choice: Temporality) -> dict[type, AggregationTemporality]:
    """The OTLP temporality preferences named in the OTel specification."""
    if choice == "cumulative":
        counters = histograms = observable = _CUMULATIVE
    elif choice == "delta":
        counters = histograms = observable = _DELTA
    else:  # lowmemory: delta where the SDK keeps no per-series state for it
        counters, histograms, observable = _DELTA, _DELTA, _CUMULATIVE
    return {
        Counter: counters,
        Histogram: histograms,
        ObservableCounter: observable,
        UpDownCounter: _CUMULATIVE,
        ObservableUpDownCounter: _CUMULATIVE,
        ObservableGauge: _CUMULATIVE,
    }


def make_metric_exporter(
    target: ExportTarget, temporality: Temporality, *, role: str
) -> MetricExporter | None:
    """The metric exporter for ``target``; None when metrics are not pushed."""
    preference = temporality_preference(temporality)
    primary = _primary_metric_exporter(target, preference, role=role)
    if not target.console:
        return primary
    console = ConsoleMetricExporter(preferred_temporality=preference)
    return console if primary is None else TeeMetricExporter(primary, console, preference)


def _primary_metric_exporter(
    target: ExportTarget, preference: dict[type, AggregationTemporality], *, role: str
) -> MetricExporter | None:
    if target.kind == "none":
        return None
    if target.kind == "file":
        return OtlpJsonMetricExporter(writer_for(target, "metrics", role), preference)
    # Our own encoder and senders, not the SDK's OTLP metric exporters: see
    # otel_spans.export.otlp_metrics.
    return make_otlp_metric_exporter(target, preference)
