"""OTLP/JSON lines files: the embedded default when no collector is configured.

Each line is one ``Export<Signal>ServiceRequest`` in the OTLP/JSON encoding, the same
format the OpenTelemetry Collector's ``file`` exporter writes, so ``otel-spans report``
and any OTLP tool read both alike. OTLP/JSON differs from protobuf's default JSON
mapping in one way that matters: trace and span ids are lowercase hex, not base64.
The SDK's encoders and protobuf's JSON mapping are imported when a file is first
written, not with this module: a scheduler exporting to a collector never needs them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_spans.export.changed import ChangedSeries
from otel_spans.export.disk import DiskBudget, JsonLinesWriter, budget_for
from otel_spans.export.outcome import ACCEPTED, REFUSED, Sent
from otel_spans.settings import ExportTarget

if TYPE_CHECKING:
    from google.protobuf.message import Message

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids(node: Any) -> Any:
    """Re-encode the base64 id fields protobuf's JSON mapping produced as hex."""
    if isinstance(node, dict):
        return {
            key: base64.b64decode(value).hex()
            if key in _ID_KEYS and isinstance(value, str)
            else _hex_ids(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(item) for item in node]
    return node


def to_otlp_json(message: Message) -> str:
    """One OTLP request as one line of OTLP/JSON."""
    from google.protobuf.json_format import MessageToDict

    as_dict = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hex_ids(as_dict), separators=(",", ":"), ensure_ascii=False)


def _line(message: Message) -> bytes:
    return (to_otlp_json(message) + "\n").encode("utf-8", "replace")


def budget_of(target: ExportTarget) -> DiskBudget:
    """The shared cap and counters of ``target.directory`` in this process."""
    return budget_for(target.directory, target.directory_max_bytes, target.directory_max_file_bytes)


def writer_for(target: ExportTarget, signal: str, role: str) -> JsonLinesWriter:
    """The writer of ``signal`` under ``target.directory``, with its caps."""
    return JsonLinesWriter(
        target.directory,
        signal,
        role,
        max_bytes=target.directory_max_bytes,
        max_file_bytes=target.directory_max_file_bytes,
    )


class OtlpJsonSpanExporter(SpanExporter):
    """Worker spans as OTLP/JSON lines in a local directory (the embedded default)."""

    def __init__(self, writer: JsonLinesWriter):
        self.writer = writer

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        ok = self.writer.write(_line(encode_spans(spans)), len(spans))
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.writer.close()


class OtlpJsonMetricExporter(MetricExporter):
    """Metrics as OTLP/JSON lines in a local directory (the embedded default).

    Only the series that changed since the last line are written, every series at
    the start of each file (:mod:`otel_spans.export.changed`): a collection where
    nothing changed writes nothing at all.
    """

    def __init__(
        self, writer: JsonLinesWriter, preferred_temporality: dict[type, AggregationTemporality]
    ):
        super().__init__(preferred_temporality=preferred_temporality)
        self.writer = writer
        self._series = ChangedSeries()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

        selection = self._series.select(metrics_data)
        line = _line(encode_metrics(selection.data)) if selection.points else b""
        if self.writer.fresh(len(line)):  # a new file starts with every series
            selection = self._series.select(metrics_data, everything=True)
            line = _line(encode_metrics(selection.data))
        if not selection.points:
            return MetricExportResult.SUCCESS
        if not self.writer.write(line, selection.points):
            return MetricExportResult.FAILURE
        self._series.commit(selection)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.writer.close()


def request_type(signal: str) -> type[Message]:
    """The generated class of ``signal``'s export request (``traces``, ``logs``)."""
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
    """The scheduler's encoded requests as OTLP/JSON lines (the embedded default)."""

    def __init__(self, writer: JsonLinesWriter, signal: str):
        self.writer = writer
        self._request_type = request_type(signal)

    def send(self, request: bytes) -> Sent:
        message = self._request_type.FromString(request)
        return ACCEPTED if self.writer.write(_line(message), _records(message)) else REFUSED

    def shutdown(self) -> None:
        self.writer.close()


def _records(message: Any) -> int:
    """Spans or log records in a trace or logs request."""
    if hasattr(message, "resource_spans"):
        return sum(len(ss.spans) for rs in message.resource_spans for ss in rs.scope_spans)
    return sum(len(sl.log_records) for rl in message.resource_logs for sl in rl.scope_logs)
