"""Trace context across the whole path: caller → Dask spans → code running in tasks.

The client's side, and the public surface of the others: a caller's context travels as
the Dask task annotation ``otel_spans = {"traceparent": ..., "link": bool}``, which
:func:`span` (``distributed.span`` plus that annotation) and :func:`annotate_context`
add; plain ``distributed.span`` carries no caller context. The ``traceparent`` wire
format and reading the current context are :mod:`otel_spans.traceparent`'s, which trace
a Dask span tree belongs to :mod:`otel_spans.task_trace`'s; their public names are
re-exported here.

For the tree's trace (:func:`tree_trace`) to give one answer for a whole tree, an
annotation added *inside* an existing Dask span never contradicts the tree: its
``link`` is set to whether the new caller lives in another trace, whatever the caller
asked for (see :func:`caller_annotation`).

Worker side, :mod:`otel_spans.worker` makes the task's span the current OTel span
while the task runs (an OTel context variable, not an annotation: task code sees
Dask's annotations unchanged), so :func:`caller_traceparent`, :func:`current_context`
and :class:`TraceContextFilter` see it like any other span.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dask.config
from dask.base import annotate, get_annotations
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

from otel_spans import ids, propagation, semconv
from otel_spans.config import caller_link_default, format_trace_url, trace_url_template
from otel_spans.records import workflow_attributes
from otel_spans.task_trace import CARRIER_KEY, dask_span_ids, task_span_context, tree_trace
from otel_spans.traceparent import (
    TRACEPARENT_ENV,
    caller_context,
    caller_traceparent,
    context_from_traceparent,
    context_with_span,
    current_context,
    current_traceparent,
    format_traceparent,
    parse_traceparent,
    remote_span_context,
)

__all__ = [
    "CALLER_LINK_KEY",
    "LOG_FORMAT",
    "TRACEPARENT_ENV",
    "TraceContextFilter",
    "annotate_context",
    "caller_annotation",
    "caller_traceparent",
    "context_from_traceparent",
    "current_context",
    "current_traceparent",
    "format_traceparent",
    "parse_traceparent",
    "span",
    "task_span_context",
    "tree_trace",
]

#: dask.config key read on the client when ``link`` is not given: true makes each root
#: Dask span its own trace with a span link to the caller. Pending in otel-spans.yaml.
CALLER_LINK_KEY = "otel-spans.traces.caller-link"
#: A logging format showing the ids :class:`TraceContextFilter` adds.
LOG_FORMAT = (
    "%(asctime)s %(levelname)s %(name)s "
    "[trace_id=%(otelTraceID)s span_id=%(otelSpanID)s] %(message)s"
)


# -- the annotation -----------------------------------------------------------------------
def caller_annotation(
    traceparent: str | None = None, link: bool | None = None
) -> dict[str, Any] | None:
    """The ``otel_spans`` annotation for tasks submitted here, or None without a caller.

    ``traceparent`` defaults to :func:`caller_traceparent`; an explicit one must be
    valid (ValueError otherwise). ``link`` (default: the ``CALLER_LINK_KEY`` setting)
    only decides for a root Dask span, i.e. when no Dask span is open here. Inside one
    (nested spans, code in a task) the tree's trace is already decided, so ``link`` is
    whether the caller lives in another trace: false makes the new Dask span a child of
    the caller in the same trace, true links to it. Either way every task of a tree
    keeps naming the tree's trace (:func:`tree_trace`).
    """
    context: Context | None
    if traceparent is None:
        found = caller_context()
        text, context = found if found is not None else (None, None)
        if found is not None and context is None:  # from TRACEPARENT
            context = propagation.env_context()
        parsed = parse_traceparent(text)
    else:
        text, parsed = traceparent, parse_traceparent(traceparent)
        if parsed is None:
            raise ValueError(
                f"traceparent {traceparent!r} is not a valid W3C traceparent "
                "(00-<32 lowercase hex>-<16 lowercase hex>-<2 hex>, non-zero ids)"
            )
        # the caller's span as given, with what else the current context carries
        context = context_with_span(remote_span_context(*parsed), otel_context.get_current())
    if text is None or parsed is None:
        return None
    current = get_annotations()
    if not dask_span_ids(current):
        as_link = caller_link_default() if link is None else bool(link)
    else:
        tree = tree_trace(current)
        as_link = tree is not None and parsed[0] != tree[0]
    annotation: dict[str, Any] = {"traceparent": text, "link": as_link}
    # What else the context holds (tracestate, baggage...), as OTEL_PROPAGATORS says;
    # the traceparent is there already.
    carrier = propagation.inject(context) if context is not None else {}
    if carrier.get("traceparent") == text:
        del carrier["traceparent"]
    if carrier:
        annotation[CARRIER_KEY] = carrier
    return annotation


@contextmanager
def annotate_context(
    traceparent: str | None = None,
    link: bool | None = None,
    attributes: Mapping[str, str | bool | int | float] | None = None,
) -> Iterator[str | None]:
    """Annotate tasks submitted inside with the caller's context; yields the traceparent.

    Only the annotation: keep plain ``distributed.span`` inside it. ``attributes`` (see
    :func:`span`) are added to those of an enclosing annotation; ValueError when they
    are not valid. A no-op (yielding None) when there is no caller context and no
    attributes. See :func:`caller_annotation`.
    """
    annotation: dict[str, Any] = caller_annotation(traceparent, link) or {}
    outer = get_annotations().get(semconv.ANNOTATION)
    outer = outer if isinstance(outer, Mapping) else {}
    if attributes is not None:
        merged = dict(outer.get("attributes") or {})
        merged.update(workflow_attributes(dict(attributes)))
        annotation["attributes"] = dict(workflow_attributes(merged))
        user = _os_user()
        if user:
            annotation["user"] = user
    elif annotation:
        # This annotation replaces the enclosing one on the tasks submitted inside:
        # what that one said about the workflow must still reach the scheduler.
        for inherited in ("attributes", "user"):
            if inherited in outer:
                annotation[inherited] = outer[inherited]
    if not annotation:
        yield None
        return
    with annotate(**{semconv.ANNOTATION: annotation}):
        yield annotation.get("traceparent")


def _os_user() -> str | None:
    """The client's OS user, recorded on the workflow's root span; None if unknown."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment or the password database
        return None


@contextmanager
def span(
    *tags: str,
    link: bool | None = None,
    traceparent: str | None = None,
    attributes: Mapping[str, str | bool | int | float] | None = None,
) -> Iterator[str]:
    """``distributed.span`` that also carries the caller's trace context to the cluster.

    Yields the Dask span id and nests exactly like ``distributed.span``. When an OTel
    span is active here (or ``traceparent`` is given, or ``TRACEPARENT`` is set), the
    tasks submitted inside are annotated so the root Dask span becomes a child of it
    in its trace, or with ``link=True`` a trace of its own linked to it.

    ``attributes`` (``{"team": "risk", "pipeline": "nightly"}``) go on every Dask span
    of the workflow, with the client's OS user on its root: who ran it, on a shared
    cluster. Names outside ``dask.`` and ``otel_spans.``, values strings, booleans,
    integers or floats, at most 32 (ValueError otherwise, here, before anything runs).
    """
    from distributed import span as dask_span

    with annotate_context(traceparent, link, attributes), dask_span(*tags) as span_id:
        tree = tree_trace(get_annotations())
        if tree is not None:
            _remember(span_id, tree[0], str(dask_span_ids(get_annotations())[0]))
        yield span_id


# -- the trace of a workflow, known on the client at once --------------------------------
#: Dask span id -> (trace id, root Dask span id) of spans opened here with :func:`span`,
#: so that their trace is still known after the ``with`` block (bounded: newest kept).
_OPENED: dict[str, tuple[int, str]] = {}
_OPENED_MAX = 1024


def _remember(span_id: str, trace_id: int, root_id: str) -> None:
    _OPENED[span_id] = (trace_id, root_id)
    while len(_OPENED) > _OPENED_MAX:
        del _OPENED[next(iter(_OPENED))]


def _trace_of(span_id: str | None) -> tuple[int, str] | None:
    if span_id is not None and span_id in _OPENED:
        return _OPENED[span_id]
    annotations = get_annotations()
    span_ids = dask_span_ids(annotations)
    if span_ids and (span_id is None or span_id in span_ids):
        tree = tree_trace(annotations)
        if tree is not None:
            return tree[0], str(span_ids[0])
    if span_id is None:
        return None
    return ids.workflow_trace_id(span_id), span_id  # taken as a root's id


def trace_id(span_id: str | None = None) -> str | None:
    """The W3C trace id (32 lowercase hex) of a workflow, on the client, before it runs.

    Without ``span_id``: the Dask span open here (inside :func:`span` or
    ``distributed.span``); None outside any. With ``span_id``: a span opened here with
    :func:`span` (remembered after its block), or else the id of a root Dask span.
    The scheduler exports the workflow's spans in exactly that trace.
    """
    found = _trace_of(span_id)
    return None if found is None else f"{found[0]:032x}"


def trace_url(span_id: str | None = None) -> str | None:
    """The workflow's trace link from ``otel-spans.trace-url`` (None when not set, or
    outside any Dask span); see :func:`trace_id` for ``span_id``."""
    template = trace_url_template(dask.config.get("otel-spans.trace-url", None))
    found = _trace_of(span_id)
    if template is None or found is None:
        return None
    return format_trace_url(template, found[0], ids.dask_span_id(found[1]))


# -- logging ------------------------------------------------------------------------------
class TraceContextFilter(logging.Filter):
    """Adds ``otelTraceID``, ``otelSpanID`` and ``otelTraceSampled`` to log records.

    The names of ``opentelemetry-instrumentation-logging``, so formats written for it
    work unchanged ("0" outside any span). Attach it to a *handler* (a logger's filter
    only sees records logged on that very logger) and use e.g. :data:`LOG_FORMAT`::

        handler.addFilter(otel_spans.TraceContextFilter())
        handler.setFormatter(logging.Formatter(otel_spans.LOG_FORMAT))

    Inside a Dask task the ids are the task span's, or those of a span the task started.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        sc = trace.get_current_span().get_span_context()
        if sc.is_valid:
            record.otelTraceID = f"{sc.trace_id:032x}"
            record.otelSpanID = f"{sc.span_id:016x}"
            record.otelTraceSampled = sc.trace_flags.sampled
        else:
            record.otelTraceID = record.otelSpanID = "0"
            record.otelTraceSampled = False
        return True
