"""The scheduler's OTLP metric exporter: the SDK's reader in, our encoder and senders out.

The SDK's ``PeriodicExportingMetricReader`` still collects and aggregates (views,
temporality preference, the task histogram's injected points); each export is then
encoded by :mod:`otel_spans.export.metrics_wire` and sent by the same gRPC or
HTTP/protobuf sender as the scheduler's spans and logs
(:func:`otel_spans.export.senders.make_otlp_sender`): one implementation of endpoint,
headers, TLS, compression, timeout, retries and partial success for every signal, and
none of the SDK's OTLP exporter machinery imported into the scheduler process.
"""

from __future__ import annotations

import logging
import time

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

from otel_spans.export.metrics_wire import MetricsEncoder, request_of
from otel_spans.export.otlp_retry import OtlpSender
from otel_spans.export.outcome import MAX_REQUEST_BYTES, deliver
from otel_spans.export.senders import make_otlp_sender
from otel_spans.settings import ExportTarget

logger = logging.getLogger("otel_spans")


class OtlpMetricExporter(MetricExporter):
    """Metrics to an OTLP collector; counted by the caller's wrapper
    (:class:`otel_spans.export.sdk.CountingMetricExporter`).

    A collector's partial success is a success of the export (the points it kept are
    kept); the points it rejected are summed in :attr:`rejected_points` and its message
    logged by the sender, rate-limited. A request over
    :data:`~otel_spans.export.outcome.MAX_REQUEST_BYTES`, or refused for its size, is
    sent in parts (:func:`~otel_spans.export.outcome.deliver`).
    """

    def __init__(
        self, sender: OtlpSender, preferred_temporality: dict[type, AggregationTemporality]
    ):
        super().__init__(preferred_temporality=preferred_temporality)
        self.sender = sender
        self._encoder = MetricsEncoder()
        self.rejected_points = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        deadline = time.monotonic() + timeout_millis / 1000
        request = self._encoder.request(metrics_data)
        if not request:  # nothing collected: no request, no connection
            return MetricExportResult.SUCCESS
        if len(request) <= MAX_REQUEST_BYTES:
            sent = self.sender.send(request, timeout=timeout_millis / 1000)
            if not sent.too_large:
                self.rejected_points += sent.rejected
                return MetricExportResult.SUCCESS if sent.ok else MetricExportResult.FAILURE
        # Too large for one request (gRPC's default limit is 4 MiB): metric by metric,
        # in halves, as the spans and logs are; a metric too large alone is dropped.
        delivery = deliver(
            self._encoder.pieces(metrics_data),
            request_of,
            lambda body: self.sender.send(body, timeout=max(deadline - time.monotonic(), 0.0)),
        )
        self.rejected_points += delivery.rejected
        if delivery.too_large:
            logger.warning(
                "otel-spans: %d metrics were too large to send, even alone", delivery.too_large
            )
        if delivery.failed or delivery.too_large:
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True  # every export is sent before export() returns

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.sender.shutdown()


def make_otlp_metric_exporter(
    target: ExportTarget, preference: dict[type, AggregationTemporality]
) -> OtlpMetricExporter:
    """The exporter of metrics to the collector ``target`` names."""
    return OtlpMetricExporter(make_otlp_sender(target, signal="metrics"), preference)
