"""Span records become OTLP spans.

The spans describe work that already happened, with ids fixed by :mod:`otel_spans.ids`,
so there is no ``Tracer`` (whose id generator would pick random ids) and no
``ReadableSpan``: each record is written straight into OTLP protobuf bytes by
:mod:`otel_spans.export.wire`, which also applies the span limits as the SDK would.
"""

from __future__ import annotations

from otel_spans import ids, semconv
from otel_spans.export import wire
from otel_spans.export.wire import (
    KIND_CONSUMER,
    KIND_INTERNAL,
    STATUS_ERROR,
    STATUS_UNSET,
    WireEvent,
    WireLink,
)
from otel_spans.records import AttrValue, LinkRecord, MemoryRecord, SpanEventRecord, SpanRecord
from otel_spans.settings import RecordLimits
from otel_spans.task_records import GroupRecord, TaskRecord


def _erred_status(
    erred: int, tasks: int, attrs: dict[str, AttrValue], error_type: str = ""
) -> tuple[int, str]:
    """ERROR when some tasks of a span or task group erred, with how many, and
    ``error.type``: the one type its tasks raised when known, else the conventions'
    fallback ``_OTHER`` (several types, or tasks erred because a dependency did);
    else UNSET."""
    if erred:
        attrs[semconv.ERROR_TYPE] = error_type or semconv.ERROR_TYPE_OTHER
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
        attrs[semconv.DASK_SPAN_TASK_STATES_PREFIX + semconv.key_part(state)] = count
    if record.compute_start_ns:
        attrs[semconv.DASK_SPAN_COMPUTE_START] = record.compute_start_ns
    if record.continuation:
        attrs[semconv.DASK_SPAN_CONTINUATION] = record.continuation
    analysis = record.analysis
    if analysis is not None:
        # in the order they always had: the bytes of a diagnosed root stay the same
        attrs[semconv.WORKFLOW_SEQUENTIAL_TIME] = analysis.sequential_time
        if analysis.diagnosed:
            attrs[semconv.WORKFLOW_CRITICAL_PATH_GROUPS] = analysis.critical_path_groups
            attrs[semconv.WORKFLOW_CRITICAL_PATH_LENGTH] = analysis.critical_path_length
        if analysis.efficiency is not None:
            attrs[semconv.WORKFLOW_EFFICIENCY] = analysis.efficiency
        if analysis.speedup is not None:
            attrs[semconv.WORKFLOW_SPEEDUP] = analysis.speedup
    if analysis is not None and analysis.diagnosed:
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
    if record.footprint is not None:
        attrs.update(memory_attributes(record.footprint, SPAN_MEMORY))
    if record.code:  # already cut and redacted as configured (snapshots.code_snippets)
        first = record.code[0]
        if first.code:
            attrs[semconv.DASK_SPAN_CODE_SNIPPET] = first.code
        attrs[semconv.DASK_SPAN_CODE_COUNT] = len(record.code)
        attrs[semconv.CODE_FILE_PATH] = first.filename
        attrs[semconv.CODE_LINE_NUMBER] = first.lineno
    return attrs


#: The memory attributes of a Dask span and of a task group, in MemoryRecord's order:
#: peak, held, spilled, unspilled, pauses, pause duration, workers lost.
SPAN_MEMORY = (
    semconv.DASK_SPAN_MEMORY_PEAK,
    semconv.DASK_SPAN_MEMORY_HELD,
    semconv.DASK_SPAN_MEMORY_SPILLED,
    semconv.DASK_SPAN_MEMORY_UNSPILLED,
    semconv.DASK_SPAN_MEMORY_PAUSES,
    semconv.DASK_SPAN_MEMORY_PAUSE_DURATION,
    semconv.DASK_SPAN_MEMORY_WORKERS_LOST,
)
GROUP_MEMORY = (
    semconv.DASK_TASK_GROUP_MEMORY_PEAK,
    semconv.DASK_TASK_GROUP_MEMORY_HELD,
    semconv.DASK_TASK_GROUP_MEMORY_SPILLED,
    semconv.DASK_TASK_GROUP_MEMORY_UNSPILLED,
    semconv.DASK_TASK_GROUP_MEMORY_PAUSES,
    semconv.DASK_TASK_GROUP_MEMORY_PAUSE_DURATION,
    semconv.DASK_TASK_GROUP_MEMORY_WORKERS_LOST,
)


def memory_attributes(memory: MemoryRecord, names: tuple[str, ...]) -> dict[str, AttrValue]:
    """A footprint as attributes: bytes always (0 says "nothing"), pause and loss
    counts only when there were some; the tree's peak on roots."""
    peak, held, spilled, unspilled, pauses, pause_duration, lost = names
    attrs: dict[str, AttrValue] = {
        peak: memory.peak,
        held: memory.held,
        spilled: int(memory.spilled),
        unspilled: int(memory.unspilled),
    }
    if memory.pauses:
        attrs[pauses] = memory.pauses
        attrs[pause_duration] = memory.pause_seconds
    if memory.workers_lost:
        attrs[lost] = memory.workers_lost
    if memory.tree_peak:
        attrs[semconv.DASK_SPAN_MEMORY_TREE_PEAK] = memory.tree_peak
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
    events_dropped: int = 0,
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
        events_dropped=events_dropped,
        limits=limits,
        status_code=status[0],
        status_message=status[1],
        parent_remote=isinstance(record, SpanRecord) and record.parent_remote,
        kind=KIND_CONSUMER if isinstance(record, SpanRecord) and record.consumer else KIND_INTERNAL,
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
    attrs = span_attributes(record)
    status = _erred_status(record.erred, record.tasks, attrs)
    return _encode(
        record,
        record.tags[-1] if record.tags else "(unnamed)",
        attrs,
        limits,
        events=_events(record.events),
        events_dropped=record.events_dropped,
        links=links,
        status=status,
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
    if record.workers_uncounted_runs:
        attrs[semconv.DASK_TASK_GROUP_WORKERS_UNCOUNTED_RUNS] = record.workers_uncounted_runs
    for action, seconds in record.durations:
        attrs[semconv.DASK_TASK_GROUP_DURATION_PREFIX + semconv.key_part(action)] = seconds
    if record.footprint is not None:
        attrs.update(memory_attributes(record.footprint, GROUP_MEMORY))
    status = _erred_status(record.erred, record.tasks, attrs, record.error_type)
    return _encode(
        record,
        record.prefix,
        attrs,
        limits,
        links=_links(record.links),
        links_dropped=record.links_dropped,
        status=status,
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
    if record.dependencies_dropped:
        attrs[semconv.DASK_TASK_DEPENDENCIES_DROPPED] = record.dependencies_dropped
    events = _events(record.events)
    status = STATUS_UNSET, ""
    if record.exception is not None:
        exc = record.exception
        # The description is the message alone: the type is error.type's (and the
        # exception event's), and under capture.exceptions: type there is none.
        status = STATUS_ERROR, exc.message
        attrs[semconv.ERROR_TYPE] = exc.type
        details: dict[str, AttrValue] = {semconv.EXCEPTION_TYPE: exc.type}
        if exc.message:
            details[semconv.EXCEPTION_MESSAGE] = exc.message
        if exc.stacktrace:
            details[semconv.EXCEPTION_STACKTRACE] = exc.stacktrace
        events.insert(0, WireEvent(semconv.EVENT_EXCEPTION, record.end_ns, details))
    out = [
        _encode(
            record,
            record.prefix,
            attrs,
            limits,
            events=events,
            events_dropped=record.events_dropped,
            status=status,
        )
    ]
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
