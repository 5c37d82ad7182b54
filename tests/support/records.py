"""Plain records for the encoder's tests: a Dask span's and a task group's with every
required field at a neutral value (a test names only what it is about), and the span
an encoded record decodes to."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_spans import semconv
from otel_spans.export import wire
from otel_spans.records import SpanRecord
from otel_spans.task_records import GroupRecord


def span_record(**fields: Any) -> SpanRecord:
    """A Dask span's record: an unfinished root ``wf`` without tasks, but for ``fields``."""
    values: dict[str, Any] = {
        "uuid": "u",
        "tags": ("wf",),
        "trace_id": 1,
        "span_id": 2,
        "parent_span_id": 0,
        "continuation": 0,
        "previous_span_id": 0,
        "start_ns": 1,
        "end_ns": 2,
        "enqueued_ns": 1,
        "compute_start_ns": 0,
        "done": False,
        "states": (),
        "tasks": 0,
        "task_groups": 0,
        "nbytes": 0,
        "task_duration": 0.0,
        "active_cpu_seconds": 0.0,
    }
    values.update(fields)
    return SpanRecord(**values)


def group_record(**fields: Any) -> GroupRecord:
    """A task group's record: group ``g`` of one task computed, under span 2, but for
    ``fields``."""
    values: dict[str, Any] = {
        "name": "g",
        "prefix": "g",
        "trace_id": 1,
        "span_id": 3,
        "parent_span_id": 2,
        "start_ns": 1,
        "end_ns": 2,
        "tasks": 1,
        "memory": 1,
        "erred": 0,
        "nbytes": 0,
        "durations": (),
        "workers": 1,
        "task_spans_kept": 0,
        "task_spans_dropped": 0,
    }
    values.update(fields)
    return GroupRecord(**values)


def decoded_span(encoded: bytes) -> Any:
    """The one span of an encoded span record, as a collector receives it."""
    request = ExportTraceServiceRequest.FromString(
        wire.RequestEncoder({}, semconv.SCOPE_NAME).request([encoded])
    )
    return request.resource_spans[0].scope_spans[0].spans[0]
