"""Resources, exporters and the bounded hand-off between the event loop and the network.

This is the only module that builds exporters: the SDK's for metrics, logs and the
workers' spans, and :mod:`otel_spans.otlp_transport` senders for the scheduler's
pre-encoded spans. The scheduler's event loop calls :meth:`ExportPipeline.submit`,
which never blocks and never raises: when the queue is full the record is dropped and
counted. A daemon thread drains the queue in batches and does the encoding and the
network I/O, so a collector that is slow, down or hanging costs the scheduler nothing
but the records it cannot take.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
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
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_spans import semconv
from otel_spans.config import ExportTarget, Settings, Temporality
from otel_spans.jsonfile import JsonLinesWriter

if TYPE_CHECKING:
    import grpc
    from google.protobuf.message import Message

logger = logging.getLogger("otel_spans")

R = TypeVar("R")

#: How long the exporter thread waits for a batch to fill before sending what it has.
_BATCH_WAIT = 0.2
#: At most one "records dropped" warning per this many seconds.
_WARN_EVERY = 30.0


@dataclass(frozen=True)
class PipelineStats:
    """Counters of one pipeline; ``lost`` is everything that never reached the backend."""

    signal: str
    submitted: int
    exported: int
    #: Refused at submit because the queue was full.
    dropped: int
    #: Handed to the exporter, which gave up (collector down, timeout, refused).
    failed: int
    #: Still queued, or being sent, when shutdown's deadline passed.
    unsent: int
    queued: int
    #: In the batch the exporter thread is sending right now.
    sending: int

    @property
    def lost(self) -> int:
        return self.dropped + self.failed + self.unsent

    def as_dict(self) -> dict[str, int | str]:
        return {**asdict(self), "lost": self.lost}


class ExportPipeline(Generic[R]):
    """A bounded queue of records and the thread that sends them in batches.

    ``send`` turns a batch of records into signals and exports them; it runs only on
    the pipeline's own thread and returns whether the backend accepted the batch.
    ``stop`` aborts what ``send`` is doing (e.g. the exporter's retry back-off) and is
    called once at close.

    There is one producer, the scheduler's event loop, and :meth:`submit` takes no
    lock: a ``deque`` append is atomic, the producer alone writes the submit-side
    counters and the exporter thread alone writes the send-side ones. The loop can
    therefore never wait for the exporter thread, whatever that thread is doing.
    """

    def __init__(
        self,
        signal: str,
        send: Callable[[list[R]], bool],
        stop: Callable[[], object],
        *,
        queue_size: int,
        batch_size: int,
    ):
        self.signal = signal
        self._send = send
        self._stop = stop
        self._queue_size = queue_size
        self._batch_size = batch_size
        self._items: deque[R] = deque()
        #: Set by the producer when a full batch waits; the thread also wakes on a timer.
        self._wake = threading.Event()
        #: Orders the exporter thread against close(); never taken by the producer.
        self._lock = threading.Lock()
        self._closing = False
        self._abandoned = False
        self._submitted = self._dropped = 0  # written by the producer only
        self._exported = self._failed = self._sending = 0  # by the exporter thread only
        self._unsent = 0  # by close() only
        self._last_warning = 0.0
        self._thread = threading.Thread(
            target=self._run, name=f"otel-spans-{signal}-exporter", daemon=True
        )
        self._thread.start()

    # -- event loop side: O(1), lock-free, never raises -----------------------------------
    def submit(self, record: R) -> bool:
        """Queue one record; False (and counted) when the queue is full or closed."""
        self._submitted += 1
        items = self._items
        if self._closing or len(items) >= self._queue_size:
            self._dropped += 1
            self._warn_dropped()
            return False
        items.append(record)
        if len(items) >= self._batch_size and not self._wake.is_set():
            self._wake.set()
        return True

    def _warn_dropped(self) -> None:
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY:
            self._last_warning = now
            logger.warning(
                "otel-spans: %s queue full (%d); %d records dropped so far",
                self.signal,
                self._queue_size,
                self._dropped,
            )

    def stats(self) -> PipelineStats:
        """A reading of the counters (each exact; taken without stopping the others)."""
        return PipelineStats(
            signal=self.signal,
            submitted=self._submitted,
            exported=self._exported,
            dropped=self._dropped,
            failed=self._failed,
            unsent=self._unsent,
            queued=len(self._items),
            sending=self._sending,
        )

    # -- exporter thread ------------------------------------------------------------------
    def _take(self) -> list[R]:
        if len(self._items) < self._batch_size and not self._closing:
            self._wake.wait(_BATCH_WAIT)
        self._wake.clear()
        batch: list[R] = []
        with self._lock:
            if self._abandoned:
                return batch
            while self._items and len(batch) < self._batch_size:
                batch.append(self._items.popleft())
            self._sending = len(batch)
        return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                if self._closing:
                    return
                continue
            try:
                ok = self._send(batch)
            except Exception:
                logger.exception("otel-spans: exporting %d %s failed", len(batch), self.signal)
                ok = False
            with self._lock:
                if self._abandoned:
                    return  # close() already counted this batch as unsent
                self._sending = 0
                if ok:
                    self._exported += len(batch)
                else:
                    self._failed += len(batch)

    # -- shutdown -----------------------------------------------------------------------
    def close(self, timeout: float) -> PipelineStats:
        """Flush for at most ``timeout`` seconds, then give up; blocking, call off the loop."""
        deadline = time.monotonic() + timeout
        self._closing = True
        self._wake.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            # A batch still being sent when the deadline passed is abandoned with the
            # thread (a daemon): count it as unsent now, so no record goes uncounted.
            self._unsent += len(self._items) + self._sending
            self._sending = 0
            self._abandoned = True
            self._items.clear()
        # Abort retries still in flight; the exporter's own shutdown can block, so it
        # gets a thread and the rest of the budget, never more.
        stopper = threading.Thread(target=self._stop, daemon=True)
        stopper.start()
        stopper.join(max(0.05, deadline - time.monotonic()))
        stats = self.stats()
        if stats.lost:
            logger.warning(
                "otel-spans: %s: %d records never reached the backend "
                "(%d dropped on a full queue, %d failed to export, %d unsent at shutdown)",
                self.signal,
                stats.lost,
                stats.dropped,
                stats.failed,
                stats.unsent,
            )
        return stats


# -- resource ---------------------------------------------------------------------------
def build_resource(settings: Settings, *, instance_id: str, scheduler_address: str) -> Resource:
    """The resource of every signal this process exports.

    ``Resource.create`` merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; explicit
    otel-spans settings win over both, and ``dask`` replaces the SDK's
    ``unknown_service`` placeholder.
    """
    from importlib.metadata import version

    attributes: dict[str, str] = dict(settings.resource_attributes)
    attributes[semconv.SERVICE_INSTANCE_ID] = instance_id
    attributes[semconv.DASK_SCHEDULER_ADDRESS] = scheduler_address
    attributes[semconv.DASK_VERSION] = version("distributed")
    if settings.cluster_name:
        attributes[semconv.DASK_CLUSTER_NAME] = settings.cluster_name
    if settings.service_name:
        attributes[semconv.SERVICE_NAME] = settings.service_name
    resource = Resource.create(attributes)
    if str(resource.attributes.get(semconv.SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({semconv.SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME}))
    return resource


# -- exporters ----------------------------------------------------------------------------
class OtlpJsonSpanExporter(SpanExporter):
    """Spans as OTLP/JSON lines in a local directory (the embedded default)."""

    def __init__(self, writer: JsonLinesWriter):
        self.writer = writer

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self.writer.write(encode_spans(spans))
        except OSError:
            logger.exception("otel-spans: cannot write %s", self.writer.path)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class _NoSpanExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _grpc_credentials(target: ExportTarget) -> grpc.ChannelCredentials | None:
    """TLS credentials from the configured files; None lets the scheme decide."""
    import grpc

    if not (target.certificate or target.client_certificate):
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(target.certificate),
        private_key=_read(target.client_key),
        certificate_chain=_read(target.client_certificate),
    )


def _http_session(target: ExportTarget) -> Any:
    """A ``requests`` session that verifies against the configured CA, or None.

    ``requests`` lets ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` replace the CA a session
    was given (they win over ``Session.verify``), so a configured ``certificate`` would
    be silently ignored wherever those are set, as on many CI images and corporate
    machines. This session keeps the configured CA and still honours proxy variables.
    """
    if target.certificate is None:
        return None
    import requests

    class PinnedCaSession(requests.Session):
        def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            merged: dict[str, Any] = super().merge_environment_settings(*args, **kwargs)
            merged["verify"] = self.verify
            return merged

    return PinnedCaSession()


def _otlp_options(target: ExportTarget) -> dict[str, Any]:
    """The constructor arguments every OTLP exporter of ``target``'s protocol takes.

    Every option is passed explicitly, so the SDK's own reading of ``OTEL_*`` never
    disagrees with the settings resolved in :mod:`otel_spans.config`.
    """
    if target.protocol == "grpc":
        import grpc

        return {
            "endpoint": target.endpoint,
            "insecure": target.insecure,
            "credentials": _grpc_credentials(target),
            "headers": dict(target.headers),
            "timeout": target.timeout,
            "compression": grpc.Compression.Gzip if target.compression else None,
        }
    from opentelemetry.exporter.otlp.proto.http import Compression

    return {
        "endpoint": target.endpoint,
        "certificate_file": target.certificate,
        "client_certificate_file": target.client_certificate,
        "client_key_file": target.client_key,
        "headers": dict(target.headers),
        "timeout": target.timeout,
        "compression": Compression.Gzip if target.compression else Compression.NoCompression,
        "session": _http_session(target),
    }


def make_span_exporter(target: ExportTarget, *, role: str) -> SpanExporter:
    """The SDK span exporter for ``target``, every option passed explicitly."""
    if target.kind == "none":
        return _NoSpanExporter()
    if target.kind == "file":
        return OtlpJsonSpanExporter(JsonLinesWriter(target.directory, "traces", role))
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(**_otlp_options(target))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(**_otlp_options(target))


class RequestSender(Protocol):
    """Sends one serialized export request (see :mod:`otlp_transport`)."""

    def send(self, request: bytes) -> bool: ...

    def shutdown(self) -> None: ...


def _request_type(signal: str) -> type[Message]:
    if signal == "logs":
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )

        return ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return ExportTraceServiceRequest


class FileSender:
    """Requests as OTLP/JSON lines in a local directory (the embedded default)."""

    def __init__(self, writer: JsonLinesWriter, signal: str):
        self.writer = writer
        self._request_type = _request_type(signal)

    def send(self, request: bytes) -> bool:
        try:
            self.writer.write(self._request_type.FromString(request))
        except OSError:
            logger.exception("otel-spans: cannot write %s", self.writer.path)
            return False
        return True

    def shutdown(self) -> None:
        pass


class _NoSender:
    def send(self, request: bytes) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def make_request_sender(target: ExportTarget, *, signal: str, role: str) -> RequestSender:
    """Where the scheduler's pre-encoded ``signal`` requests (``traces``, ``logs``) go.

    Workers' spans go through the SDK's exporters (:func:`make_span_exporter`).
    """
    from otel_spans import otlp_transport

    if target.kind == "none":
        return _NoSender()
    if target.kind == "file":
        return FileSender(JsonLinesWriter(target.directory, signal, role), signal)
    if target.protocol == "grpc":
        return otlp_transport.GrpcSender(target, signal, _grpc_credentials(target))
    return otlp_transport.HttpSender(target, signal, _http_session(target))


# -- metric exporters ------------------------------------------------------------------------
_CUMULATIVE = AggregationTemporality.CUMULATIVE
#: Adds data points aggregated outside the SDK to a batch: (data, temporality, reader id).
Inject = Callable[[MetricsData, AggregationTemporality, int], MetricsData]
_DELTA = AggregationTemporality.DELTA


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


class OtlpJsonMetricExporter(MetricExporter):
    """Metrics as OTLP/JSON lines in a local directory (the embedded default)."""

    def __init__(self, writer: JsonLinesWriter, temporality: Temporality):
        super().__init__(preferred_temporality=temporality_preference(temporality))
        self.writer = writer

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        try:
            self.writer.write(encode_metrics(metrics_data))
        except OSError:
            logger.exception("otel-spans: cannot write %s", self.writer.path)
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        pass


class CountingMetricExporter(MetricExporter):
    """Counts the outcome of every export of the exporter it wraps.

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
        self.exported = 0
        self.failed = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        try:
            if self.inject is not None:
                temporality = (self._preferred_temporality or {}).get(Histogram, _CUMULATIVE)
                metrics_data = self.inject(metrics_data, temporality, id(self))
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        except Exception:
            logger.exception("otel-spans: metrics export failed")
            result = MetricExportResult.FAILURE
        if result == MetricExportResult.SUCCESS:
            self.exported += 1
        else:
            self.failed += 1
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)


def make_metric_exporter(
    target: ExportTarget, temporality: Temporality, *, role: str
) -> MetricExporter | None:
    """The SDK metric exporter for ``target``; None when metrics are not pushed."""
    if target.kind == "none":
        return None
    if target.kind == "file":
        return OtlpJsonMetricExporter(
            JsonLinesWriter(target.directory, "metrics", role), temporality
        )
    preference = temporality_preference(temporality)
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(**_otlp_options(target), preferred_temporality=preference)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(**_otlp_options(target), preferred_temporality=preference)


class PrometheusEndpoint:
    """The scheduler's own ``/metrics`` page, in Prometheus text format.

    It serves an SDK ``PrometheusMetricReader`` registered in a private registry, so
    it exposes exactly the metrics otel-spans pushes over OTLP and nothing of the
    process's global registry.
    """

    def __init__(self, host: str, port: int, inject: Inject | None = None):
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server

        class Reader(PrometheusMetricReader):
            def _receive_metrics(
                self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
            ) -> None:
                if metrics_data is not None and inject is not None:
                    metrics_data = inject(metrics_data, _CUMULATIVE, id(self))
                super()._receive_metrics(metrics_data, timeout_millis, **kwargs)

        self.registry = CollectorRegistry(auto_describe=True)
        self.reader = Reader(registry=self.registry)
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.host = host
        self.port: int = self._server.server_address[1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
