"""Span records become OpenTelemetry spans.

The spans describe work that already happened, with ids fixed by :mod:`otel_spans.ids`,
so they are built as finished ``ReadableSpan`` objects and handed straight to an
exporter instead of being started and ended through a ``Tracer`` (whose id generator
would pick random ids). Attribute limits are applied here, as the SDK would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from otel_spans import ids, semconv
from otel_spans.config import SpanLimits
from otel_spans.records import EventRecord, GroupRecord, LinkRecord, SpanRecord, TaskRecord

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SCOPE = InstrumentationScope(semconv.SCOPE_NAME)
T = TypeVar("T")


def _first(items: Sequence[T], limit: int) -> BoundedList:  # type: ignore[type-arg]
    """The first ``limit`` items; the rest dropped and counted (OTLP ``dropped_*_count``).

    The SDK's own bounded list keeps the newest items; for a finished span the first
    ones (the exception before the transition story, the earliest computations) say more.
    """
    bounded: BoundedList = BoundedList(limit)  # type: ignore[type-arg]
    bounded.extend(items[:limit])
    bounded.dropped = max(0, len(items) - limit)
    return bounded


def _erred_status(erred: int, tasks: int) -> Status:
    """ERROR when some tasks of a span or task group erred, with how many; else UNSET."""
    if erred:
        return Status(StatusCode.ERROR, f"{erred} of {tasks} tasks erred")
    return Status(StatusCode.UNSET)


def context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)


def _attributes(values: Mapping[str, AttributeValue], limits: SpanLimits) -> BoundedAttributes:
    return BoundedAttributes(
        maxlen=limits.attribute_count,
        attributes=values,
        immutable=True,
        max_value_len=limits.attribute_length,
    )


def span_attributes(record: SpanRecord) -> dict[str, AttributeValue]:
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
    for key, value in record.extra:
        attrs[key] = list(value) if isinstance(value, tuple) else value
    if record.code:  # already cut and redacted as configured (snapshots.code_snippets)
        first = record.code[0]
        if first.code:
            attrs[semconv.DASK_SPAN_CODE] = first.code
        attrs[semconv.DASK_SPAN_CODE_COUNT] = len(record.code)
        attrs[semconv.CODE_FILE_PATH] = first.filename
        attrs[semconv.CODE_LINE_NUMBER] = first.lineno
    return attrs


def dask_span(record: SpanRecord, resource: Resource, *, limits: SpanLimits) -> ReadableSpan:
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
    links.extend(_links(record.links, limits))
    status = _erred_status(record.erred, record.tasks)
    name = record.tags[-1] if record.tags else "(unnamed)"
    return ReadableSpan(
        name=name[: limits.attribute_length] or "(empty)",
        context=context(record.trace_id, record.span_id),
        parent=parent,
        resource=resource,
        attributes=_attributes(span_attributes(record), limits),
        events=_first(_events(record.events, limits), limits.events),
        links=_first(links, limits.links),
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=record.start_ns,
        end_time=max(record.end_ns, record.start_ns),
        instrumentation_scope=_SCOPE,
    )


def _events(records: tuple[EventRecord, ...], limits: SpanLimits) -> list[Event]:
    return [Event(e.name, _attributes(_values(e.attributes), limits), e.time_ns) for e in records]


def _values(pairs: tuple[tuple[str, object], ...]) -> dict[str, AttributeValue]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in pairs}  # type: ignore[misc]


def _links(records: tuple[LinkRecord, ...], limits: SpanLimits) -> list[Link]:
    return [
        Link(context(link.trace_id, link.span_id), _attributes(_values(link.attributes), limits))
        for link in records
    ]


def group_span(record: GroupRecord, resource: Resource, *, limits: SpanLimits) -> ReadableSpan:
    """The span of a task group: named by its prefix, the full name in an attribute."""
    attrs: dict[str, AttributeValue] = {
        semconv.DASK_TASK_GROUP_NAME: record.name,
        semconv.DASK_TASK_PREFIX: record.prefix,
        semconv.DASK_TASK_GROUP_TASKS: record.tasks,
        semconv.DASK_TASK_GROUP_TASKS_MEMORY: record.memory,
        semconv.DASK_TASK_GROUP_TASKS_ERRED: record.erred,
        semconv.DASK_TASK_GROUP_NBYTES: record.nbytes,
        semconv.DASK_TASK_GROUP_WORKERS: record.workers,
        semconv.DASK_TASK_GROUP_TASK_SPANS_KEPT: record.task_spans_kept,
        semconv.DASK_TASK_GROUP_TASK_SPANS_DROPPED: record.task_spans_dropped,
    }
    for action, seconds in record.durations:
        attrs[semconv.DASK_TASK_GROUP_DURATION_PREFIX + action] = seconds
    status = _erred_status(record.erred, record.tasks)
    return ReadableSpan(
        name=record.prefix[: limits.attribute_length] or "(empty)",
        context=context(record.trace_id, record.span_id),
        parent=context(record.trace_id, record.parent_span_id),
        resource=resource,
        attributes=_attributes(attrs, limits),
        links=_first(_links(record.links, limits), limits.links),
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=record.start_ns,
        end_time=max(record.end_ns, record.start_ns),
        instrumentation_scope=_SCOPE,
    )


def task_spans(record: TaskRecord, resource: Resource, *, limits: SpanLimits) -> list[ReadableSpan]:
    """The span of one sampled task run, and one child span per phase."""
    attrs: dict[str, AttributeValue] = {
        semconv.DASK_TASK_KEY: record.key,
        semconv.DASK_TASK_PREFIX: record.prefix,
        semconv.DASK_TASK_GROUP: record.group,
        semconv.DASK_TASK_STATE: record.state,
        semconv.DASK_TASK_ATTEMPT: record.attempt,
        semconv.DASK_TASK_NBYTES: record.nbytes,
        semconv.DASK_TASK_TYPE: record.typename,
        semconv.DASK_TASK_SAMPLED_BECAUSE: record.sampled_because,
        semconv.DASK_WORKER_ADDRESS: record.worker,
    }
    if record.thread is not None:
        attrs[semconv.DASK_WORKER_THREAD] = record.thread
    if record.dependencies:
        attrs[semconv.DASK_TASK_DEPENDENCIES] = list(record.dependencies)
    events = _events(record.events, limits)
    status = Status(StatusCode.UNSET)
    if record.exception is not None:
        exc = record.exception
        status = Status(StatusCode.ERROR, exc.describe()[: limits.attribute_length])
        details: dict[str, AttributeValue] = {semconv.EXCEPTION_TYPE: exc.type}
        if exc.message:
            details[semconv.EXCEPTION_MESSAGE] = exc.message
        if exc.stacktrace:
            details[semconv.EXCEPTION_STACKTRACE] = exc.stacktrace
        events.insert(
            0, Event(semconv.EVENT_EXCEPTION, _attributes(details, limits), record.end_ns)
        )
    out = [
        ReadableSpan(
            name=record.prefix[: limits.attribute_length] or "(empty)",
            context=context(record.trace_id, record.span_id),
            parent=context(record.trace_id, record.parent_span_id),
            resource=resource,
            attributes=_attributes(attrs, limits),
            events=_first(events, limits.events),
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=record.start_ns,
            end_time=max(record.end_ns, record.start_ns),
            instrumentation_scope=_SCOPE,
        )
    ]
    for i, phase in enumerate(record.phases):
        phase_attrs: dict[str, AttributeValue] = {}
        if phase.source:
            phase_attrs[semconv.DASK_PHASE_SOURCE] = phase.source
        out.append(
            ReadableSpan(
                name=phase.action[: limits.attribute_length] or "(empty)",
                context=context(record.trace_id, ids.span_id_for(record.span_id, "phase", i)),
                parent=context(record.trace_id, record.span_id),
                resource=resource,
                attributes=_attributes(phase_attrs, limits),
                kind=SpanKind.INTERNAL,
                start_time=phase.start_ns,
                end_time=max(phase.end_ns, phase.start_ns),
                instrumentation_scope=_SCOPE,
            )
        )
    return out
