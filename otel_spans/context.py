"""Trace context across the whole path: caller → Dask spans → code running in tasks.

The wire format everywhere is a W3C ``traceparent`` string
(``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``). From a client it travels as
the Dask task annotation ``otel_spans = {"traceparent": ..., "link": bool}``, which
:func:`span` (``distributed.span`` plus that annotation) and :func:`annotate_context`
add; plain ``distributed.span`` carries no caller context.

Which trace a Dask span tree belongs to (the rule every process applies to a task's
annotations, :func:`tree_trace`): the caller's trace when the annotation says
``link: false``, otherwise ``ids.workflow_trace_id(<root Dask span uuid>)``. For this
to give one answer for a whole tree, an annotation added *inside* an existing Dask span
never contradicts the tree: its ``link`` is set to whether the new caller lives in
another trace, whatever the caller asked for (see :func:`caller_annotation`).

Worker side, :mod:`otel_spans.worker` makes the task's span the current OTel span
while the task runs (an OTel context variable, not an annotation: task code sees
Dask's annotations unchanged), so :func:`caller_traceparent`, :func:`current_context`
and :class:`TraceContextFilter` see it like any other span.
"""

from __future__ import annotations

import functools
import getpass
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import dask.config
from dask.base import annotate, get_annotations
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_spans import ids, semconv
from otel_spans.config import caller_link_default, format_trace_url, trace_url_template
from otel_spans.records import workflow_attributes

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

#: Environment variable carrying a traceparent into a process (the OTel convention for
#: environment variables as context carriers, e.g. set by a CI job or a batch launcher).
TRACEPARENT_ENV = "TRACEPARENT"
#: dask.config key read on the client when ``link`` is not given: true makes each root
#: Dask span its own trace with a span link to the caller. Pending in otel-spans.yaml.
CALLER_LINK_KEY = "otel-spans.traces.caller-link"
#: A logging format showing the ids :class:`TraceContextFilter` adds.
LOG_FORMAT = (
    "%(asctime)s %(levelname)s %(name)s "
    "[trace_id=%(otelTraceID)s span_id=%(otelSpanID)s] %(message)s"
)

# Version 00 has exactly these four fields; W3C requires lowercase hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACEPARENT_LENGTH = 55


# -- the wire format -----------------------------------------------------------------------
def parse_traceparent(text: object) -> tuple[int, int, int] | None:
    """``(trace_id, span_id, flags)`` of a valid W3C traceparent, else None.

    Strict: version ``00``, lowercase hex, non-zero ids, nothing around it. Never
    raises, whatever ``text`` is: annotations and environment variables are data.
    """
    if not isinstance(text, str) or len(text) != _TRACEPARENT_LENGTH:
        return None
    match = _TRACEPARENT.fullmatch(text)
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(match[3], 16)


def format_traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    """The W3C traceparent of a span; ValueError for ids OTel calls invalid."""
    if not 0 < trace_id < 1 << 128:
        raise ValueError(f"trace_id {trace_id!r} is not a non-zero 128-bit integer")
    if not 0 < span_id < 1 << 64:
        raise ValueError(f"span_id {span_id!r} is not a non-zero 64-bit integer")
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def traceparent_of(span_context: SpanContext) -> str:
    """The traceparent of a valid span context, its flags kept as they are."""
    sc = span_context
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"


def _span_context(trace_id: int, span_id: int, flags: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))


def sampled(span_context: SpanContext) -> SpanContext:
    """The same span context with the W3C sampled flag set."""
    sc = span_context
    flags = TraceFlags(sc.trace_flags | TraceFlags.SAMPLED)
    return SpanContext(sc.trace_id, sc.span_id, sc.is_remote, flags, sc.trace_state)


def _context_of(span_context: SpanContext, base: Context | None) -> Context:
    return trace.set_span_in_context(NonRecordingSpan(span_context), base)


# -- reading the current context ---------------------------------------------------------------
def env_traceparent() -> str | None:
    """``TRACEPARENT`` from the environment when it holds a valid traceparent."""
    text = os.environ.get(TRACEPARENT_ENV, "").strip()
    return text if parse_traceparent(text) else None


def caller_traceparent() -> str | None:
    """The traceparent work submitted from here should hang under, if any.

    The active OTel span when it is valid and either recording or remote (inside a
    Dask task, the task's span, which is remote); otherwise ``TRACEPARENT`` from the
    environment; otherwise None.
    """
    current = trace.get_current_span()
    sc = current.get_span_context()
    if sc.is_valid and (sc.is_remote or current.is_recording()):
        return traceparent_of(sc)
    return env_traceparent()


def current_context() -> Context:
    """The OTel context of the code running now; inside a Dask task, the task's.

    Implicit propagation follows contextvars: into the task's thread, ``secede`` and
    ``worker_client`` included, but not into threads or processes the task starts
    itself. Hand this (or :func:`current_traceparent`) over explicitly, e.g.
    ``opentelemetry.context.attach(ctx)`` in a thread of your own.
    """
    return otel_context.get_current()


def current_traceparent() -> str | None:
    """:func:`current_context` as a traceparent string, to cross a process boundary.

    In the other process, ``context_from_traceparent(text)`` gives the context to pass
    as ``context=`` to ``start_span`` (or to ``opentelemetry.context.attach``).
    """
    sc = trace.get_current_span().get_span_context()
    return traceparent_of(sc) if sc.is_valid else None


def context_from_traceparent(text: str | None) -> Context:
    """An OTel context whose current span is the (remote) span ``text`` names.

    An empty context when ``text`` is None or not a valid traceparent, as OTel
    propagators do with a bad header: spans started in it become roots.
    """
    parsed = parse_traceparent(text)
    if parsed is None:
        return Context()
    return _context_of(_span_context(*parsed), Context())


# -- which trace a Dask span tree belongs to -------------------------------------------------
def _span_ids(annotations: Mapping[str, Any]) -> Sequence[str]:
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
    span_ids = _span_ids(annotations)
    return _tree_of(annotations, span_ids[0] if span_ids else None)


def _tree_of(annotations: Mapping[str, Any], root_uuid: str | None) -> tuple[int, int] | None:
    caller = annotations.get(semconv.ANNOTATION)
    # A missing "link" means false, as on the scheduler: both must pick the same trace.
    if isinstance(caller, Mapping) and not caller.get("link", False):
        parsed = parse_traceparent(caller.get("traceparent"))
        if parsed is not None:
            return parsed[0], parsed[2]
    if root_uuid is None:
        return None
    return _root_trace_id(str(root_uuid)), TraceFlags.SAMPLED


def task_span_context(
    key: object, annotations: Mapping[str, Any], span_uuid: str | None = None
) -> SpanContext | None:
    """The span context of a running task's OTel span, or None when it has none.

    ``span_id = ids.task_run_span_id(<its Dask span uuid>, str(key), 1)``, the id the
    scheduler gives the task's span; remote, because the scheduler exports it.
    ``span_uuid`` is the Dask span the scheduler put the task in (the worker's
    ``TaskState.span_id``); without it, the last of the ``span`` annotation's ids. The
    root of its tree is the first of those ids when the span is among them; a task
    outside them (no ``span`` annotation) is in Dask's default span, a root of its own.
    """
    span_ids = _span_ids(annotations)
    if span_uuid is None:
        if not span_ids:
            return None
        span_uuid = str(span_ids[-1])
    root = span_ids[0] if span_uuid in span_ids else span_uuid
    tree = _tree_of(annotations, str(root))
    if tree is None:
        return None
    span_id = ids.task_run_span_id(span_uuid, str(key), 1)
    return _span_context(tree[0], span_id, tree[1])


def task_context(span_context: SpanContext) -> Context:
    """The OTel context a task runs in: the current one with the task's span in it."""
    return _context_of(span_context, None)


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
    if traceparent is None:
        text = caller_traceparent()
        parsed = parse_traceparent(text)
    else:
        text, parsed = traceparent, parse_traceparent(traceparent)
        if parsed is None:
            raise ValueError(
                f"traceparent {traceparent!r} is not a valid W3C traceparent "
                "(00-<32 lowercase hex>-<16 lowercase hex>-<2 hex>, non-zero ids)"
            )
    if text is None or parsed is None:
        return None
    current = get_annotations()
    if not _span_ids(current):
        as_link = caller_link_default() if link is None else bool(link)
    else:
        tree = tree_trace(current)
        as_link = tree is not None and parsed[0] != tree[0]
    return {"traceparent": text, "link": as_link}


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
            _remember(span_id, tree[0], str(_span_ids(get_annotations())[0]))
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
    span_ids = _span_ids(annotations)
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
