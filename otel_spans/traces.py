"""Span records become OpenTelemetry spans.

The spans describe work that already happened, with ids fixed by :mod:`otel_spans.ids`,
so they are built as finished ``ReadableSpan`` objects and handed straight to an
exporter instead of being started and ended through a ``Tracer`` (whose id generator
would pick random ids). Attribute limits are applied here, as the SDK would.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from otel_spans import semconv
from otel_spans.records import SpanRecord

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SCOPE = InstrumentationScope(semconv.SCOPE_NAME)


def context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)


def _attributes(values: Mapping[str, AttributeValue], max_length: int) -> BoundedAttributes:
    return BoundedAttributes(
        maxlen=None, attributes=values, immutable=True, max_value_len=max_length
    )


def span_attributes(record: SpanRecord, code_max_length: int) -> dict[str, AttributeValue]:
    """The attributes of a Dask span (see docs/telemetry.md)."""
    attrs: dict[str, AttributeValue] = {
        semconv.DASK_SPAN_ID: record.uuid,
        semconv.DASK_SPAN_NAME: list(record.tags),
        semconv.DASK_SPAN_DONE: record.done,
        semconv.DASK_SPAN_TASKS: record.tasks,
        semconv.DASK_SPAN_TASK_GROUPS: record.task_groups,
        semconv.DASK_SPAN_NBYTES: record.nbytes,
        semconv.DASK_SPAN_TASK_DURATION: record.task_duration,
        semconv.DASK_SPAN_ACTIVE_CPU_SECONDS: record.active_cpu_seconds,
        semconv.DASK_SPAN_ENQUEUED: record.enqueued_ns,
    }
    for state, count in record.states:
        attrs[semconv.DASK_SPAN_TASKS_PREFIX + state] = count
    if record.compute_start_ns:
        attrs[semconv.DASK_SPAN_COMPUTE_START] = record.compute_start_ns
    if record.continuation:
        attrs[semconv.DASK_SPAN_CONTINUATION] = record.continuation
    if record.code and code_max_length:
        first = record.code[0]
        attrs[semconv.DASK_SPAN_CODE] = first.code[:code_max_length]
        attrs[semconv.DASK_SPAN_CODE_COUNT] = len(record.code)
        attrs[semconv.CODE_FILE_PATH] = first.filename
        attrs[semconv.CODE_LINE_NUMBER] = first.lineno
    return attrs


def dask_span(
    record: SpanRecord, resource: Resource, *, max_length: int, code_max_length: int
) -> ReadableSpan:
    """The OTel span of one export of a Dask span."""
    parent = context(record.trace_id, record.parent_span_id) if record.parent_span_id else None
    links: list[Link] = []
    if record.previous_span_id:
        links.append(
            Link(
                context(record.trace_id, record.previous_span_id),
                {semconv.DASK_SPAN_CONTINUATION: record.continuation - 1},
            )
        )
    status = Status(StatusCode.UNSET)
    if record.erred:
        status = Status(StatusCode.ERROR, f"{record.erred} of {record.tasks} tasks erred")
    name = record.tags[-1] if record.tags else "(unnamed)"
    return ReadableSpan(
        name=name[:max_length] or "(empty)",
        context=context(record.trace_id, record.span_id),
        parent=parent,
        resource=resource,
        attributes=_attributes(span_attributes(record, code_max_length), max_length),
        links=links,
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=record.start_ns,
        end_time=max(record.end_ns, record.start_ns),
        instrumentation_scope=_SCOPE,
    )
