"""The fixed caps of what one exported span carries (docs/telemetry.md), each driven
past its bound: the output holds exactly the bound, and the overflow is counted where
the docs say it is (nothing is cut uncounted).

* ``dask.transition`` events: at most 50 per erred task (its last transitions, the one
  into ``erred`` included; the rest, and entries of a shape not known, counted in OTLP's
  ``dropped_events_count``), each with at most 16 recommendations (the rest counted in
  ``dask.transition.recommendations_dropped``);
* ``dask.cluster.nthreads`` events on a root: at most 256, the rest counted in
  ``dropped_events_count``;
* ``dask.task.dependencies``: at most 32 keys, the rest counted in
  ``dask.task.dependencies_dropped``;
* task-group links: at most 128, the rest counted in OTLP's ``dropped_links_count``;
* ``dask.task_group.workers``: saturates at 10 000; runs on further workers counted in
  ``dask.task_group.workers_uncounted_runs``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from distributed import Event, span, wait
from distributed.metrics import time
from distributed.scheduler import TaskGroup, TaskPrefix, TaskState
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from otel_spans import semconv
from otel_spans.config import RecordLimits
from otel_spans.export import wire
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.scheduler.task_groups import TaskGroups
from otel_spans.task_records import GroupRecord, TaskRecord
from otel_spans.telemetry.traces import group_span, task_spans
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import await_until, cluster_test, traced_cluster
from tests.support.tasks import wait_for

pytestmark = pytest.mark.usefixtures("default_otel_config")

#: The documented caps.
STORY_EVENTS = 50
RECOMMENDATIONS = 16
NTHREADS_EVENTS = 256
DEPENDENCIES = 32
LINKS = 128
WORKERS = 10_000


def raw_spans(receiver: OtlpReceiver) -> list[ProtoSpan]:
    """Every span received, as the protobuf (with its dropped_* counts)."""
    out: list[ProtoSpan] = []
    for request in receiver.requests("traces"):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                out.extend(scope_spans.spans)
    return out


def strings(span: ProtoSpan | Any, key: str) -> list[str]:
    for kv in span.attributes:
        if kv.key == key:
            return [v.string_value for v in kv.value.array_value.values]
    raise KeyError(key)


def attribute(span: ProtoSpan | Any, key: str) -> Any:
    for kv in span.attributes:
        if kv.key == key:
            value = kv.value
            return getattr(value, value.WhichOneof("value"))
    raise KeyError(key)


def fail(x: int) -> int:
    raise ValueError(f"failed on {x}")


def ignore(*args: Any) -> int:
    return len(args)


# -- transitions of an erred task -----------------------------------------------------------
@cluster_test(90)
async def test_an_erred_task_keeps_its_last_50_transitions_and_16_recommendations_each(
    otlp_receiver: OtlpReceiver,
) -> None:
    """30 retries give the key over 60 transitions; the one into ``erred`` recommends
    its 20 dependents erred. Keeping the first 50 transitions would lose the one into
    ``erred``; no cap would give them all; 20 recommendations fail the second bound.
    What is left out is counted exactly: the older transitions in
    ``dropped_events_count``, the 4 recommendations on their event."""
    dependents = 20
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint}
    async with traced_cluster(config) as (client, scheduler, _):
        with span("stories"):
            bad = client.submit(fail, 0, key="bad-0", retries=30)
            futures = [client.submit(ignore, bad, key=f"dep-{i}") for i in range(dependents)]
            await wait(futures)
        story = [e for e in scheduler.story("bad-0") if e[0] == "bad-0"]

        def erred_span() -> list[ProtoSpan]:
            return [
                s
                for s in raw_spans(otlp_receiver)
                if s.name == "bad" and any(e.name == semconv.EVENT_TRANSITION for e in s.events)
            ]

        (task,) = await await_until(erred_span, 30, "no erred task span")
    assert len(story) > STORY_EVENTS + 10  # the workload's precondition
    transitions = [e for e in task.events if e.name == semconv.EVENT_TRANSITION]
    assert len(transitions) == STORY_EVENTS
    to = [attribute(e, semconv.DASK_TRANSITION_TO) for e in transitions]
    # the last transitions: they end with the one into erred, as Dask's story does
    assert to == [str(e[2]) for e in story[-STORY_EVENTS:]]
    assert to[-1] == "erred"
    recommendations = strings(transitions[-1], semconv.DASK_TRANSITION_RECOMMENDATIONS)
    assert len(recommendations) == RECOMMENDATIONS
    assert set(recommendations) < {f"dep-{i}: erred" for i in range(dependents)}
    left_out = attribute(transitions[-1], semconv.DASK_TRANSITION_RECOMMENDATIONS_DROPPED)
    assert left_out == dependents - RECOMMENDATIONS
    # cut here, not by the span limits (128 events by default): the older transitions
    assert task.dropped_events_count == len(story) - STORY_EVENTS


# -- thread-count changes on a root ----------------------------------------------------------
@cluster_test(90)
async def test_a_root_carries_at_most_256_thread_count_changes(
    otlp_receiver: OtlpReceiver,
) -> None:
    """300 changes of the cluster's thread count while the workflow runs (written into
    Dask's own history, as adding and removing workers would): 301 distinct values
    from the start, 256 events, the first ones, and the other 45 counted in
    ``dropped_events_count``. The span limits are raised so that the cap seen is this
    one, not ``max-events``."""
    changes = 300
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.max-events": 1000,
        # the events come with the diagnosis, which a workflow this short would not get
        "otel-spans.diagnosis.min-duration": 0,
    }
    gate = "threads-gate"
    async with traced_cluster(config) as (client, scheduler, _):
        with span("threads"):
            held = client.submit(wait_for, gate, key="held-0", pure=False)
            await await_until(lambda: scheduler.tasks.get("held-0"), 30)
            start = time()
            # alternately 3 and 2 threads (2 workers of 1 thread run the test), 1 µs apart
            for i in range(changes):
                scheduler.total_nthreads_history.append((start + i * 1e-6, 3 - i % 2))
            await Event(gate, client=client).set()
            assert await held == 1

        def root() -> list[ProtoSpan]:
            return [s for s in raw_spans(otlp_receiver) if s.name == "threads"]

        (exported,) = await await_until(root, 30, "the root was not exported")
    events = [e for e in exported.events if e.name == semconv.EVENT_NTHREADS]
    assert len(events) == NTHREADS_EVENTS
    threads = [attribute(e, semconv.DASK_NTHREADS) for e in events]
    assert threads == [2] + [3 - i % 2 for i in range(NTHREADS_EVENTS - 1)]
    assert exported.dropped_events_count == changes + 1 - NTHREADS_EVENTS


# -- dependencies and links ------------------------------------------------------------------
@cluster_test(120)
async def test_a_task_names_32_dependencies_and_its_group_links_128_counting_the_rest(
    otlp_receiver: OtlpReceiver,
) -> None:
    """One task over 130 dependencies, each in a task group of its own. Its task span
    names 32 of them and counts the other 98 in ``dask.task.dependencies_dropped``; its
    group's span links 128 dependency groups and counts the other 2 in
    ``dropped_links_count`` (the limits section: the first ones kept, the rest
    counted). An uncapped list fails the first; keys or links cut without a count the
    others."""
    n = LINKS + 2
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.traces.tasks.mode": "all",
    }
    async with traced_cluster(config) as (client, _scheduler, _):
        with span("fan-in"):
            # a group per dependency: key names that differ before the index
            sources = [client.submit(int, i, key=f"src{i}-0") for i in range(n)]
            assert await client.submit(ignore, *sources, key="sink-0") == n

        def sink_spans() -> tuple[ProtoSpan, ProtoSpan] | None:
            spans = raw_spans(otlp_receiver)
            task = [s for s in spans if s.name == "sink"]
            task = [s for s in task if _has(s, semconv.DASK_TASK_DEPENDENCIES)]
            group = [s for s in spans if s.name == "sink" and _has(s, semconv.DASK_TASK_GROUP_NAME)]
            return (task[0], group[0]) if task and group else None

        task, group = await await_until(sink_spans, 60, "the sink's spans were not exported")
    keys = {f"src{i}-0" for i in range(n)}
    dependencies = strings(task, semconv.DASK_TASK_DEPENDENCIES)
    assert len(dependencies) == DEPENDENCIES
    assert set(dependencies) < keys and len(set(dependencies)) == DEPENDENCIES
    assert attribute(task, semconv.DASK_TASK_DEPENDENCIES_DROPPED) == n - DEPENDENCIES
    assert len(group.links) == LINKS
    assert group.dropped_links_count == n - LINKS


def _has(span: ProtoSpan, key: str) -> bool:
    return any(kv.key == key for kv in span.attributes)


# -- distinct workers of a group -------------------------------------------------------------
@pytest.mark.parametrize("workers", [WORKERS + 1, 3 * WORKERS])
def test_a_groups_worker_count_saturates_at_10000(workers: int) -> None:
    """The tasks of one group finish on ``workers`` distinct workers (as the scheduler
    hook reports them); the group span says 10 000, and counts the runs on the others
    in ``dask.task_group.workers_uncounted_runs``. A set without bound would say
    ``workers``; a saturation without a count would leave the rest unseen."""
    scheduler: Any = SimpleNamespace(computations=[], story=lambda *keys: [])
    records: list[object] = []
    groups = TaskGroups(
        scheduler, submit=records.append, log=None, max_error_stories=10, max_length=100
    )
    tg = TaskGroup("work", TaskPrefix("work"))
    identity = SpanIdentity("span-uuid", ("saturated",), 1, 2, Policy(mode="none"))
    for i in range(workers):
        ts = TaskState(f"work-{i}", None, "memory", tg, False)
        tg.add(ts)
        worker = f"tcp://10.{i // 65536}.{i // 256 % 256}.{i % 256}:8786"
        groups.task_finished(ts, "processing", "memory", {"worker": worker}, identity, 0.0)
    groups.export_groups([tg], identity, fallback=1.0)
    (record,) = [r for r in records if isinstance(r, GroupRecord)]
    encoder = wire.RequestEncoder({"service.name": "dask"}, "otel_spans")
    request = ExportTraceServiceRequest.FromString(
        encoder.request([group_span(record, limits=RecordLimits())])
    )
    exported = request.resource_spans[0].scope_spans[0].spans[0]
    assert attribute(exported, semconv.DASK_TASK_GROUP_WORKERS) == WORKERS
    assert attribute(exported, semconv.DASK_TASK_GROUP_WORKERS_UNCOUNTED_RUNS) == workers - WORKERS
    assert attribute(exported, semconv.DASK_TASK_GROUP_TASK_STATES_MEMORY) == workers


def test_story_entries_of_a_shape_not_known_are_counted_with_the_older_ones() -> None:
    """61 transitions of the key, one among the latest 50 of a shape not known (a
    timestamp that is no number): 49 transition events, and the 11 older ones plus the
    unreadable one counted in ``dropped_events_count``. Catches: an entry skipped
    without a count."""
    key = "bad-0"
    story: list[tuple[Any, ...]] = [
        (key, "waiting", "processing", {}, f"s{i}", 1.0 + i) for i in range(61)
    ]
    story[30] = (key, "waiting", "processing", {}, "s30", "noon")
    scheduler: Any = SimpleNamespace(computations=[], story=lambda *keys: story)
    records: list[object] = []
    groups = TaskGroups(
        scheduler, submit=records.append, log=None, max_error_stories=10, max_length=100
    )
    tg = TaskGroup("bad", TaskPrefix("bad"))
    ts = TaskState(key, None, "erred", tg, False)
    tg.add(ts)
    identity = SpanIdentity("span-uuid", ("stories",), 1, 2, Policy())
    erred = {"worker": "w", "exception_text": "ValueError('x')"}
    groups.task_finished(ts, "processing", "erred", erred, identity, 0.0)
    (record,) = [r for r in records if isinstance(r, TaskRecord)]
    encoder = wire.RequestEncoder({"service.name": "dask"}, "otel_spans")
    request = ExportTraceServiceRequest.FromString(
        encoder.request(task_spans(record, limits=RecordLimits()))
    )
    exported = request.resource_spans[0].scope_spans[0].spans[0]
    transitions = [e for e in exported.events if e.name == semconv.EVENT_TRANSITION]
    assert len(transitions) == STORY_EVENTS - 1
    assert exported.dropped_events_count == len(story) - (STORY_EVENTS - 1)
