"""Log entries become OpenTelemetry log records.

Dask's structured events carry whatever the code that logged them put in: dicts of
anything, user objects, huge strings. :func:`safe_body` turns any of it into an OTel
``AnyValue`` within fixed bounds (depth, items, string length) and never raises, so a
strange event costs a truncated log record, never an exporter failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_spans import semconv
from otel_spans.records import LogEntry

_SCOPE = InstrumentationScope(semconv.SCOPE_NAME)
_MAX_DEPTH = 4
_MAX_ITEMS = 100


def _text(value: object, max_length: int) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception as e:  # a user object whose repr raises
        text = f"<unrepresentable {type(value).__name__}: {type(e).__name__}>"
    return text[:max_length]


def safe_body(value: object, max_length: int, depth: int = 0) -> Any:
    """A bounded OTel AnyValue for any Python object."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str | bytes):
        return value[:max_length]
    if depth >= _MAX_DEPTH:
        return _text(value, max_length)
    try:
        if isinstance(value, Mapping):
            items = list(value.items())[:_MAX_ITEMS]
            return {_text(k, max_length): safe_body(v, max_length, depth + 1) for k, v in items}
        if isinstance(value, list | tuple | set | frozenset):
            return [safe_body(v, max_length, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    except Exception:
        pass
    return _text(value, max_length)


def log_record(entry: LogEntry, resource: Resource, *, max_length: int) -> ReadableLogRecord:
    context = None
    if entry.trace_id and entry.span_id:
        span_context = SpanContext(
            entry.trace_id,
            entry.span_id,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        context = trace.set_span_in_context(NonRecordingSpan(span_context))
    record = LogRecord(
        timestamp=entry.time_ns,
        observed_timestamp=entry.time_ns,
        context=context,
        severity_text=entry.severity_text,
        severity_number=SeverityNumber(entry.severity_number),
        body=safe_body(entry.body, max_length),
        attributes={k: safe_body(v, max_length) for k, v in entry.attributes},
        event_name=entry.event_name,
    )
    return ReadableLogRecord(record, resource=resource, instrumentation_scope=_SCOPE)
