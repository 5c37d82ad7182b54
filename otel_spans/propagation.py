"""The caller's context beyond its span: ``OTEL_PROPAGATORS``, through the OTel API.

otel-spans' own processes agree on ids through the W3C ``traceparent`` of the
``otel_spans`` task annotation (:mod:`otel_spans.traceparent`). What else the caller's
context holds (W3C ``tracestate``, ``baggage``, or another format's fields) travels as
the propagators configured for the process say: :func:`inject` fills the annotation's
``carrier`` on the client with ``opentelemetry.propagate``'s global propagator (built
from ``OTEL_PROPAGATORS``, default ``tracecontext,baggage``, unless the application set
its own), and the workers :func:`extract` it with theirs, so task code sees the caller's
baggage and the trace's tracestate.

The OTel API builds its global propagator when ``opentelemetry.propagate`` is first
imported, and raises there when ``OTEL_PROPAGATORS`` names one that is not installed
(``b3`` without its package). The variable is process-wide and may be meant for other
code: otel-spans then warns once and uses the propagators of the list that load, never
failing a scheduler, a worker or a client.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator

logger = logging.getLogger("otel_spans")

PROPAGATORS_ENV = "OTEL_PROPAGATORS"
#: Environment variables that carry a context into a process (the OTel specification's
#: environment carriers), by the W3C field each holds.
ENV_CARRIERS = {"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE", "baggage": "BAGGAGE"}
#: Most characters of carrier fields kept in an annotation (W3C limits baggage to 8192
#: bytes and tracestate to 32 members of at most 256 characters).
MAX_CARRIER_LENGTH = 16384

_fallback: TextMapPropagator | None = None
_fallback_lock = threading.Lock()


def textmap() -> TextMapPropagator:
    """The process's propagator: ``opentelemetry.propagate``'s global one."""
    try:
        from opentelemetry import propagate
    except Exception:  # OTEL_PROPAGATORS names a propagator that does not load
        return _loadable()
    return propagate.get_global_textmap()


def _loadable() -> TextMapPropagator:
    """The propagators of ``OTEL_PROPAGATORS`` that load, warned about once."""
    global _fallback
    with _fallback_lock:
        if _fallback is not None:
            return _fallback
        from importlib.metadata import entry_points

        loaded: list[TextMapPropagator] = []
        failed: list[str] = []
        for name in os.environ.get(PROPAGATORS_ENV, "").split(","):
            name = name.strip()
            if not name or name.lower() == "none":
                continue
            try:
                (entry,) = entry_points(group="opentelemetry_propagator", name=name)
                loaded.append(entry.load()())
            except Exception:
                failed.append(name)
        logger.warning(
            "otel-spans: ignoring %s: propagator %s not installed; using %s",
            PROPAGATORS_ENV,
            ", ".join(map(repr, failed)) or "(unknown)",
            ", ".join(type(p).__name__ for p in loaded) or "none",
        )
        _fallback = CompositePropagator(loaded)
        return _fallback


def inject(context: Context) -> dict[str, str]:
    """The fields the process's propagators write for ``context``; never raises."""
    carrier: dict[str, str] = {}
    try:
        textmap().inject(carrier, context=context)
    except Exception:
        logger.debug("otel-spans: a propagator failed to inject", exc_info=True)
        return {}
    return {str(k): str(v)[:MAX_CARRIER_LENGTH] for k, v in carrier.items() if isinstance(v, str)}


def extract(carrier: Mapping[str, object]) -> Context | None:
    """The context the process's propagators read from ``carrier`` (task annotation
    data: anything that is not a string field is ignored); None when nothing could."""
    items = tuple(
        sorted((k, v) for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str))
    )
    if not items:
        return None
    try:
        return _extract(textmap(), items)
    except Exception:
        logger.debug("otel-spans: a propagator failed to extract", exc_info=True)
        return None


@functools.lru_cache(maxsize=256)
def _extract(propagator: TextMapPropagator, items: tuple[tuple[str, str], ...]) -> Context:
    # Every task of a graph carries the same fields: one extraction per graph, not per
    # task. Contexts are immutable, so sharing one is safe.
    return propagator.extract(dict(items))


def env_context() -> Context:
    """The context of the ``TRACEPARENT``, ``TRACESTATE`` and ``BAGGAGE`` variables,
    read as the W3C formats they hold."""
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {
        field: os.environ[name].strip()
        for field, name in ENV_CARRIERS.items()
        if name in os.environ
    }
    w3c = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    return w3c.extract(carrier)
