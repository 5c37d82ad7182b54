"""The ``console`` exporter prints OTLP/JSON: hex ids, integer enums, nothing else.

Each printed line must be what an OTLP/JSON reader takes, so each is parsed with
protobuf's JSON parser in strict mode (unknown fields refused) into the request type
of its signal, and the fields where OTLP/JSON departs from protobuf's default mapping
(ids as hex, enums as integers) are checked in the raw text.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from otel_spans.export import log_wire, wire
from otel_spans.export.console import ConsoleMetricExporter, ConsoleSender, ConsoleSpanExporter
from otel_spans.settings import RecordLimits

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0x00F067AA0BA902B7
PARENT_ID = 0x1122334455667788
HEX = re.compile(r"[0-9a-f]+")


def strictly_parsed(line: str, request_type: type[Any]) -> Any:
    """``line`` parsed as ``request_type`` by protobuf's parser, unknown fields refused."""
    return json_format.Parse(line, request_type(), ignore_unknown_fields=False)


def only_line(out: io.StringIO) -> str:
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_schedulers_spans_print_as_otlp_json() -> None:
    limits = RecordLimits()
    span = wire.span(
        name="load",
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
        parent_span_id=PARENT_ID,
        start_ns=1,
        end_ns=2,
        attributes={"dask.span.name": "load"},
        limits=limits,
        status_code=wire.STATUS_ERROR,
        status_message="1 of 2 tasks erred",
    )
    request = wire.RequestEncoder({"service.name": "dask"}, "otel_spans").request([span])
    out = io.StringIO()
    ConsoleSender("traces", out).send(request)
    line = only_line(out)
    strictly_parsed(line, ExportTraceServiceRequest)
    printed = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert printed["traceId"] == f"{TRACE_ID:032x}"
    assert printed["spanId"] == f"{SPAN_ID:016x}"
    assert printed["parentSpanId"] == f"{PARENT_ID:016x}"
    assert printed["kind"] == wire.KIND_INTERNAL  # an integer, not "SPAN_KIND_INTERNAL"
    assert printed["status"]["code"] == wire.STATUS_ERROR


def test_the_schedulers_logs_print_as_otlp_json() -> None:
    record = log_wire.log_record(
        time_ns=5,
        severity_number=17,
        severity_text="ERROR",
        body="Task x erred",
        attributes={},
        limits=RecordLimits(),
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
        event_name="dask.task.erred",
    )
    request = wire.RequestEncoder({"service.name": "dask"}, "otel_spans").request([record])
    out = io.StringIO()
    ConsoleSender("logs", out).send(request)
    line = only_line(out)
    strictly_parsed(line, ExportLogsServiceRequest)
    printed = json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert (printed["traceId"], printed["spanId"]) == (f"{TRACE_ID:032x}", f"{SPAN_ID:016x}")
    assert printed["severityNumber"] == 17


def test_sdk_spans_print_as_otlp_json() -> None:
    out = io.StringIO()
    exporter = ConsoleSpanExporter(out)
    provider = TracerProvider()
    with provider.get_tracer("task code").start_as_current_span("work", kind=SpanKind.CLIENT) as s:
        context = s.get_span_context()
    exporter.export([s])  # type: ignore[list-item]
    line = only_line(out)
    strictly_parsed(line, ExportTraceServiceRequest)
    printed = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert printed["traceId"] == f"{context.trace_id:032x}"
    assert printed["spanId"] == f"{context.span_id:016x}"
    assert HEX.fullmatch(printed["spanId"])
    assert printed["kind"] == SpanKind.CLIENT.value + 1  # OTLP numbers kinds from 1


def test_sdk_metrics_print_as_otlp_json() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("otel_spans").create_counter("dask.span.tasks").add(3, {"a": "b"})
    data = reader.get_metrics_data()
    assert data is not None
    out = io.StringIO()
    ConsoleMetricExporter(out=out).export(data)
    line = only_line(out)
    strictly_parsed(line, ExportMetricsServiceRequest)
    metric = json.loads(line)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]
    assert metric["name"] == "dask.span.tasks"
    assert metric["sum"]["aggregationTemporality"] == 2  # cumulative, as an integer
    assert metric["sum"]["dataPoints"][0]["asInt"] == "3"
