"""Nothing is cut silently: every cap on what a span carries counts what it left out,
and the count reaches the exported span.

The caps: 50 transition events per erred task span and 16 recommendations per event
(``scheduler/erred_tasks.py``), 256 thread-count events per root span
(``scheduler/root_analysis.py``), 32 dependency keys per task span and 10,000 distinct
workers per task group (``scheduler/task_groups.py``). Driven through the scheduler-side
code with stand-ins for Dask's objects, encoded by the real wire encoder and decoded
with the OTLP protobuf classes.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from otel_spans import semconv
from otel_spans.export import wire
from otel_spans.records import SpanRecord
from otel_spans.scheduler import task_groups
from otel_spans.scheduler.erred_tasks import MAX_RECOMMENDATIONS, MAX_STORY_EVENTS, story_event
from otel_spans.scheduler.root_analysis import MAX_NTHREADS_EVENTS, nthreads_events
from otel_spans.settings import RecordLimits
from otel_spans.task_records import DeferredTask, GroupRecord, TaskRecord
from otel_spans.telemetry import traces
from tests.servers.otlp_views import decode_attributes
from tests.support.scheduler_standins import Group, Scheduler, Task, finished, groups, identity

LIMITS = RecordLimits()


def decoded(spans: list[bytes]) -> list[ProtoSpan]:
    request = ExportTraceServiceRequest.FromString(
        wire.RequestEncoder({"service.name": "dask"}, "otel_spans").request(spans)
    )
    return list(request.resource_spans[0].scope_spans[0].spans)


def attributes(message: Any) -> dict[str, Any]:
    return decode_attributes(message.attributes)


# -- the caps ------------------------------------------------------------------------------------
def test_a_story_longer_than_the_cap_counts_the_events_left_out() -> None:
    """61 transitions of the key (one of a shape not known among the latest 50): 49
    transition events and the exception, 12 counted in ``dropped_events_count``.
    Catches: the older transitions or the malformed one cut without a count."""
    key = "bad-1"
    story: list[tuple[Any, ...]] = [("other", "a", "b", {key: "x"}, "s", 0.5)]
    story += [(key, "waiting", "processing", {}, f"s{i}", 1.0 + i) for i in range(61)]
    story[1 + 30] = (key, "waiting", "processing", {}, "s30", "noon")
    submitted: list[object] = []
    group = Group("bad", 1)
    groups(Scheduler(tuple(story)), submitted).task_finished(
        Task(key, group),
        "processing",
        "erred",
        {**finished("w1"), "exception_text": "ValueError('x')"},
        identity("sampled"),
        1.0,
    )
    (record,) = submitted
    assert isinstance(record, TaskRecord)
    (span, _) = decoded(traces.task_spans(record, limits=LIMITS))
    names = [event.name for event in span.events]
    assert names == [semconv.EVENT_EXCEPTION] + [semconv.EVENT_TRANSITION] * 49
    assert MAX_STORY_EVENTS == 50
    assert span.dropped_events_count == 12


def test_recommendations_beyond_the_cap_are_counted_on_their_event() -> None:
    """Catches: the recommendations past 16 cut without a count, or a count of 0 put
    on every event."""
    many = {f"k{i}": "released" for i in range(MAX_RECOMMENDATIONS + 4)}
    event = story_event(("x", "memory", "released", many, "s", 1.0))
    assert event is not None
    got = dict(event.attributes)
    assert len(got[semconv.DASK_TRANSITION_RECOMMENDATIONS]) == MAX_RECOMMENDATIONS
    assert got[semconv.DASK_TRANSITION_RECOMMENDATIONS_DROPPED] == 4
    exactly = dict(list(many.items())[:MAX_RECOMMENDATIONS])
    event = story_event(("x", "memory", "released", exactly, "s", 1.0))
    assert event is not None
    assert semconv.DASK_TRANSITION_RECOMMENDATIONS_DROPPED not in dict(event.attributes)


def test_thread_count_changes_beyond_the_cap_are_counted_on_the_root_span() -> None:
    """300 changes: the first 256 are events, 44 counted in ``dropped_events_count``.
    Catches: the changes past 256 cut without a count."""
    intervals = [(float(i), float(i + 1), 1 + i % 2) for i in range(300)]
    events, dropped = nthreads_events(intervals)
    assert (len(events), dropped) == (MAX_NTHREADS_EVENTS, 44)
    record = SpanRecord(
        uuid="root",
        tags=("root",),
        trace_id=7,
        span_id=8,
        parent_span_id=0,
        continuation=0,
        previous_span_id=0,
        start_ns=1,
        end_ns=2,
        enqueued_ns=1,
        compute_start_ns=1,
        done=True,
        states=(),
        tasks=0,
        task_groups=0,
        nbytes=0,
        task_duration=0.0,
        active_cpu_seconds=0.0,
        events=events,
        events_dropped=dropped,
    )
    roomy = RecordLimits(events=1000)
    (span,) = decoded([traces.dask_span(record, limits=roomy)])
    assert [e.name for e in span.events] == [semconv.EVENT_NTHREADS] * MAX_NTHREADS_EVENTS
    assert span.dropped_events_count == 44
    # under the default span limit (128 events) both cuts add up: 300 - 128
    (span,) = decoded([traces.dask_span(record, limits=LIMITS)])
    assert (len(span.events), span.dropped_events_count) == (128, 172)


def test_dependencies_beyond_the_cap_are_counted_on_the_task_span() -> None:
    """40 dependencies: 32 keys, 8 counted in ``dask.task.dependencies_dropped``.
    Catches: the keys past 32 cut without a count."""
    deps_group = Group("dep", 40)
    deps = tuple(Task(f"dep-{i}", deps_group) for i in range(40))
    submitted: list[object] = []
    task = Task("sum-1", Group("sum", 1), deps)
    dag = groups(Scheduler(), submitted)
    dag.task_finished(task, "processing", "memory", finished("w1"), identity("all"), 1.0)
    (deferred,) = submitted
    assert isinstance(deferred, DeferredTask)
    (span, _) = decoded(traces.task_spans(deferred.build(), limits=LIMITS))
    got = attributes(span)
    assert len(got[semconv.DASK_TASK_DEPENDENCIES]) == 32
    assert got[semconv.DASK_TASK_DEPENDENCIES_DROPPED] == 8


def test_no_dependency_count_when_none_was_left_out() -> None:
    deps_group = Group("dep", 32)
    deps = tuple(Task(f"dep-{i}", deps_group) for i in range(32))
    submitted: list[object] = []
    task = Task("sum-1", Group("sum", 1), deps)
    dag = groups(Scheduler(), submitted)
    dag.task_finished(task, "processing", "memory", finished("w1"), identity("all"), 1.0)
    (deferred,) = submitted
    assert isinstance(deferred, DeferredTask)
    (span, _) = decoded(traces.task_spans(deferred.build(), limits=LIMITS))
    assert semconv.DASK_TASK_DEPENDENCIES_DROPPED not in attributes(span)


def test_runs_on_workers_past_the_saturated_count_are_counted_on_the_group_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With room for 2 workers, runs on a, b, c, c, a, d: 2 workers counted and 3 runs
    on workers left out. Catches: runs past the saturation cut without a count; a run
    on an already counted worker counted as left out."""
    monkeypatch.setattr(task_groups, "_MAX_WORKERS", 2)
    submitted: list[object] = []
    dag = groups(Scheduler(), submitted)
    span = identity("none")
    group = Group("inc", 6)
    for i, worker in enumerate("abccad"):
        dag.task_finished(
            Task(f"inc-{i}", group), "processing", "memory", finished(worker), span, 1
        )
    dag.export_groups([group], span, 0.0)  # type: ignore[list-item]
    (record,) = submitted
    assert isinstance(record, GroupRecord)
    got = attributes(decoded([traces.group_span(record, limits=LIMITS)])[0])
    assert got[semconv.DASK_TASK_GROUP_WORKERS] == 2
    assert got[semconv.DASK_TASK_GROUP_WORKERS_UNCOUNTED_RUNS] == 3
