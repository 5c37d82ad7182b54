"""Span kinds: the root a remote caller handed over is a CONSUMER, everything else
INTERNAL (why CONSUMER, not SERVER: docs/trace-context.md)."""

from __future__ import annotations

from dataclasses import replace

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_spans import semconv
from otel_spans.export import wire
from otel_spans.records import SpanRecord
from otel_spans.settings import RecordLimits
from otel_spans.telemetry.traces import dask_span

ROOT = SpanRecord(
    uuid="u",
    tags=("nightly",),
    trace_id=1,
    span_id=2,
    parent_span_id=3,
    continuation=0,
    previous_span_id=0,
    start_ns=1,
    end_ns=2,
    enqueued_ns=1,
    compute_start_ns=0,
    done=True,
    states=(),
    tasks=0,
    task_groups=0,
    nbytes=0,
    task_duration=0.0,
    active_cpu_seconds=0.0,
    parent_remote=True,
)


def kind_of(record: SpanRecord) -> int:
    encoded = dask_span(record, limits=RecordLimits())
    request = ExportTraceServiceRequest.FromString(
        wire.RequestEncoder({}, semconv.SCOPE_NAME).request([encoded])
    )
    kind: int = request.resource_spans[0].scope_spans[0].spans[0].kind
    return kind


def test_a_root_handed_over_by_a_remote_caller_is_a_consumer() -> None:
    assert kind_of(replace(ROOT, consumer=True)) == Span.SPAN_KIND_CONSUMER


def test_every_other_dask_span_is_internal() -> None:
    assert kind_of(ROOT) == Span.SPAN_KIND_INTERNAL
