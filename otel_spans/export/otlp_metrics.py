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

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

from otel_spans.export.metrics_wire import MetricsEncoder
from otel_spans.export.otlp_retry import OtlpSender
from otel_spans.export.senders import make_otlp_sender
from otel_spans.settings import ExportTarget

logger = logging.getLogger("otel_spans")


class OtlpMetricExporter(MetricExporter):
    """Metrics to an OTLP collector; counted by the caller's wrapper
    (:class:`otel_spans.export.sdk.CountingMetricExporter`).

    A collector's partial success is a success of the export (the points it kept are
    kept); the points it rejected are summed in :attr:`rejected_points` and its message
    logged by the sender, rate-limited.
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
        request = self._encoder.request(metrics_data)
        if not request:  # nothing collected: no request, no connection
            return MetricExportResult.SUCCESS
        sent = self.sender.send(request, timeout=timeout_millis / 1000)
        self.rejected_points += sent.rejected
        if sent.too_large:
            logger.warning(
                "otel-spans: the collector refused a metrics export of %d bytes for its size",
                len(request),
            )
        return MetricExportResult.SUCCESS if sent.ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True  # every export is sent before export() returns

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.sender.shutdown()


def make_otlp_metric_exporter(
    target: ExportTarget, preference: dict[type, AggregationTemporality]
) -> OtlpMetricExporter:
    """The exporter of metrics to the collector ``target`` names."""
    return OtlpMetricExporter(make_otlp_sender(target, signal="metrics"), preference)
