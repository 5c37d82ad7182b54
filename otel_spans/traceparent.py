"""W3C ``traceparent`` strings and the OTel contexts they stand for.

The wire format everywhere is a W3C ``traceparent`` string
(``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``): in the task annotation, in
the ``TRACEPARENT`` environment variable, across a process boundary. Its own module
because parsing and formatting it, and reading the context code runs in, are needed by
the client (:mod:`otel_spans.context`), the workers (:mod:`otel_spans.task_trace`) and
the scheduler (:mod:`otel_spans.scheduler.callers`) alike, and depend on nothing but
the OTel API.
"""

from __future__ import annotations

import os
import re

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

#: Environment variable carrying a traceparent into a process (the OTel convention for
#: environment variables as context carriers, e.g. set by a CI job or a batch launcher).
TRACEPARENT_ENV = "TRACEPARENT"

# Version 00 has exactly these four fields; W3C requires lowercase hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACEPARENT_LENGTH = 55


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


def remote_span_context(trace_id: int, span_id: int, flags: int) -> SpanContext:
    """A remote span context: one exported by another process (the scheduler, a caller)."""
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))


def sampled(span_context: SpanContext) -> SpanContext:
    """The same span context with the W3C sampled flag set."""
    sc = span_context
    flags = TraceFlags(sc.trace_flags | TraceFlags.SAMPLED)
    return SpanContext(sc.trace_id, sc.span_id, sc.is_remote, flags, sc.trace_state)


def context_with_span(span_context: SpanContext, base: Context | None) -> Context:
    """``base`` (None: the current context) with ``span_context`` as its current span."""
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
    found = caller_context()
    return None if found is None else found[0]


def caller_context() -> tuple[str, Context | None] | None:
    """:func:`caller_traceparent` and the context it comes from: the current one, or
    None when it comes from ``TRACEPARENT`` (whose companions ``TRACESTATE`` and
    ``BAGGAGE`` the caller reads with :func:`otel_spans.propagation.env_context`)."""
    current = trace.get_current_span()
    sc = current.get_span_context()
    if sc.is_valid and (sc.is_remote or current.is_recording()):
        return traceparent_of(sc), otel_context.get_current()
    text = env_traceparent()
    return None if text is None else (text, None)


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
    return context_with_span(remote_span_context(*parsed), Context())
