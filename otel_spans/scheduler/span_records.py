"""Building the records of a Dask span's exports: pure functions of a snapshot.

:class:`~otel_spans.scheduler.tracking.SpanTracker` decides *when* a span is exported
and which export it is (the first, or the n-th continuation); it freezes what it knows
into an :class:`ExportSnapshot` and calls :func:`span_record`, which reads the Dask
``Span`` (a read-only view of the extension's state) and returns the record without
changing anything. The tracker then applies what the export means for its state.

Runs on the scheduler's event loop; never keeps a reference to a Dask object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple

from otel_spans import ids, semconv
from otel_spans.config import Settings
from otel_spans.records import (
    AttrValue,
    HistogramSample,
    LinkRecord,
    LogEntry,
    MemoryRecord,
    SpanEventRecord,
    SpanRecord,
    WorkflowAnalysis,
    histogram_sample,
    ns,
)
from otel_spans.scheduler import run_breakdown, snapshots
from otel_spans.scheduler.callers import Caller
from otel_spans.scheduler.root_analysis import (
    analyse_root,
    diagnosis_events,
    diagnosis_log,
    nthreads_events,
    root_efficiency,
)
from otel_spans.scheduler.root_reads import MemoryOf
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.scheduler.task_groups import Tally

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import Computation, TaskGroup
    from distributed.spans import Span

#: A Dask span uuid -> its tasks that reached a final state, by (prefix, final state);
#: None for a span that is not tracked.
FinishedOf = Callable[[str], Mapping[tuple[str, str], int] | None]
#: A task group -> the first start and last stop of its finished runs as their task
#: spans have them (on the workers' clocks); None when none finished.
GroupBounds = Callable[["TaskGroup"], tuple[float, float] | None]
#: A task group -> what ran of it (:meth:`TaskGroups.tally`); None when unknown.
TallyOf = Callable[["TaskGroup"], Tally | None]

#: A task group's bytes produced and its tasks' seconds, read in C by ``sum(map(...))``
#: rather than a generator's frame per group.
_NBYTES = attrgetter("nbytes_total")
_DURATION = attrgetter("duration")


class ExportSnapshot(NamedTuple):
    """What the tracker knows of one export of a Dask span, frozen when it exports.

    A named tuple: built once per export on the event loop, where a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``."""

    identity: SpanIdentity
    is_root: bool
    #: False when exported unfinished (at shutdown).
    done: bool
    #: Exports of the span before this one: 0 for the first export, n for the n-th
    #: continuation.
    continuation: int
    #: OTel span id of the previous export; 0 for the first.
    previous_span_id: int
    #: OTel span id of the parent Dask span's first export (its track has it: not
    #: hashed again per child); 0 for a root, and unused by continuations.
    parent_span_id: int
    #: Where a continuation starts (when new work arrived, else where the previous
    #: export ended), epoch seconds; unused by the first export, which starts at
    #: ``Span.enqueued``.
    resumed_at: float
    #: The caller's span the first export hangs under or links to; None for
    #: continuations and for spans without one.
    caller: Caller | None
    #: The workflow's attributes, sorted, and who started it (roots only); left empty
    #: by the tracker when traces are off (only span attributes read them).
    workflow_attributes: tuple[tuple[str, AttrValue], ...]
    client_id: str | None
    client_user: str | None
    #: Run-breakdown totals carried by the earlier exports (read, never changed).
    run_exported: Mapping[str, float]
    #: The memory of the span's own tasks (scheduler/memory.py); None when not read.
    footprint: MemoryRecord | None = None
    #: ``dask.worker.lost`` events since the previous export.
    lost_events: tuple[SpanEventRecord, ...] = ()


class SpanExport(NamedTuple):
    """A built record, the run-breakdown totals it accounts for (the tracker's
    :attr:`ExportSnapshot.run_exported` for the next export), and where it ends (epoch
    seconds: a continuation starts there at the earliest)."""

    record: SpanRecord
    run_totals: dict[str, float]
    end: float


#: A :class:`SpanExport` by ``tuple.__new__`` (see ``records.log_entry``): one per export.
_span_export: Callable[[tuple[SpanRecord, dict[str, float], float]], SpanExport] = partial(
    tuple.__new__, SpanExport
)


def span_record(
    span: Span,
    snapshot: ExportSnapshot,
    *,
    scheduler: Scheduler,
    settings: Settings,
    full: bool,
    finished_of: FinishedOf,
    group_bounds: GroupBounds | None = None,
    tally_of: TallyOf | None = None,
    memory_of: MemoryOf | None = None,
    submitted_of: Callable[[TaskGroup], float | None] | None = None,
    fed: list[Computation] | None = None,
) -> SpanExport:
    """The record of one export of ``span``; O(task groups in its subtree).

    Without traces (``full`` false) only what the metrics read is filled in (ids,
    times, CPU, the workflow analysis): the subtree walks feed span attributes alone.
    ``submitted_of`` gives when a group of the tree's computation was submitted (read
    once per tracked group by :meth:`TaskGroups.submitted_in`; else a scan per read).
    With ``group_bounds`` the first export covers its subtree's task-group spans
    (:func:`covering`). ``fed``: :func:`~otel_spans.scheduler.snapshots.fed_by` of
    ``span``, when the caller read it already.
    """
    identity = snapshot.identity
    continuation = snapshot.continuation
    if continuation:
        span_id = ids.continuation_span_id(span.id, continuation)
        parent_span_id = identity.otel_span_id
        start = snapshot.resumed_at
    else:
        span_id = identity.otel_span_id
        parent_span_id = snapshot.parent_span_id
        start = span.enqueued
    links: tuple[LinkRecord, ...] = ()
    parent_remote = False
    caller = snapshot.caller
    # Where a caller in another process hands a workflow over (its root's first
    # export, under the caller or linked to it): a CONSUMER span (docs/trace-context.md).
    consumer = caller is not None and caller.remote and snapshot.is_root and not continuation
    if caller is not None:
        if caller.as_link or (not snapshot.is_root and caller.trace_id != identity.trace_id):
            # a link: asked for, or the task that opened a nested span is in another
            # trace (a tree keeps one trace id: its ids are derived from it)
            kind = ((semconv.DASK_LINK_KIND, semconv.LINK_KIND_CALLER),)
            flags, remote = caller.trace_flags, caller.remote
            links = (LinkRecord(caller.trace_id, caller.span_id, kind, flags, remote),)
        else:
            parent_span_id = caller.span_id
            parent_remote = caller.remote
    # Dask computes each of stop, thread intervals, CPU made available and the tree's
    # worker metrics by walking the whole subtree (a root with 5,000 sub-spans: tens
    # of ms each; its CPU and metrics compute the intervals again): read once.
    nodes = snapshots.tree_spans(span)
    tree_groups = snapshots.tree_groups(nodes)
    times = snapshots.tree_times(span, tree_groups)
    stop = times.stop
    groups = tree_groups if full else []
    first, last = start, max(stop, start)
    if groups and group_bounds is not None and not continuation:
        first, last = covering(groups, group_bounds, start, stop, done=snapshot.done)
    states = _states(span, nodes, snapshot.done, finished_of) if full else {}
    events: tuple[SpanEventRecord, ...] = ()
    if full and not continuation:
        events = snapshots.computation_events(scheduler, span, settings.code_snippet_length, fed)
    if full:
        events += snapshot.lost_events
    active_cpu_seconds = times.active_cpu_seconds
    analysis: WorkflowAnalysis | None = None
    idle = None
    events_dropped = 0
    if snapshot.is_root and snapshot.done:
        if not _is_diagnosed(span, stop, tree_groups, settings):
            busy, idle = snapshots.tree_busy_and_idle(nodes, active_cpu_seconds)
            analysis = root_efficiency(
                span, stop=stop, metrics_busy=busy, metrics_idle=idle, tree_groups=tree_groups
            )
        else:
            tree = snapshots.tree_metrics(span, active_cpu_seconds, nodes)
            busy, idle = snapshots.busy_and_idle(tree)
            intervals = times.intervals
            analysis = analyse_root(
                span,
                stop=stop,
                intervals=intervals,
                metrics_busy=busy,
                metrics_idle=idle,
                submitted_at=submitted_of or (lambda tg: snapshots.submitted_at(scheduler, tg)),
                tree_metrics=tree,
                tally=tally_of or (lambda tg: None),
                worker_threads=max((ws.nthreads for ws in scheduler.workers.values()), default=0),
                memory_of=memory_of or (lambda uuid: None),
                tree_groups=groups if full else None,
                tree_spans=nodes,
            )
            if full:
                changes, events_dropped = nthreads_events(intervals)
                events += changes
                events += diagnosis_events(analysis.findings, ns(max(stop, start)))
    totals: dict[str, float] = {}
    if full:
        totals = run_breakdown.run_totals(span._cumulative_worker_metrics, idle)
    record = SpanRecord(
        uuid=span.id,
        tags=identity.tags,
        trace_id=identity.trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        continuation=continuation,
        previous_span_id=snapshot.previous_span_id if continuation else 0,
        start_ns=ns(first),
        end_ns=ns(last),
        enqueued_ns=ns(span.enqueued),
        compute_start_ns=ns(snapshots.tree_start(span, tree_groups)),
        done=snapshot.done,
        states=tuple(sorted(states.items())),
        tasks=sum(map(len, groups)),
        task_groups=len(groups),
        nbytes=sum(map(_NBYTES, groups)),
        task_duration=sum(map(_DURATION, groups)),
        active_cpu_seconds=active_cpu_seconds,
        code=snapshots.code_snippets(span, settings.capture.code, settings.code_snippet_length)
        if full
        else (),
        events=events,
        events_dropped=events_dropped,
        links=links,
        parent_remote=parent_remote,
        consumer=consumer,
        analysis=analysis,
        workflow_attributes=snapshot.workflow_attributes,
        client_id=snapshot.client_id,
        client_user=snapshot.client_user,
        run_breakdown=run_breakdown.run_shares(totals, snapshot.run_exported),
        footprint=snapshot.footprint,
    )
    return _span_export((record, totals, last))


def _is_diagnosed(root: Span, stop: float, groups: list[TaskGroup], settings: Settings) -> bool:
    """Whether a finished root is diagnosed: it ran at least ``diagnosis.min-duration``,
    or a task of it erred (a failure is critical whatever time it took). A shorter
    workflow's wall time is Dask's fixed latency, which its diagnosis would name every
    time, at the cost of the analysis and a log record per workflow."""
    if stop - root.enqueued >= settings.diagnosis.min_duration:
        return True
    return any(tg.states.get("erred") for tg in groups)


def covering(
    groups: list[TaskGroup], bounds: GroupBounds, enqueued: float, stop: float, *, done: bool
) -> tuple[float, float]:
    """A Dask span's start and end that cover the spans of its subtree's task groups.

    Dask's ``Span.stop`` is the last ``TaskGroup.stop``, a compute stop as the worker
    reported it (on the scheduler's clock, as the worker estimates it); the group spans
    are on the clocks of the workers that ran the tasks, and start at a task's first
    phase (a transfer, say), not its first compute. So: from ``enqueued`` (or a group's
    first run, if earlier) to the last stop of the groups' runs, as the group spans
    have them (Dask's ``TaskGroup.stop`` for a group without one); a span exported
    unfinished ends at ``stop`` (now) or later.
    """
    first, last = enqueued, enqueued if done else max(stop, enqueued)
    for tg in groups:
        known = bounds(tg)
        if known is None:
            last = max(last, tg.stop)
        else:
            first = min(first, known[0])
            last = max(last, known[1])
    return first, last


def _states(span: Span, nodes: list[Span], done: bool, finished_of: FinishedOf) -> dict[str, int]:
    """Tasks of the span tree (``nodes``) by the final state they reached, plus, on a
    span exported unfinished, those still pending by state."""
    states: dict[str, int] = {}
    for node in nodes:
        finished = finished_of(node.id)
        if finished is not None:
            for (_, state), count in finished.items():
                states[state] = states.get(state, 0) + count
    if not done:
        for state, count in snapshots.pending_states(span).items():
            states[state] = states.get(state, 0) + count
    return states


def export_samples(
    record: SpanRecord, identity: SpanIdentity, *, sampled: bool
) -> list[HistogramSample]:
    """The histogram values of one export: the workflow's efficiency (finished roots)
    and the span's duration (exports as done), with the export as their exemplar when
    it is sampled."""
    trace_id, span_id = (record.trace_id, record.span_id) if sampled else (0, 0)
    values: list[tuple[str, float]] = []
    analysis = record.analysis
    if analysis is not None and analysis.efficiency is not None:
        values.append((semconv.WORKFLOW_EFFICIENCY, analysis.efficiency))
    if record.done:
        values.append((semconv.M_SPAN_DURATION, (record.end_ns - record.start_ns) / 1e9))
        if record.footprint is not None:
            values.append((semconv.DASK_SPAN_MEMORY_PEAK, float(record.footprint.peak)))
    tags, labels = identity.tags, identity.labels
    return [
        histogram_sample((metric, tags, labels, value, trace_id, span_id))
        for metric, value in values
    ]


def started_log(root: Span, identity: SpanIdentity, url: str | None) -> LogEntry:
    """The log record that says a workflow started: its trace id at once, hours before
    its root span is exported."""
    name = "/".join(identity.tags)
    attributes: tuple[tuple[str, AttrValue], ...] = (
        (semconv.DASK_SPAN_ID, root.id),
        (semconv.DASK_SPAN_TAGS, identity.tags),
        (semconv.DASK_SPAN_NAME, name),
    )
    if url is not None:
        attributes += ((semconv.OTEL_SPANS_TRACE_URL, url),)
    return LogEntry(
        time_ns=ns(root.enqueued),
        severity_number=semconv.SEVERITY_INFO.number,
        severity_text=semconv.SEVERITY_INFO.text,
        body=f"workflow {name!r} started, trace {identity.trace_id:032x}"
        + (f": {url}" if url else ""),
        attributes=attributes,
        event_name=semconv.LOG_SPAN_STARTED,
        trace_id=identity.trace_id,
        span_id=identity.otel_span_id,
        sampled=identity.sampled,
    )


def diagnosis_log_of(record: SpanRecord) -> LogEntry:
    """The log record of a finished root's diagnosis (its export carries the analysis)."""
    assert record.analysis is not None
    return diagnosis_log(
        record.analysis.findings,
        "/".join(record.tags),
        record.trace_id,
        record.span_id,
        record.end_ns,
    )
