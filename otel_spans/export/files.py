"""OTLP/JSON lines files: the embedded default when no collector is configured.

Each line is one ``Export<Signal>ServiceRequest`` in the OTLP/JSON encoding, the same
format the OpenTelemetry Collector's ``file`` exporter writes, so ``otel-spans report``
and any OTLP tool read both alike. OTLP/JSON differs from protobuf's default JSON
mapping in one way that matters: trace and span ids are lowercase hex, not base64.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_spans.export.outcome import ACCEPTED, REFUSED, Sent

logger = logging.getLogger("otel_spans")

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
    as_dict = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hex_ids(as_dict), separators=(",", ":"), ensure_ascii=False)


class JsonLinesWriter:
    """Appends OTLP/JSON lines to ``<directory>/<signal>-<role>-<pid>.jsonl``.

    One file per process and signal, so that a scheduler and its workers on one host
    never interleave half-written lines in a shared file.
    """

    def __init__(self, directory: Path, signal: str, role: str):
        self.path = directory.resolve() / f"{signal}-{role}-{os.getpid()}.jsonl"
        self._lock = threading.Lock()

    def write(self, message: Message) -> None:
        line = to_otlp_json(message) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)


class OtlpJsonSpanExporter(SpanExporter):
    """Worker spans as OTLP/JSON lines in a local directory (the embedded default)."""

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


class OtlpJsonMetricExporter(MetricExporter):
    """Metrics as OTLP/JSON lines in a local directory (the embedded default)."""

    def __init__(
        self, writer: JsonLinesWriter, preferred_temporality: dict[type, AggregationTemporality]
    ):
        super().__init__(preferred_temporality=preferred_temporality)
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
    """The scheduler's encoded requests as OTLP/JSON lines (the embedded default)."""

    def __init__(self, writer: JsonLinesWriter, signal: str):
        self.writer = writer
        self._request_type = _request_type(signal)

    def send(self, request: bytes) -> Sent:
        try:
            self.writer.write(self._request_type.FromString(request))
        except OSError:
            logger.exception("otel-spans: cannot write %s", self.writer.path)
            return REFUSED
        return ACCEPTED

    def shutdown(self) -> None:
        pass
