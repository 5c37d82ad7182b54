"""One sampling decision per trace, and the caller's baggage and tracestate, on a cluster.

In-process workers run the worker plugin with traces exporter ``none`` (no global
TracerProvider is set in the test process): task code reports the context it runs in,
and the scheduler's export says what it decided. Both must agree on every trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dask
import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

import otel_spans
from otel_spans import semconv
from otel_spans.sampler import TraceSampler
from otel_spans.worker import OtelSpansWorkerPlugin
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster

CALLER_TRACE, CALLER_SPAN = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
STATE = TraceState([("vendor", "abc")])
WORKFLOWS = 24


def task_context_seen() -> dict[str, Any]:
    """What task code sees of its OTel context."""
    sc = trace.get_current_span().get_span_context()
    return {
        "trace_id": f"{sc.trace_id:032x}",
        "sampled": sc.trace_flags.sampled,
        "tracestate": sc.trace_state.to_header(),
        "baggage": dict(baggage.get_all()),
    }


@pytest.fixture
def caller() -> Iterator[None]:
    """Client code under a sampled caller span with a tracestate, and baggage."""
    sc = SpanContext(CALLER_TRACE, CALLER_SPAN, True, TraceFlags(1), STATE)
    ctx = baggage.set_baggage("tenant", "acme", trace.set_span_in_context(NonRecordingSpan(sc)))
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


async def with_worker_plugin(client: Any) -> None:
    with dask.config.set({"otel-spans.traces.exporter": "none"}):
        await client.register_plugin(OtelSpansWorkerPlugin())


@cluster_test(90)
async def test_task_code_sees_the_callers_baggage_and_tracestate(
    otlp_receiver: OtlpReceiver, caller: None
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client = cluster.client
        await with_worker_plugin(client)
        with otel_spans.span("joined"):
            joined = await client.submit(task_context_seen, key="joined-1")
        with otel_spans.span("linked", link=True):
            linked = await client.submit(task_context_seen, key="linked-1")
    assert joined == {
        "trace_id": f"{CALLER_TRACE:032x}",
        "sampled": True,
        "tracestate": "vendor=abc",
        "baggage": {"tenant": "acme"},
    }
    # a trace of its own: the caller's baggage, not its trace's tracestate
    assert linked["trace_id"] != f"{CALLER_TRACE:032x}"
    assert (linked["tracestate"], linked["baggage"]) == ("", {"tenant": "acme"})


@pytest.mark.parametrize("sampler", ["traceidratio", "always_off", "parentbased_always_off"])
@cluster_test(120)
async def test_the_scheduler_and_task_code_make_one_decision_per_trace(
    otlp_receiver: OtlpReceiver, sampler: str
) -> None:
    """Workflows of their own traces: the scheduler exports exactly those whose task
    code ran in a sampled context, and that is the sampler's decision."""
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.traces.sampler": sampler,
        "otel-spans.traces.sampler-arg": 0.5,
        "otel-spans.traces.tasks.mode": "all",
    }
    async with traced_cluster(config) as cluster:
        client = cluster.client
        await with_worker_plugin(client)
        seen: dict[str, dict[str, Any]] = {}
        for i in range(WORKFLOWS):
            with otel_spans.span(f"w{i}"):
                seen[f"w{i}"] = await client.submit(task_context_seen, key=f"t{i}-1")
        sampled = {name for name, got in seen.items() if got["sampled"]}
        # every Dask span and task group of the others is left out, and counted
        unsampled = 2 * (WORKFLOWS - len(sampled))
        await await_until(lambda: _unsampled(client, unsampled), 30)
        roots = {f"w{i}" for i in range(WORKFLOWS)}
        await await_until(lambda: exported_roots(otlp_receiver) >= sampled, 30)
        started = await await_until(lambda: started_flags(otlp_receiver), 30)
    assert exported_roots(otlp_receiver) == sampled
    decide = TraceSampler(sampler, 0.5)  # type: ignore[arg-type]
    assert sampled == {n for n in roots if decide.sampled(int(seen[n]["trace_id"], 16))}
    if sampler == "traceidratio":  # the design: about half of 24, not none or all
        assert 4 <= len(sampled) <= 20
    else:
        assert sampled == set()
    # no span of an unsampled trace left the scheduler (task runs included)
    exported_traces = {s.trace_id for s in otlp_receiver.spans()}
    assert exported_traces == {seen[n]["trace_id"] for n in sampled}
    # each workflow's "started" log record says in its W3C flags what was decided
    assert started == {seen[n]["trace_id"]: int(n in sampled) for n in roots}


def started_flags(receiver: OtlpReceiver) -> dict[str, int] | None:
    """Trace id -> flags of the ``dask.span.started`` records, once all have arrived."""
    flags = {
        log.trace_id: log.flags
        for log in receiver.logs()
        if log.event_name == semconv.LOG_SPAN_STARTED
    }
    return flags if len(flags) == WORKFLOWS else None


def exported_roots(receiver: OtlpReceiver) -> set[str]:
    return {s.name for s in receiver.spans() if s.parent_span_id in ("", None)}


async def _unsampled(client: Any, expected: int) -> bool:
    return (await stats(client)).get("unsampled_spans") == expected
