"""Span records become OTLP spans.

The spans describe work that already happened, with ids fixed by :mod:`otel_spans.ids`,
so there is no ``Tracer`` (whose id generator would pick random ids) and no
``ReadableSpan``: each record is written straight into OTLP protobuf bytes by
:mod:`otel_spans.export.wire`, which also applies the span limits as the SDK would.
"""

from __future__ import annotations

from otel_spans import ids, semconv
from otel_spans.export import wire
from otel_spans.export.wire import STATUS_ERROR, STATUS_UNSET, WireEvent, WireLink
from otel_spans.records import AttrValue, LinkRecord, SpanEventRecord, SpanRecord
from otel_spans.settings import RecordLimits
from otel_spans.task_records import GroupRecord, TaskRecord


def _erred_status(erred: int, tasks: int) -> tuple[int, str]:
    """ERROR when some tasks of a span or task group erred, with how many; else UNSET."""
    if erred:
        return STATUS_ERROR, f"{erred} of {tasks} tasks erred"
    return STATUS_UNSET, ""


def span_attributes(record: SpanRecord) -> dict[str, AttrValue]:
    """The attributes of a Dask span (see docs/telemetry.md)."""
    attrs: dict[str, AttrValue] = {
        semconv.DASK_SPAN_ID: record.uuid,
        semconv.DASK_SPAN_TAGS: record.tags,
        semconv.DASK_SPAN_NAME: "/".join(record.tags),
        semconv.DASK_SPAN_DONE: record.done,
        semconv.DASK_SPAN_TASK_COUNT: record.tasks,
        semconv.DASK_SPAN_TASK_GROUPS: record.task_groups,
        semconv.DASK_SPAN_NBYTES: record.nbytes,
        semconv.DASK_SPAN_TASK_DURATION: record.task_duration,
        semconv.DASK_SPAN_ACTIVE_CPU_SECONDS: record.active_cpu_seconds,
        semconv.DASK_SPAN_ENQUEUED: record.enqueued_ns,
    }
    for state, count in record.states:
        attrs[semconv.DASK_SPAN_TASK_STATES_PREFIX + state] = count
    if record.compute_start_ns:
        attrs[semconv.DASK_SPAN_COMPUTE_START] = record.compute_start_ns
    if record.continuation:
        attrs[semconv.DASK_SPAN_CONTINUATION] = record.continuation
    analysis = record.analysis
    if analysis is not None:
        attrs[semconv.WORKFLOW_SEQUENTIAL_TIME] = analysis.sequential_time
        attrs[semconv.WORKFLOW_CRITICAL_PATH_GROUPS] = analysis.critical_path_groups
        attrs[semconv.WORKFLOW_CRITICAL_PATH_LENGTH] = analysis.critical_path_length
        if analysis.efficiency is not None:
            attrs[semconv.WORKFLOW_EFFICIENCY] = analysis.efficiency
        if analysis.speedup is not None:
            attrs[semconv.WORKFLOW_SPEEDUP] = analysis.speedup
        attrs[semconv.WORKFLOW_BOTTLENECKS] = analysis.bottlenecks
        if analysis.bottleneck_shares is not None:
            attrs[semconv.WORKFLOW_BOTTLENECK_SHARES] = analysis.bottleneck_shares
        attrs[semconv.DIAGNOSIS_FINDINGS] = tuple(f.id for f in analysis.findings)
        if analysis.worker_threads:
            attrs[semconv.WORKFLOW_WORKER_THREADS] = analysis.worker_threads
    for key, value in record.workflow_attributes:
        attrs[key] = value
    if record.client_id is not None:
        attrs[semconv.DASK_CLIENT_ID] = record.client_id
    if record.client_user is not None:
        attrs[semconv.DASK_CLIENT_USER] = record.client_user
    for key, share in record.run_breakdown:
        attrs[key] = share
    if record.code:  # already cut and redacted as configured (snapshots.code_snippets)
        first = record.code[0]
        if first.code:
            attrs[semconv.DASK_SPAN_CODE_SNIPPET] = first.code
        attrs[semconv.DASK_SPAN_CODE_COUNT] = len(record.code)
        attrs[semconv.CODE_FILE_PATH] = first.filename
        attrs[semconv.CODE_LINE_NUMBER] = first.lineno
    return attrs


def _encode(
    record: SpanRecord | GroupRecord | TaskRecord,
    name: str,
    attributes: dict[str, AttrValue],
    limits: RecordLimits,
    *,
    events: list[WireEvent] | None = None,
    links: list[WireLink] | None = None,
    links_dropped: int = 0,
    status: tuple[int, str] = (STATUS_UNSET, ""),
) -> bytes:
    """The span of a record: its ids and times, with this name, attributes and status."""
    return wire.span(
        name=name,
        trace_id=record.trace_id,
        span_id=record.span_id,
        parent_span_id=record.parent_span_id,
        start_ns=record.start_ns,
        end_ns=record.end_ns,
        attributes=attributes,
        events=events or (),
        links=links or (),
        links_dropped=links_dropped,
        limits=limits,
        status_code=status[0],
        status_message=status[1],
        parent_remote=isinstance(record, SpanRecord) and record.parent_remote,
    )


def dask_span(record: SpanRecord, *, limits: RecordLimits) -> bytes:
    """The OTel span of one export of a Dask span."""
    links: list[WireLink] = []
    if record.previous_span_id:
        links.append(
            WireLink(
                record.trace_id,
                record.previous_span_id,
                {semconv.DASK_SPAN_CONTINUATION: record.continuation - 1},
            )
        )
    links.extend(_links(record.links))
    return _encode(
        record,
        record.tags[-1] if record.tags else "(unnamed)",
        span_attributes(record),
        limits,
        events=_events(record.events),
        links=links,
        status=_erred_status(record.erred, record.tasks),
    )


def _events(records: tuple[SpanEventRecord, ...]) -> list[WireEvent]:
    return [WireEvent(e.name, e.time_ns, dict(e.attributes)) for e in records]


def _links(records: tuple[LinkRecord, ...]) -> list[WireLink]:
    return [
        WireLink(link.trace_id, link.span_id, dict(link.attributes), link.trace_flags, link.remote)
        for link in records
    ]


def group_span(record: GroupRecord, *, limits: RecordLimits) -> bytes:
    """The span of a task group: named by its prefix, the full name in an attribute."""
    attrs: dict[str, AttrValue] = {
        semconv.DASK_TASK_GROUP_NAME: record.name,
        semconv.DASK_TASK_PREFIX: record.prefix,
        semconv.DASK_TASK_GROUP_TASK_COUNT: record.tasks,
        semconv.DASK_TASK_GROUP_TASK_STATES_MEMORY: record.memory,
        semconv.DASK_TASK_GROUP_TASK_STATES_ERRED: record.erred,
        semconv.DASK_TASK_GROUP_NBYTES: record.nbytes,
        semconv.DASK_TASK_GROUP_WORKERS: record.workers,
        semconv.DASK_TASK_GROUP_TASK_SPANS_KEPT: record.task_spans_kept,
        semconv.DASK_TASK_GROUP_TASK_SPANS_DROPPED: record.task_spans_dropped,
    }
    if record.submitted_ns:
        attrs[semconv.DASK_TASK_GROUP_SUBMITTED] = record.submitted_ns
    for action, seconds in record.durations:
        attrs[semconv.DASK_TASK_GROUP_DURATION_PREFIX + action] = seconds
    return _encode(
        record,
        record.prefix,
        attrs,
        limits,
        links=_links(record.links),
        links_dropped=record.links_dropped,
        status=_erred_status(record.erred, record.tasks),
    )


def task_spans(record: TaskRecord, *, limits: RecordLimits) -> list[bytes]:
    """The span of one sampled task run, and one child span per phase."""
    attrs: dict[str, AttrValue] = {
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
        attrs[semconv.DASK_TASK_DEPENDENCIES] = record.dependencies
    events = _events(record.events)
    status = STATUS_UNSET, ""
    if record.exception is not None:
        exc = record.exception
        status = STATUS_ERROR, exc.describe()
        details: dict[str, AttrValue] = {semconv.EXCEPTION_TYPE: exc.type}
        if exc.message:
            details[semconv.EXCEPTION_MESSAGE] = exc.message
        if exc.stacktrace:
            details[semconv.EXCEPTION_STACKTRACE] = exc.stacktrace
        events.insert(0, WireEvent(semconv.EVENT_EXCEPTION, record.end_ns, details))
    out = [_encode(record, record.prefix, attrs, limits, events=events, status=status)]
    for i, phase in enumerate(record.phases):
        out.append(
            wire.span(
                name=phase.action,
                trace_id=record.trace_id,
                span_id=ids.phase_span_id(record.span_id, i),
                parent_span_id=record.span_id,
                start_ns=phase.start_ns,
                end_ns=phase.end_ns,
                attributes={semconv.DASK_PHASE_SOURCE: phase.source} if phase.source else {},
                limits=limits,
            )
        )
    return out
