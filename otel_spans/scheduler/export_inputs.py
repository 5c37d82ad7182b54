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
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_records import ExportSnapshot
from otel_spans.scheduler.span_state import TrackedSpan

if TYPE_CHECKING:
    from distributed.spans import Span


def track_of(span: Span, root: Span, settings: Settings, callers: CallerContexts) -> TrackedSpan:
    """What is remembered of ``span`` (under ``root``) from when it is first seen: who it
    is for the rest of its life (its :class:`SpanIdentity`), fixed now."""
    known = _known
    if known is None or known.settings is not settings:  # read once: see _known_of
        known = _known_of(settings)
    tags, policy = known.named(span.name)
    caller = callers.get(root.id)
    if caller is not None and not caller.as_link:
        trace_id = caller.trace_id  # the caller's trace: we are part of it
        # One decision per trace, the workers' too (otel_spans.sampler).
        sampled = known.sampler.sampled(trace_id, caller.trace_flags)
    else:
        trace_id, sampled = known.workflow_trace(root.id)
    return TrackedSpan(
        span.id,
        tags,
        trace_id,
        ids.dask_span_id(span.id),
        policy,
        sampled=sampled,
        labels=metric_labels(root.id, settings, callers) if known.labelled else (),
        is_root=root is span,
    )


class _Known:
    """What :func:`track_of` remembers between spans, for one scheduler's settings: a
    workflow's spans are discovered together, under a handful of names.

    Each cache is cleared when full rather than kept in recency order: workflows come
    and go together, so the names and roots in use are refilled at once, and a plain
    dict keyed by the name alone needs no hashing of the settings on every lookup.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.sampler = settings.traces.sampler
        #: Whether ``metrics.attribute-labels`` names any workflow attribute.
        self.labelled = bool(settings.metrics.attribute_labels)
        #: Dask span name -> its tags and task policy.
        self._names: dict[tuple[str, ...], tuple[tuple[str, ...], Policy]] = {}
        #: Root uuid -> its trace id and sampling decision, without a caller.
        self._traces: dict[str, tuple[int, bool]] = {}

    def named(self, name: tuple[str, ...]) -> tuple[tuple[str, ...], Policy]:
        """The tags of a span named ``name``, and its task policy: the same for every
        span of that name (each would clean its tags and match the rules again)."""
        named = self._names.get(name)
        if named is None:
            limit = self.settings.max_attribute_length
            tags = tuple([clean(str(tag), limit) for tag in name])
            named = (tags, span_state.task_policy(self.settings.traces.tasks, tags))
            if all(type(tag) is str for tag in name):  # else equal names may differ
                if len(self._names) >= _MAX_NAMES:
                    self._names.clear()
                self._names[name] = named
        return named

    def workflow_trace(self, root_uuid: str) -> tuple[int, bool]:
        """:func:`ids.workflow_trace_id` of a workflow with no caller to join, and the
        sampler's decision on it: every span of the workflow would hash its root's uuid
        again."""
        trace = self._traces.get(root_uuid)
        if trace is None:
            trace_id = ids.workflow_trace_id(root_uuid)
            trace = (trace_id, self.sampler.sampled(trace_id, None))
            if len(self._traces) >= _MAX_TRACE_IDS:
                self._traces.clear()
            self._traces[root_uuid] = trace
        return trace


def _known_of(settings: Settings) -> _Known:
    """A memory for ``settings``, replacing the last one: schedulers of other settings
    in the process (each on its own loop, maybe thread) each start afresh."""
    global _known
    known = _known = _Known(settings)
    return known


#: The memory of the settings :func:`track_of` was last called with.
_known: _Known | None = None
#: Most roots whose trace ids are remembered, and span names whose tags are.
_MAX_TRACE_IDS = 64
_MAX_NAMES = 1_024


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
