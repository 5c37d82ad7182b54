"""Which trace a task's Dask span tree belongs to, and the span of a running task.

The rule every process applies to a task's annotations (:func:`tree_trace`): the
caller's trace when the ``otel_spans`` annotation says ``link: false``, otherwise
``ids.workflow_trace_id(<root Dask span uuid>)``. Its own module because the workers
apply it to every task they run (:func:`task_span_context`, the id the scheduler gives
the task's span), and the client (:mod:`otel_spans.context`) to the annotation it
adds, and both must give the same answer.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import SpanContext, TraceFlags, get_current_span

from otel_spans import ids, propagation, semconv
from otel_spans.sampler import TraceSampler
from otel_spans.traceparent import context_with_span, parse_traceparent, remote_span_context

_DEFAULT_SAMPLER = TraceSampler()
#: Key of the ``otel_spans`` annotation holding the fields the caller's propagators
#: wrote besides the traceparent (:mod:`otel_spans.propagation`).
CARRIER_KEY = "carrier"


def dask_span_ids(annotations: Mapping[str, Any]) -> Sequence[str]:
    """Dask span uuids of a task, root first (``annotations["span"]["ids"]``); may be empty."""
    value = annotations.get("span")
    span_ids = value.get("ids") if isinstance(value, Mapping) else None
    # Called for every task a worker runs: no copy, only the shape is checked.
    if isinstance(span_ids, (list, tuple)) and span_ids and isinstance(span_ids[-1], str):
        return span_ids
    return ()


@functools.lru_cache(maxsize=1024)
def _root_trace_id(root_uuid: str) -> int:
    # Every task of a tree asks again; one sha256 saved per task.
    return ids.workflow_trace_id(root_uuid)


def tree_trace(annotations: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(trace_id, flags)`` of the Dask span tree a task with ``annotations`` is in.

    The caller's when the ``otel_spans`` annotation says ``link: false``, otherwise
    ``ids.workflow_trace_id(root uuid)`` (sampled). None for a task with no ``span``
    annotation and no caller (see :func:`task_span_context` for those).
    """
    span_ids = dask_span_ids(annotations)
    return _tree_of(annotations, span_ids[0] if span_ids else None)


def _tree_of(annotations: Mapping[str, Any], root_uuid: str | None) -> tuple[int, int] | None:
    tree = _tree_and_parent(annotations, root_uuid)
    if tree is None:
        return None
    trace_id, parent_flags = tree
    return trace_id, TraceFlags.SAMPLED if parent_flags is None else parent_flags


def _tree_and_parent(
    annotations: Mapping[str, Any], root_uuid: str | None
) -> tuple[int, int | None] | None:
    """``(trace_id, the caller's flags)``; the flags None when the tree starts a trace."""
    caller = annotations.get(semconv.ANNOTATION)
    # A missing "link" means false, as on the scheduler: both must pick the same trace.
    if isinstance(caller, Mapping) and not caller.get("link", False):
        parsed = parse_traceparent(caller.get("traceparent"))
        if parsed is not None:
            return parsed[0], parsed[2]
    if root_uuid is None:
        return None
    return _root_trace_id(str(root_uuid)), None


def task_span_context(
    key: object,
    annotations: Mapping[str, Any],
    span_uuid: str | None = None,
    sampler: TraceSampler = _DEFAULT_SAMPLER,
) -> SpanContext | None:
    """The span context of a running task's OTel span, or None when it has none.

    ``span_id = ids.task_span_id(<its Dask span uuid>, str(key))``, the id the
    scheduler gives the task's span whichever attempt this run is (the worker cannot
    tell; see docs/trace-context.md); remote, because the scheduler exports it.
    ``span_uuid`` is the Dask span the scheduler put the task in (the worker's
    ``TaskState.span_id``); without it, the last of the ``span`` annotation's ids. The
    root of its tree is the first of those ids when the span is among them; a task
    outside them (no ``span`` annotation) is in Dask's default span, a root of its own.
    Its ``sampled`` flag is ``sampler``'s decision for the trace, the scheduler's.
    """
    span_ids = dask_span_ids(annotations)
    if span_uuid is None:
        if not span_ids:
            return None
        span_uuid = str(span_ids[-1])
    root = span_ids[0] if span_uuid in span_ids else span_uuid
    tree = _tree_and_parent(annotations, str(root))
    if tree is None:
        return None
    trace_id, parent_flags = tree
    flags = (parent_flags or 0) & ~TraceFlags.SAMPLED
    if sampler.sampled(trace_id, parent_flags):
        flags |= TraceFlags.SAMPLED
    span_id = ids.task_span_id(span_uuid, str(key))
    return remote_span_context(trace_id, span_id, flags)


def task_context(
    span_context: SpanContext, annotations: Mapping[str, Any] | None = None
) -> Context:
    """The OTel context a task runs in: the task's span, in the context the caller's
    propagated fields give (``carrier`` of the ``otel_spans`` annotation: baggage, and
    the tracestate when the task is in the caller's trace); without them the current
    context."""
    caller = annotations.get(semconv.ANNOTATION) if annotations else None
    carrier = caller.get(CARRIER_KEY) if isinstance(caller, Mapping) else None
    if not isinstance(carrier, Mapping) or not carrier:
        return context_with_span(span_context, None)
    fields = dict(carrier)
    traceparent = caller.get("traceparent") if isinstance(caller, Mapping) else None
    if isinstance(traceparent, str):
        fields.setdefault("traceparent", traceparent)
    base = propagation.extract(fields)
    if base is None:
        return context_with_span(span_context, None)
    caller_sc = get_current_span(base).get_span_context()
    if caller_sc.trace_id == span_context.trace_id and caller_sc.trace_state:
        sc = span_context
        span_context = SpanContext(
            sc.trace_id, sc.span_id, sc.is_remote, sc.trace_flags, caller_sc.trace_state
        )
    return context_with_span(span_context, base)
