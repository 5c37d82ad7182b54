"""``OTEL_PROPAGATORS``: the caller's tracestate and baggage travel to task code.

The client's propagators (``opentelemetry.propagate``) write the ``carrier`` of the
``otel_spans`` annotation; a worker reads it with its own into the context the task
runs in (``task_trace.task_context``, what the worker plugin attaches).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from otel_spans import semconv
from otel_spans.context import caller_annotation
from otel_spans.task_trace import CARRIER_KEY, task_context, task_span_context
from tests.support.fresh_python import fresh_python

ROOT = Path(__file__).resolve().parents[2]
CALLER_TRACE, CALLER_SPAN = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
STATE = TraceState([("vendor", "abc"), ("other", "x1")])
TRACEPARENT = f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"


@pytest.fixture
def caller() -> Iterator[None]:
    """Code running under a caller's span that has a tracestate, with baggage set."""
    sc = SpanContext(CALLER_TRACE, CALLER_SPAN, True, TraceFlags(1), STATE)
    ctx = trace.set_span_in_context(NonRecordingSpan(sc))
    ctx = baggage.set_baggage("tenant", "acme", ctx)
    ctx = baggage.set_baggage("request.id", "r-42", ctx)
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def run_task(annotation: dict[str, Any]) -> otel_context.Context:
    """The context a worker runs a task of root Dask span ``root`` in (a worker's
    context holds nothing of the caller's)."""
    annotations = {"span": {"name": ("w",), "ids": ("root",)}, semconv.ANNOTATION: annotation}
    sc = task_span_context("x-1", annotations, "root")
    assert sc is not None
    worker = otel_context.attach(otel_context.Context())
    try:
        return task_context(sc, annotations)
    finally:
        otel_context.detach(worker)


def test_the_default_propagators_carry_tracestate_and_baggage(caller: None) -> None:
    annotation = caller_annotation()
    assert annotation is not None
    assert annotation["traceparent"] == TRACEPARENT  # otel-spans' own, as before
    assert annotation[CARRIER_KEY] == {
        "tracestate": "vendor=abc,other=x1",
        "baggage": "tenant=acme,request.id=r-42",
    }
    ctx = run_task(annotation)
    assert baggage.get_all(ctx) == {"tenant": "acme", "request.id": "r-42"}
    task_span = trace.get_current_span(ctx).get_span_context()
    assert task_span.trace_id == CALLER_TRACE and task_span.span_id != CALLER_SPAN
    assert task_span.trace_state == STATE


def test_a_linked_workflow_gets_the_baggage_but_not_the_callers_tracestate(
    caller: None,
) -> None:
    """With ``link`` the tree has a trace of its own: tracestate belongs to the caller's."""
    annotation = caller_annotation(link=True)
    assert annotation is not None and annotation["link"] is True
    ctx = run_task(annotation)
    task_span = trace.get_current_span(ctx).get_span_context()
    assert task_span.trace_id != CALLER_TRACE
    assert len(task_span.trace_state) == 0
    assert baggage.get_all(ctx) == {"tenant": "acme", "request.id": "r-42"}


def test_no_propagators_carry_nothing_but_the_traceparent(
    caller: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OTEL_PROPAGATORS=none`` (what the API builds for it): the annotation carries the
    ids otel-spans needs, nothing else; task code gets no baggage."""
    monkeypatch.setattr(propagate, "_HTTP_TEXT_FORMAT", CompositePropagator([]))
    annotation = caller_annotation()
    assert annotation == {"traceparent": TRACEPARENT, "link": False}
    assert baggage.get_all(run_task(annotation)) == {}


def test_without_a_carrier_the_task_context_is_the_span_alone() -> None:
    ctx = run_task({"traceparent": TRACEPARENT, "link": False})
    assert baggage.get_all(ctx) == {}
    assert trace.get_current_span(ctx).get_span_context().trace_id == CALLER_TRACE


@pytest.mark.parametrize(
    "carrier", [{"baggage": 5}, {1: "x"}, "baggage=a", {"baggage": "%%%,=,"}, {"tracestate": "="}]
)
def test_a_malformed_carrier_is_ignored(carrier: Any) -> None:
    """Annotations are data sent by a client: nothing in them may fail a task."""
    ctx = run_task({"traceparent": TRACEPARENT, "link": False, CARRIER_KEY: carrier})
    assert trace.get_current_span(ctx).get_span_context().trace_id == CALLER_TRACE


def test_the_environment_carriers_are_read_with_traceparent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``TRACEPARENT``'s companions ``TRACESTATE`` and ``BAGGAGE`` travel with it."""
    monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
    monkeypatch.setenv("TRACESTATE", "vendor=abc")
    monkeypatch.setenv("BAGGAGE", "job=nightly")
    annotation = caller_annotation()
    assert annotation is not None
    assert annotation[CARRIER_KEY] == {"tracestate": "vendor=abc", "baggage": "job=nightly"}


def test_a_propagator_that_is_not_installed_never_fails_and_is_warned_about() -> None:
    """The OTel API raises on import for an unknown name in OTEL_PROPAGATORS; otel-spans
    warns once and uses the names of the list that load."""
    code = (
        "import json, otel_spans\n"
        "from opentelemetry import baggage, context, trace\n"
        "from otel_spans.context import caller_annotation\n"
        f"sc = trace.SpanContext({CALLER_TRACE}, {CALLER_SPAN}, True, trace.TraceFlags(1),"
        " trace.TraceState([('v', '1')]))\n"
        "ctx = trace.set_span_in_context(trace.NonRecordingSpan(sc))\n"
        "ctx = baggage.set_baggage('k', 'v', ctx)\n"
        "context.attach(ctx)\n"
        "print(json.dumps(caller_annotation()))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OTEL_PROPAGATORS": "tracecontext,no_such_propagator",
    }
    proc = fresh_python(code, env=env, timeout=120)
    annotation = json.loads(proc.stdout.splitlines()[-1])
    assert annotation[CARRIER_KEY] == {"tracestate": "v=1"}  # tracecontext only: no baggage
    assert "ignoring OTEL_PROPAGATORS" in proc.stderr
    assert "'no_such_propagator'" in proc.stderr
