"""The scheduler's own Prometheus ``/metrics`` page."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricsData

from otel_spans.export.sdk import Inject

_CUMULATIVE = AggregationTemporality.CUMULATIVE


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
