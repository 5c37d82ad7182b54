"""The OTel ``console`` exporter: every record also printed to standard output.

``OTEL_TRACES_EXPORTER=otlp,console`` (or ``console`` alone) is how OTel users ask to see
what a process exports; the specification lists ``console`` for traces, metrics and
logs. Every signal is printed as one OTLP/JSON line per request, with the encoder of the
files (:func:`otel_spans.export.files.to_otlp_json`: hex ids, integer enums), so what
``otel-spans report``, the collector and any OTLP/JSON reader take: the scheduler's
traces and logs are already encoded requests; workers' spans and the metrics, which go
through the SDK, are encoded by the SDK's OTLP encoder first. (The SDK's own console
exporters print a JSON of their own making, which no OTLP tool reads.) Writing to
stdout happens on the exporter threads, never on Dask's event loop. The SDK's encoders
and the generated protobuf classes are imported only once something is printed: a
process that prints nothing keeps none of their thousands of objects.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_spans.export.files import request_type, to_otlp_json
from otel_spans.export.outcome import ACCEPTED, Sent

if TYPE_CHECKING:
    from google.protobuf.message import Message


#: One lock for every console writer of the process: lines of two signals never interleave.
_PRINTING = threading.Lock()


def print_line(message: Message, out: TextIO | None = None) -> None:
    """Print one OTLP request as one OTLP/JSON line (to ``sys.stdout`` by default)."""
    line = to_otlp_json(message)
    stream = out or sys.stdout  # read at print time: tests and daemons swap it
    with _PRINTING:
        stream.write(line + "\n")
        stream.flush()


class ConsoleSender:
    """Prints each encoded ``signal`` request as one OTLP/JSON line."""

    def __init__(self, signal: str, out: TextIO | None = None):
        self._request_type = request_type(signal)
        self._out = out

    def send(self, request: bytes) -> Sent:
        print_line(self._request_type.FromString(request), self._out)
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


class ConsoleSpanExporter(SpanExporter):
    """The SDK's spans (workers' task code) printed as OTLP/JSON lines."""

    def __init__(self, out: TextIO | None = None):
        self._out = out

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        print_line(encode_spans(spans), self._out)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class ConsoleMetricExporter(MetricExporter):
    """The SDK's metrics printed as OTLP/JSON lines, with the given temporalities."""

    def __init__(
        self,
        preferred_temporality: dict[type, AggregationTemporality] | None = None,
        out: TextIO | None = None,
    ):
        super().__init__(preferred_temporality=preferred_temporality)
        self._out = out

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

        print_line(encode_metrics(metrics_data), self._out)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


class TeeSpanExporter(SpanExporter):
    """An SDK span exporter and the console one; the first one's result counts."""

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
