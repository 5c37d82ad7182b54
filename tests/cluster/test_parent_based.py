"""Parent-based sampling and the W3C "remote" bit, as the OTel specification has them.

A workflow that joins a caller's trace follows the caller's sampled flag (an unsampled
caller: no span of the workflow leaves, its metrics do); a span whose parent or linked
span is the caller's says so in its OTLP flags (bit 9), every exported span says it is
sampled (bit 0), and spans with a parent of our own say "local" (bit 8 without 9).
"""

from __future__ import annotations

from typing import Any

import pytest
from distributed import span as dask_span

import otel_spans
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import FAST, await_until, cluster_test, stats, traced_cluster
from tests.support.tasks import inc

SAMPLED_TRACE, SAMPLED_SPAN = "a1" * 16, "b1" * 8
UNSAMPLED_TRACE, UNSAMPLED_SPAN = "a2" * 16, "b2" * 8
SAMPLED = f"00-{SAMPLED_TRACE}-{SAMPLED_SPAN}-01"
UNSAMPLED = f"00-{UNSAMPLED_TRACE}-{UNSAMPLED_SPAN}-00"

#: Span.flags / Link.flags: W3C sampled bit, "is-remote is known", "is remote"
SAMPLED_BIT, HAS_IS_REMOTE, IS_REMOTE = 0x01, 0x100, 0x200
LOCAL_PARENT = HAS_IS_REMOTE | SAMPLED_BIT
REMOTE_PARENT = HAS_IS_REMOTE | IS_REMOTE | SAMPLED_BIT


pytestmark = pytest.mark.usefixtures("default_otel_config")


def config(receiver: OtlpReceiver, **more: Any) -> dict[str, Any]:
    return {
        **FAST,
        "otel-spans.endpoint": receiver.grpc_endpoint,
        "otel-spans.metrics.interval": "200ms",
        "otel-spans.traces.tasks.mode": "all",  # every task run would be a span
        **more,
    }


def named(receiver: OtlpReceiver, name: str) -> ReceivedSpan | None:
    return next((s for s in receiver.spans() if s.name == name), None)


def span_tasks(receiver: OtlpReceiver, root: str) -> float:
    """The ``dask.span.tasks`` total of a workflow, from its metric series."""
    latest: dict[tuple[Any, ...], float] = {}
    for p in receiver.metrics():
        if p.name == "dask.span.tasks" and p.attributes.get("dask.span.root") == root:
            latest[tuple(sorted(p.attributes.items()))] = float(p.value)
    return sum(latest.values())


@cluster_test(90)
async def test_an_unsampled_callers_workflow_exports_metrics_but_no_span(
    otlp_receiver: OtlpReceiver,
) -> None:
    async with traced_cluster(config(otlp_receiver)) as (client, _, _):
        with otel_spans.span("followed", traceparent=SAMPLED), dask_span("inner"):
            assert await client.submit(inc, 1, key="inc-followed") == 2
        with otel_spans.span("not sampled", traceparent=UNSAMPLED):
            assert await client.gather(client.map(inc, [1, 2], key=["u-1", "u-2"])) == [2, 3]
        # the metrics of both workflows arrive; the unsampled one's spans never leave
        await await_until(lambda: span_tasks(otlp_receiver, "not sampled") == 2, 30)
        await await_until(lambda: named(otlp_receiver, "followed") is not None, 30)
        plugin_stats = await await_until(lambda: _counted(client, 2), 30)
        # the exemplar is written with the task's duration: wait for its export
        exemplars = await await_until(lambda: duration_exemplars(otlp_receiver), 30)
    # one Dask span and its one task group were not exported: counted, not lost
    assert plugin_stats["unsampled_spans"] == 2
    spans = otlp_receiver.spans()
    assert not [s for s in spans if s.trace_id == UNSAMPLED_TRACE]
    assert not [s for s in spans if s.attributes.get("dask.span.root") == "not sampled"]
    assert not [s for s in spans if str(s.attributes.get("dask.task.key", "")).startswith("u-")]
    # the sampled caller's workflow: in its trace, under its span, which is remote
    root = named(otlp_receiver, "followed")
    assert root is not None
    assert (root.trace_id, root.parent_span_id) == (SAMPLED_TRACE, SAMPLED_SPAN)
    assert root.flags == REMOTE_PARENT
    ours = [s for s in spans if s.trace_id == SAMPLED_TRACE and s.span_id != root.span_id]
    assert {s.name for s in ours} >= {"inner", "inc"}  # the Dask span, group and task
    assert all(s.flags == LOCAL_PARENT for s in ours), {(s.name, s.flags) for s in ours}
    # The duration histogram's exemplars: the design has one exported task run, the
    # followed workflow's inc-followed (every run is kept at once in mode "all"), so
    # exactly one exemplar, pointing at that span; the unsampled workflow's two runs
    # were never exported, so none at them. Catches: exemplars pointing at unexported
    # (unsampled) runs, and exemplars dropped altogether (a subset check alone passes
    # on none).
    (task,) = [s for s in spans if s.attributes.get("dask.task.key") == "inc-followed"]
    exemplars = duration_exemplars(otlp_receiver)  # everything received by now
    assert {(e["trace_id"], e["span_id"]) for e in exemplars} == {(SAMPLED_TRACE, task.span_id)}


def duration_exemplars(receiver: OtlpReceiver) -> list[dict[str, Any]]:
    """Every exemplar of ``dask.task.duration`` received (cumulative: repeated)."""
    return [e for p in receiver.metrics() if p.name == "dask.task.duration" for e in p.exemplars]


async def _counted(client: Any, unsampled: int) -> dict[str, Any] | None:
    current = await stats(client)
    return current if current.get("unsampled_spans") == unsampled else None


@cluster_test(90)
async def test_follow_caller_sampling_false_exports_every_workflow(
    otlp_receiver: OtlpReceiver,
) -> None:
    more = {"otel-spans.traces.follow-caller-sampling": False}
    async with traced_cluster(config(otlp_receiver, **more)) as (client, _, _):
        with otel_spans.span("not sampled", traceparent=UNSAMPLED):
            assert await client.submit(inc, 1, key="u-1") == 2
        root = await await_until(lambda: named(otlp_receiver, "not sampled"), 30)
        await await_until(lambda: named(otlp_receiver, "u"), 30)  # the task's span too
        assert (await stats(client)).get("unsampled_spans") == 0
    assert (root.trace_id, root.parent_span_id) == (UNSAMPLED_TRACE, UNSAMPLED_SPAN)
    # exported, so sampled: bit 0 says so whatever the caller sent
    assert root.flags == REMOTE_PARENT


@cluster_test(90)
async def test_links_to_the_caller_carry_its_flags_and_say_remote(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Link mode: the workflow has a trace of its own (a root: parent-based sampling has
    no parent to follow), linked to the caller's span with the caller's flags."""
    async with traced_cluster(config(otlp_receiver)) as (client, _, _):
        with otel_spans.span("linked", traceparent=UNSAMPLED, link=True):
            assert await client.submit(inc, 1, key="first-1") == 2
        with otel_spans.span("linked too", traceparent=SAMPLED, link=True):
            assert await client.submit(inc, 2, key="second-1") == 3
        unsampled = await await_until(lambda: named(otlp_receiver, "linked"), 30)
        sampled = await await_until(lambda: named(otlp_receiver, "linked too"), 30)
    for root, (trace, span_id, flags) in (
        (unsampled, (UNSAMPLED_TRACE, UNSAMPLED_SPAN, 0x00)),
        (sampled, (SAMPLED_TRACE, SAMPLED_SPAN, SAMPLED_BIT)),
    ):
        assert root.parent_span_id == "" and root.trace_id != trace
        assert root.flags == LOCAL_PARENT  # no parent: bit 9 clear
        (link,) = root.links
        assert (link.trace_id, link.span_id) == (trace, span_id)
        assert link.flags == HAS_IS_REMOTE | IS_REMOTE | flags
