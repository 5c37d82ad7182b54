"""What the tracker hands on about a Dask span: its identity, its workflow, an export.

:class:`~otel_spans.scheduler.tracking.SpanTracker` decides *when*; these functions
say *what*, from the settings and the callers' contexts: the :class:`TrackedSpan` a
span gets when first seen (its trace, sampling, task policy and fixed metric labels),
its workflow's attributes, and the :class:`ExportSnapshot` each export is built from.
Kept apart so that the tracker's module holds the lifecycle alone.

Runs on the scheduler's event loop; never keeps a reference to a Dask object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from distributed.metrics import time

from otel_spans import ids
from otel_spans.config import Settings
from otel_spans.names import clean
from otel_spans.records import AttrValue
from otel_spans.scheduler import memory, snapshots, span_state
from otel_spans.scheduler.callers import CallerContexts, Origin
from otel_spans.scheduler.span_records import ExportSnapshot
from otel_spans.scheduler.span_state import TrackedSpan

if TYPE_CHECKING:
    from distributed.spans import Span


def track_of(span: Span, root: Span, settings: Settings, callers: CallerContexts) -> TrackedSpan:
    """What is remembered of ``span`` (under ``root``) from when it is first seen: who it
    is for the rest of its life (its :class:`SpanIdentity`), fixed now."""
    limit = settings.max_attribute_length
    tags = tuple([clean(str(tag), limit) for tag in span.name])
    caller = callers.get(root.id)
    parent_flags: int | None = None
    if caller is not None and not caller.as_link:
        trace_id = caller.trace_id  # the caller's trace: we are part of it
        parent_flags = caller.trace_flags
    else:
        trace_id = _workflow_trace_id(root.id)
    # One decision per trace, the workers' too (otel_spans.sampler).
    sampled = settings.traces.sampler.sampled(trace_id, parent_flags)
    return TrackedSpan(
        span.id,
        tags,
        trace_id,
        ids.dask_span_id(span.id),
        span_state.task_policy(settings.traces.tasks, tags),
        sampled=sampled,
        labels=metric_labels(root.id, settings, callers),
        is_root=root is span,
    )


def _workflow_trace_id(root_uuid: str) -> int:
    """:func:`ids.workflow_trace_id`, remembered: a workflow's spans are discovered
    together, and each would hash its root's uuid again.

    In a dict of strings and ints, which the garbage collector does not track, rather
    than an LRU cache, whose cells it does (one more object per workflow for every full
    collection to walk); cleared when full, as a workflow's spans come together.
    """
    trace_id = _trace_ids.get(root_uuid)
    if trace_id is None:
        if len(_trace_ids) >= _MAX_TRACE_IDS:
            _trace_ids.clear()
        trace_id = _trace_ids[root_uuid] = ids.workflow_trace_id(root_uuid)
    return trace_id


#: Root uuid -> its trace id, for :func:`_workflow_trace_id`.
_trace_ids: dict[str, int] = {}
_MAX_TRACE_IDS = 64


def export_snapshot(
    span: Span,
    track: TrackedSpan,
    settings: Settings,
    callers: CallerContexts,
    *,
    done: bool,
    traces_enabled: bool,
    span_id_of: Callable[[str], int] = ids.dask_span_id,
) -> ExportSnapshot:
    """What the record of this export is built from: the tracker's side of it.

    ``span_id_of``: the OTel span id of a Dask span's first export by its uuid (the
    exporter reads its parent's from the parent's track rather than hashing again)."""
    continuation = track.exports
    attributes: tuple[tuple[str, AttrValue], ...] = ()
    client = user = None
    parent = span.parent  # Dask dereferences a weak reference on each read: once
    parent_span_id = span_id_of(parent.id) if parent is not None and not continuation else 0
    if traces_enabled:  # span attributes only: O(depth) for the root
        root_uuid = snapshots.root_of(parent).id if parent is not None else span.id
        origin = callers.origin(root_uuid)
        if settings.workflow_attributes or (origin is not None and origin.attributes):
            attributes = tuple(sorted(_merged(settings, origin).items()))
        if origin is not None and track.is_root:
            client, user = origin.client, origin.user
    return ExportSnapshot(
        identity=track,
        is_root=track.is_root,
        done=done,
        continuation=continuation,
        previous_span_id=track.last_span_id,
        parent_span_id=parent_span_id,
        resumed_at=track.reopened_at if track.reopened_at is not None else track.last_end,
        caller=callers.get(span.id) if not continuation else None,
        workflow_attributes=attributes,
        client_id=client,
        client_user=user,
        run_exported=track.run_exported,
        footprint=memory.span_footprint(
            track.memory, span._cumulative_worker_metrics, is_root=track.is_root, now=time()
        ),
        lost_events=track.memory.lost_events,
    )


def workflow_attributes(
    root_uuid: str, settings: Settings, callers: CallerContexts
) -> dict[str, AttrValue]:
    """The workflow's attributes: configured, then given (given win)."""
    return _merged(settings, callers.origin(root_uuid))


def _merged(settings: Settings, origin: Origin | None) -> dict[str, AttrValue]:
    """:func:`workflow_attributes` given the workflow's origin (read already)."""
    attributes: dict[str, AttrValue] = dict(settings.workflow_attributes)
    if origin is not None:
        attributes.update(origin.attributes)
    return attributes


def metric_labels(
    root_uuid: str, settings: Settings, callers: CallerContexts
) -> tuple[tuple[str, str], ...]:
    """The allowed workflow attributes as metric attributes, fixed when a span is
    first seen so that its series keep one identity."""
    allowed = settings.metrics.attribute_labels
    if not allowed:
        return ()
    return span_state.metric_labels(allowed, workflow_attributes(root_uuid, settings, callers))
