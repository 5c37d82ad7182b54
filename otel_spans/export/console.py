"""The OTel ``console`` exporter: every record also printed to standard output.

``OTEL_TRACES_EXPORTER=otlp,console`` (or ``console`` alone) is how OTel users ask to see
what a process exports; the specification lists ``console`` for traces, metrics and
logs. The scheduler's traces and logs are already encoded requests, so they are printed
as one OTLP/JSON line per request (the format ``otel-spans report`` and the file
exporter read); workers' spans and the metrics go through the SDK, so the SDK's console
exporters print them. Writing to stdout happens on the exporter threads, never on
Dask's event loop.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_spans.export.outcome import ACCEPTED, Sent

_REQUESTS: dict[str, type[Message]] = {
    "traces": ExportTraceServiceRequest,
    "logs": ExportLogsServiceRequest,
}


class ConsoleSender:
    """Prints each encoded ``signal`` request as one OTLP/JSON line."""

    def __init__(self, signal: str, out: TextIO | None = None):
        self._request_type = _REQUESTS[signal]
        self._out = out
        self._lock = threading.Lock()

    def send(self, request: bytes) -> Sent:
        message = self._request_type.FromString(request)
        line = json_format.MessageToJson(message, indent=None)
        out = self._out or sys.stdout  # read at send time: tests and daemons swap it
        with self._lock:
            out.write(line + "\n")
            out.flush()
        return ACCEPTED

    def shutdown(self) -> None:
        pass


class TeeSender:
    """Sends to ``primary`` and prints to the console; the primary's outcome counts."""

    def __init__(self, primary: Any, console: ConsoleSender):
        self._primary = primary
        self._console = console

    def send(self, request: bytes) -> Sent:
        self._console.send(request)
        sent: Sent = self._primary.send(request)
        return sent

    def shutdown(self) -> None:
        self._primary.shutdown()


class TeeSpanExporter(SpanExporter):
    """An SDK span exporter and the SDK's console exporter; the first one's result counts."""

    def __init__(self, primary: SpanExporter, console: SpanExporter):
        self._primary = primary
        self._console = console

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._console.export(spans)
        return self._primary.export(spans)

    def shutdown(self) -> None:
        self._primary.shutdown()
        self._console.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._primary.force_flush(timeout_millis) and self._console.force_flush(
            timeout_millis
        )


class TeeMetricExporter(MetricExporter):
    """An SDK metric exporter and a console one, with the same temporality preference."""

    def __init__(
        self,
        primary: MetricExporter,
        console: MetricExporter,
        preference: dict[type, AggregationTemporality],
    ):
        super().__init__(preferred_temporality=preference)
        self._primary = primary
        self._console = console

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self._console.export(metrics_data, timeout_millis=timeout_millis)
        return self._primary.export(metrics_data, timeout_millis=timeout_millis)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._primary.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._primary.shutdown(timeout_millis=timeout_millis)
        self._console.shutdown(timeout_millis=timeout_millis)
