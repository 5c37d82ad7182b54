"""Trace context from the caller, through Dask spans, into code running inside tasks.

Real clusters and real OTLP: the caller's context must reach the scheduler as a task
annotation, and spans that task code starts with the global tracer on worker
*processes* must reach a collector as children of their task's span.

The scheduler's side (``otel_spans/scheduler/``) is checked end to end too: a root Dask
span adopts the caller, and a Dask span opened inside a task hangs under that task.
"""

from __future__ import annotations

import io
import logging
import operator
import os
import time
from collections.abc import Iterator
from typing import Any

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import get_client, get_worker, rejoin, secede, worker_client
from distributed import span as dask_span
from distributed.diagnostics.plugin import SchedulerPlugin
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import otel_spans
from otel_spans import ids
from otel_spans.context import (
    CALLER_LINK_KEY,
    caller_annotation,
    context_from_traceparent,
    format_traceparent,
    parse_traceparent,
)
from otel_spans.traceparent import traceparent_of
from otel_spans.worker import METADATA_CHILDREN, OtelSpansWorkerPlugin
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.servers.rotel import RotelCollector
from tests.support.cluster import await_until, cluster_test, process_cluster, traced_cluster
from tests.support.tasks import worker_stats

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

#: ``Span.SpanKind`` values in OTLP.
INTERNAL, CONSUMER = 1, 5


def hexes(trace_id: int, span_id: int) -> tuple[str, str]:
    return f"{trace_id:032x}", f"{span_id:016x}"


def task_span(span_uuid: str, key: str) -> str:
    return f"{ids.task_span_id(span_uuid, key):016x}"


def is_dask_span_or_caller(span: ReceivedSpan) -> bool:
    """Dask spans (not their group, task and phase spans) and the caller's spans."""
    return "dask.span.id" in span.attributes or span.resource.get("service.name") == "caller-app"


@pytest.fixture(autouse=True)
def no_env_traceparent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEPARENT", raising=False)


@pytest.fixture(autouse=True)
def global_provider_untouched() -> Iterator[None]:
    """Worker plugins in this process (exporter none) and Nannies never set it here."""
    before = trace.get_tracer_provider()
    yield
    assert trace.get_tracer_provider() is before


@pytest.fixture
def caller(otlp_receiver: OtlpReceiver) -> Iterator[trace.Tracer]:
    """The client application's tracer: an SDK provider of its own, never the global one."""
    provider = TracerProvider(resource=Resource({"service.name": "caller-app"}))
    exporter = OTLPSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer("tests.caller")
    finally:
        provider.shutdown()


class Recorder(SchedulerPlugin):
    """What the scheduler hands plugins: ``otel_spans`` annotations and task metadata."""

    name = "test-recorder"

    def __init__(self) -> None:
        self.annotations: dict[str, Any] = {}
        self.metadata: dict[str, dict[str, Any]] = {}

    def update_graph(self, scheduler: Any, *, annotations: Any = None, **kwargs: Any) -> None:
        for key, value in (annotations or {}).get("otel_spans", {}).items():
            self.annotations[str(key)] = value

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "memory" and kwargs.get("metadata"):
            self.metadata[str(key)] = dict(kwargs["metadata"])


def recorded(dask_scheduler: Any) -> dict[str, Any]:
    plugin = dask_scheduler.plugins[Recorder.name]
    return {"annotations": dict(plugin.annotations), "metadata": dict(plugin.metadata)}


# -- code that runs inside tasks (module level: worker processes import it) ------------------------
def traced_work(label: str) -> str:
    """Two spans with the global tracer and no explicit context; the first has a child."""
    try:
        key = str(get_worker().get_current_task())
    except ValueError:  # meta inference on the client: not a task
        return ""
    tracer = trace.get_tracer("tests.user")
    attributes = {"test.key": key, "test.label": label}
    with (
        tracer.start_as_current_span(f"{label}/a", attributes=attributes),
        tracer.start_as_current_span(f"{label}/a/child", attributes=attributes),
    ):
        pass
    with tracer.start_as_current_span(f"{label}/b", attributes=attributes):
        pass
    return key


def traced_block(block: np.ndarray) -> np.ndarray:
    traced_work("map_blocks")
    return block


def traced_partition(frame: pd.DataFrame) -> pd.DataFrame:
    traced_work("map_partitions")
    return frame


def nested_submitter() -> dict[str, str]:
    """Submits from inside a task: under an ``otel_spans.span``, and plainly."""
    client = get_client()
    with otel_spans.span("inner") as inner_id:
        inner = client.submit(traced_work, "inner", key="inner-1")
    plain = client.submit(traced_work, "plain", key="plain-1")
    secede()
    inner.result()
    plain.result()
    rejoin()
    return {"inner_span": inner_id, "traceparent": otel_spans.current_traceparent() or ""}


def plain_span_submitter() -> str:
    """Opens a plain ``distributed.span`` inside a task and submits work in it."""
    client = get_client()
    with dask_span("opened in a task") as inner_id:
        future = client.submit(operator.add, 1, 1, key="in-task-span-1")
    secede()
    assert future.result() == 2
    rejoin()
    return inner_id


def logged_work() -> str:
    """A log line formatted with the ids TraceContextFilter adds."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(otel_spans.TraceContextFilter())
    handler.setFormatter(logging.Formatter(otel_spans.LOG_FORMAT))
    log = logging.getLogger("tests.in_task")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        log.info("hello")
    finally:
        log.removeHandler(handler)
    return stream.getvalue()


async def async_task() -> str | None:
    return otel_spans.current_traceparent()


def thread_task() -> str | None:
    return otel_spans.current_traceparent()


def plain_nested_submit() -> str | None:
    with worker_client() as client:
        client.submit(operator.add, 1, 1, key="nested-plain").result()
    return otel_spans.current_traceparent()


# -- the wire format -------------------------------------------------------------------------------
@given(
    st.integers(min_value=1, max_value=2**128 - 1),
    st.integers(min_value=1, max_value=2**64 - 1),
    st.booleans(),
)
def test_traceparent_roundtrip(trace_id: int, span_id: int, sampled: bool) -> None:
    text = format_traceparent(trace_id, span_id, sampled)
    assert parse_traceparent(text) == (trace_id, span_id, int(sampled))
    if text.upper() != text:
        assert parse_traceparent(text.upper()) is None  # W3C: lowercase only


@given(
    st.one_of(
        st.text(),
        st.text(alphabet="0123456789abcdefABCDEF-0 \n", max_size=60),
        st.binary(),
        st.integers(),
        st.none(),
        st.lists(st.text()),
    )
)
def test_garbage_never_raises(value: object) -> None:
    parsed = parse_traceparent(value)
    if parsed is not None:
        assert isinstance(value, str)
        assert format_traceparent(parsed[0], parsed[1], bool(parsed[2] & 1))[:53] == value[:53]


@pytest.mark.parametrize(
    "text",
    [
        "",
        TP + " ",
        " " + TP,
        TP + "\n",
        TP.upper(),
        "01" + TP[2:],  # version 01 is not parsed as 00
        "ff" + TP[2:],
        TP + "-00",  # no extra fields in version 00
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        "00-0af7651916cd43dd8448eb211c80319-cb7ad6b7169203331-01",  # misplaced dash
        "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",  # not hex
        "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
    ],
)
def test_invalid_traceparents_are_rejected(text: str) -> None:
    assert parse_traceparent(text) is None


def test_format_rejects_invalid_ids() -> None:
    with pytest.raises(ValueError, match="trace_id 0 is not a non-zero 128-bit integer"):
        format_traceparent(0, 1)
    with pytest.raises(ValueError, match="span_id 18446744073709551616 is not"):
        format_traceparent(1, 2**64)


def test_context_crosses_a_process_boundary_as_a_string() -> None:
    ctx = context_from_traceparent(TP)
    sc = trace.get_current_span(ctx).get_span_context()
    assert (sc.trace_id, sc.span_id, sc.is_remote, sc.trace_flags.sampled) == (
        *parse_traceparent(TP)[:2],  # type: ignore[index]
        True,
        True,
    )
    assert context_from_traceparent("garbage") == {}
    assert context_from_traceparent(None) == {}
    token = otel_context.attach(ctx)
    try:
        assert otel_spans.current_traceparent() == TP
        assert otel_spans.caller_traceparent() == TP  # remote: adopted
        assert otel_spans.current_context() == ctx
    finally:
        otel_context.detach(token)
    assert otel_spans.current_traceparent() is None


def test_log_filter_outside_any_span() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "msg", None, None)
    assert otel_spans.TraceContextFilter().filter(record)
    assert (record.otelTraceID, record.otelSpanID, record.otelTraceSampled) == ("0", "0", False)


def test_nested_annotations_never_contradict_the_tree() -> None:
    """Inside a Dask span the tree's trace is decided: link = the caller is outside it."""
    root = "9f5ab2f6-0000-4000-8000-000000000001"
    tree_trace = ids.workflow_trace_id(root)
    with dask.annotate(span={"name": ("wf",), "ids": (root,)}):
        # a caller in another trace can only be linked, whatever was asked
        assert caller_annotation(TP, link=False) == {"traceparent": TP, "link": True}
        same_tree = format_traceparent(tree_trace, 42)
        assert caller_annotation(same_tree, link=True) == {"traceparent": same_tree, "link": False}
    with (
        dask.annotate(otel_spans={"traceparent": TP, "link": False}),
        dask.annotate(span={"name": ("wf",), "ids": (root,)}),
    ):
        in_caller_trace = format_traceparent(parse_traceparent(TP)[0], 7)  # type: ignore[index]
        assert caller_annotation(in_caller_trace)["link"] is False  # type: ignore[index]
    # no Dask span open: the root's choice, default from the config
    assert caller_annotation(TP) == {"traceparent": TP, "link": False}
    with dask.config.set({CALLER_LINK_KEY: True}):
        assert caller_annotation(TP) == {"traceparent": TP, "link": True}
    assert caller_annotation() is None
    with pytest.raises(ValueError, match="'00-nope' is not a valid W3C traceparent"):
        caller_annotation("00-nope")


# -- caller → scheduler ----------------------------------------------------------------------------
@cluster_test()
async def test_caller_span_reaches_the_scheduler_as_a_task_annotation(
    otlp_receiver: OtlpReceiver, caller: trace.Tracer
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client, scheduler = cluster.client, cluster.scheduler
        with caller.start_as_current_span("client request") as request:
            expected = traceparent_of(request.get_span_context())
            with otel_spans.span("workflow"):
                with otel_spans.span("load"):
                    load = client.submit(operator.add, 1, 1, key="load-1")
                top = client.submit(operator.add, 1, 2, key="top-1")
                await client.gather([load, top])
            with otel_spans.annotate_context(), dask_span("plain dask span"):
                plain = await client.submit(operator.add, 1, 3, key="plain-1").result()
        outside = client.submit(operator.add, 1, 4, key="outside-1")
        await outside
        want = {"traceparent": expected, "link": False}
        assert scheduler.tasks["load-1"].annotations["otel_spans"] == want
        assert scheduler.tasks["top-1"].annotations["otel_spans"] == want
        assert scheduler.tasks["outside-1"].annotations.get("otel_spans") is None
        assert plain == 4
        del load, top, outside


@cluster_test()
async def test_traceparent_env_link_mode_and_explicit_traceparent(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client, scheduler = cluster.client, cluster.scheduler
        monkeypatch.setenv("TRACEPARENT", TP)
        futures = []
        with otel_spans.span("from env"):
            futures.append(client.submit(operator.add, 1, 1, key="env-1"))
        with otel_spans.span("linked", link=True):
            futures.append(client.submit(operator.add, 1, 2, key="link-1"))
        with dask.config.set({CALLER_LINK_KEY: True}), otel_spans.span("linked by config"):
            futures.append(client.submit(operator.add, 1, 3, key="config-1"))
        explicit = format_traceparent(12345, 678, sampled=False)
        with otel_spans.span("explicit", traceparent=explicit):
            futures.append(client.submit(operator.add, 1, 4, key="explicit-1"))
        monkeypatch.setenv("TRACEPARENT", "not-a-traceparent")
        with otel_spans.span("bad env"):
            futures.append(client.submit(operator.add, 1, 5, key="bad-1"))
        with (
            pytest.raises(ValueError, match="not a valid W3C traceparent"),
            otel_spans.span("bad explicit", traceparent=TP.upper()),
        ):
            pass
        await client.gather(futures)

        def annotation(key: str) -> Any:
            return scheduler.tasks[key].annotations.get("otel_spans")

        assert annotation("env-1") == {"traceparent": TP, "link": False}
        assert annotation("link-1") == {"traceparent": TP, "link": True}
        assert annotation("config-1") == {"traceparent": TP, "link": True}
        assert annotation("explicit-1") == {"traceparent": explicit, "link": False}
        assert annotation("bad-1") is None


@cluster_test()
async def test_root_dask_span_is_a_child_of_the_caller_span_or_linked_to_it(
    otlp_receiver: OtlpReceiver, caller: trace.Tracer
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client = cluster.client
        with caller.start_as_current_span("client request") as request:
            with otel_spans.span("adopted"):
                await client.submit(operator.add, 1, 1, key="adopted-1")
            with otel_spans.span("linked", link=True) as linked_id:
                await client.submit(operator.add, 1, 2, key="linked-1")
        sc = request.get_span_context()
        caller_trace, caller_span = hexes(sc.trace_id, sc.span_id)

        def ready() -> dict[str, ReceivedSpan] | None:
            got = {s.name: s for s in otlp_receiver.spans() if is_dask_span_or_caller(s)}
            return got if {"client request", "adopted", "linked"} <= set(got) else None

        got = await await_until(ready, 20, lambda: str([s.name for s in otlp_receiver.spans()]))
    assert got["client request"].resource["service.name"] == "caller-app"
    # work a caller in another process handed over: CONSUMER (docs/trace-context.md)
    assert got["adopted"].kind == got["linked"].kind == CONSUMER
    assert got["adopted"].trace_id == caller_trace
    assert got["adopted"].parent_span_id == caller_span
    assert got["linked"].trace_id == f"{ids.workflow_trace_id(linked_id):032x}"
    assert got["linked"].parent_span_id == ""
    assert [(link.trace_id, link.span_id) for link in got["linked"].links] == [
        (caller_trace, caller_span)
    ]


# -- into tasks, in-process workers ----------------------------------------------------------------
@cluster_test()
async def test_tasks_run_in_their_span_context_and_see_dasks_own_annotations(
    otlp_receiver: OtlpReceiver,
) -> None:
    """In-process workers (context only: exporter none, so no global provider is set here).

    Task code sees exactly the annotations Dask gives it, and work it submits carries no
    annotation of ours; tasks of Dask's default span get a task context too.
    """
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client, workers, scheduler = cluster.client, cluster.workers, cluster.scheduler
        with dask.config.set({"otel-spans.traces.exporter": "none"}):
            await client.register_plugin(OtelSpansWorkerPlugin())
        await client.register_plugin(Recorder())
        assert all("execute" in w.__dict__ for w in workers)
        with dask_span("in-process") as root_id:
            in_thread = await client.submit(thread_task, key="thread-1")
            in_loop = await client.submit(async_task, key="async-1")
            nested = await client.submit(plain_nested_submit, key="nested-1")
            seen_in_task = await client.submit(dask.get_annotations, key="annotations-1")
        outside_future = client.submit(thread_task, key="default-span-1")
        outside = await outside_future
        seen_outside = await client.submit(dask.get_annotations, key="annotations-2")
        trace_id = ids.workflow_trace_id(root_id)
        for key, got in (("thread-1", in_thread), ("async-1", in_loop), ("nested-1", nested)):
            assert got == format_traceparent(trace_id, ids.task_span_id(root_id, key))
        assert seen_in_task == {"span": {"name": ("in-process",), "ids": (root_id,)}}
        assert seen_outside == {}
        default_uuid = scheduler.tasks[outside_future.key].group.span_id
        assert scheduler.extensions["spans"].spans[default_uuid].name == ("default",)
        assert outside == format_traceparent(
            ids.workflow_trace_id(default_uuid),
            ids.task_span_id(default_uuid, "default-span-1"),
        )
        seen = await client.run_on_scheduler(recorded)
        assert seen["annotations"] == {}  # nothing of ours on nested submits

        await client.unregister_worker_plugin(OtelSpansWorkerPlugin.name)
        assert not any("execute" in w.__dict__ for w in workers)
        with dask_span("after teardown"):
            assert await client.submit(thread_task, key="thread-2") is None


@cluster_test()
async def test_dask_span_opened_inside_a_task_is_a_child_of_that_task(
    otlp_receiver: OtlpReceiver,
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client = cluster.client
        with dask.config.set({"otel-spans.traces.exporter": "none"}):
            await client.register_plugin(OtelSpansWorkerPlugin())
        with dask_span("outer") as outer_id:
            result = await client.submit(nested_submitter, key="outer-1")

        def inner() -> ReceivedSpan | None:
            spans = otlp_receiver.spans()
            return next((s for s in spans if s.name == "inner" and is_dask_span_or_caller(s)), None)

        got = await await_until(inner, 20)
    assert got.attributes["dask.span.id"] == result["inner_span"]
    assert got.trace_id == f"{ids.workflow_trace_id(outer_id):032x}"
    assert got.parent_span_id == task_span(outer_id, "outer-1")
    assert got.kind == INTERNAL  # a sub-span, under a task of the same workflow


@cluster_test()
async def test_plain_dask_span_opened_in_a_task_hangs_under_the_submitting_task(
    otlp_receiver: OtlpReceiver,
) -> None:
    """No annotation of ours travels: the scheduler knows the submitting task's key from
    distributed's own update-graph message, and keeps that task's span as a parent."""
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client = cluster.client
        with dask_span("outer") as outer_id:
            inner_id = await client.submit(plain_span_submitter, key="submitter-1")

        def exported() -> tuple[ReceivedSpan, ReceivedSpan] | None:
            spans = otlp_receiver.spans()
            inner = [s for s in spans if s.name == "opened in a task"]
            task = [s for s in spans if s.attributes.get("dask.task.key") == "submitter-1"]
            return (inner[0], task[0]) if inner and task else None

        inner, submitter = await await_until(exported, 20)
    assert inner.attributes["dask.span.id"] == inner_id
    assert inner.trace_id == f"{ids.workflow_trace_id(outer_id):032x}"
    assert inner.parent_span_id == task_span(outer_id, "submitter-1") == submitter.span_id
    assert submitter.attributes["dask.task.sampled_because"] == "children"


# -- into tasks, worker processes ------------------------------------------------------------------
# dask.dataframe warns that layer annotations are ignored with query planning; the
# span and otel_spans annotations travel as the graph's global annotations all the same.
@pytest.mark.filterwarnings("ignore:Dask annotations .* detected:UserWarning")
def test_spans_started_in_tasks_on_worker_processes_are_children_of_the_task_span(
    otlp_receiver: OtlpReceiver, rotel: RotelCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # worker processes inherit it
    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        "distributed.worker.preload": ["otel_spans"],
        "otel-spans.endpoint": rotel.grpc_endpoint,
        "otel-spans.traces.linger": "100ms",
        "otel-spans.traces.poll-interval": "50ms",
    }
    with process_cluster(config, n_workers=2) as (_cluster, client):
        client.register_plugin(Recorder())
        sub: dict[str, str] = {}
        with dask_span("context test") as root_id:
            with dask_span("submit") as sub["submit"]:
                assert client.submit(traced_work, "submit", key="submit-1").result() == "submit-1"
            # Distinct task prefixes: a task whose TaskGroup (named by the prefix) is still
            # alive joins that group's Dask span, and the worker is told so.
            with dask_span("map") as sub["map"]:
                client.gather(client.map(traced_work, ["map", "map"], key=["map-1", "map-2"]))
            with dask_span("delayed") as sub["delayed"]:
                dask.delayed(traced_work)("delayed", dask_key_name="delayed-1").compute()
            with dask_span("map_blocks") as sub["map_blocks"]:
                blocks = da.ones(4, chunks=2).map_blocks(traced_block, meta=np.array((), float))
                assert blocks.sum().compute() == 4
            with dask_span("map_partitions") as sub["map_partitions"]:
                frame = dd.from_pandas(pd.DataFrame({"x": range(4)}), npartitions=2)
                assert len(frame.map_partitions(traced_partition, meta=frame._meta)) == 4
            with dask_span("nested") as sub["nested"]:
                nested = client.submit(nested_submitter, key="outer-1").result()
            with dask_span("logging") as sub["logging"]:
                log_line = client.submit(logged_work, key="log-1").result()
        sub["inner"], sub["plain"] = nested["inner_span"], sub["nested"]
        labels = ("submit", "map", "delayed", "map_blocks", "map_partitions", "inner", "plain")
        # 2 of map, 2 of map_blocks and of map_partitions (one per chunk), 1 of the others
        expected_tasks = {"map": 2, "map_blocks": 2, "map_partitions": 2}
        total = sum(3 * expected_tasks.get(label, 1) for label in labels)
        spans = otlp_receiver.wait_for_spans(
            lambda s: s.scope_name == "tests.user", count=total, timeout=30
        )
        seen = client.run_on_scheduler(recorded)
        stats = client.run(worker_stats)

    trace_id = f"{ids.workflow_trace_id(root_id):032x}"
    by_id = {s.span_id: s for s in spans}
    for label in labels:
        mine = [s for s in spans if s.attributes["test.label"] == label]
        keys = {s.attributes["test.key"] for s in mine}
        assert len(keys) == expected_tasks.get(label, 1), (label, keys)
        for s in mine:
            assert s.trace_id == trace_id, label
            assert s.resource["service.instance.id"].startswith("Worker-")
            if s.name.endswith("/child"):
                assert by_id[s.parent_span_id].name == f"{label}/a"
            else:
                assert s.parent_span_id == task_span(sub[label], s.attributes["test.key"]), label
    # ...and the scheduler exported every task span they hang under: the sampler keeps a
    # task whose code started spans ("children"), however short it ran
    parents = {s.parent_span_id for s in spans if not s.name.endswith("/child")}
    exported = otlp_receiver.wait_for_spans(
        lambda s: s.span_id in parents and s.scope_name == "otel_spans",
        count=len(parents),
        timeout=30,
    )
    assert {s.span_id for s in exported} == parents
    assert {s.attributes["dask.task.sampled_because"] for s in exported} == {"children"}
    # the task span's count of children goes back to the scheduler in the task's metadata
    assert seen["metadata"]["submit-1"] == {METADATA_CHILDREN: 2}
    assert METADATA_CHILDREN not in seen["metadata"].get("outer-1", {})
    # code in a task sees the task's context; otel_spans.span there annotates the work it
    # submits with it, plain submits carry nothing of ours
    outer_span = ids.task_span_id(sub["nested"], "outer-1")
    outer = format_traceparent(ids.workflow_trace_id(root_id), outer_span)
    assert nested["traceparent"] == outer
    assert seen["annotations"]["inner-1"] == {"traceparent": outer, "link": False}
    assert "plain-1" not in seen["annotations"]
    # logs inside a task carry its ids
    assert f"[trace_id={trace_id} span_id={task_span(sub['logging'], 'log-1')}] hello" in log_line
    assert {s["provider"] for s in stats.values()} == {"otel-spans"}
    assert sum(int(s["dropped"]) + int(s["failed"]) for s in stats.values()) == 0


USER_PROVIDER_PRELOAD = """
import os
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource({"service.name": "user-provider"}))
exporter = OTLPSpanExporter(endpoint=os.environ["TEST_USER_ENDPOINT"], insecure=True)
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
"""


def test_a_users_own_provider_wins_and_a_nanny_preload_reaches_the_worker_process(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_USER_ENDPOINT", otlp_receiver.grpc_endpoint)
    config = {
        # otel_spans only on the Nanny (in this process): it must reach the worker process,
        # after the user's own preload, which sets the global provider first
        "distributed.nanny.preload": ["otel_spans"],
        "distributed.worker.preload": [USER_PROVIDER_PRELOAD],
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
    }
    with process_cluster(config, n_workers=1) as (_cluster, client):
        assert os.getpid() != next(iter(client.run(os.getpid).values()))
        client.register_plugin(Recorder())
        with dask_span("user provider") as span_id:
            assert client.submit(traced_work, "user", key="user-1").result() == "user-1"
        spans = otlp_receiver.wait_for_spans(lambda s: s.scope_name == "tests.user", count=3)
        seen = client.run_on_scheduler(recorded)
        stats = client.run(worker_stats)
    assert {s.resource["service.name"] for s in spans} == {"user-provider"}
    assert {s.trace_id for s in spans} == {f"{ids.workflow_trace_id(span_id):032x}"}
    direct = [s for s in spans if not s.name.endswith("/child")]
    assert {s.parent_span_id for s in direct} == {task_span(span_id, "user-1")}
    assert seen["metadata"]["user-1"] == {METADATA_CHILDREN: 2}  # counted on their provider
    assert [s["provider"] for s in stats.values()] == ["user"]


def many_spans(n: int) -> int:
    tracer = trace.get_tracer("tests.user")
    for i in range(n):
        with tracer.start_as_current_span(f"span {i}"):
            pass
    return n


def test_a_hanging_collector_costs_worker_spans_counted_never_a_hang(
    otlp_receiver: OtlpReceiver,
) -> None:
    otlp_receiver.set_mode("hang")
    config = {
        "distributed.worker.preload": ["otel_spans"],
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.queue-size": 4,
        "otel-spans.batch-size": 2,
        "otel-spans.timeout": "1s",
        "otel-spans.shutdown-timeout": "1s",
    }
    with process_cluster(config, n_workers=1) as (_cluster, client):
        with dask_span("flood"):
            assert client.submit(many_spans, 200, key="flood-1").result() == 200
        (stats,) = client.run(worker_stats).values()
        start = time.monotonic()
    assert time.monotonic() - start < 15  # closing waits for the collector at most 1 s
    # 200 spans through a queue of 4 that nobody drains: the rest are dropped, and counted
    assert int(stats["dropped"]) >= 200 - 4 - 2 * 2
    assert stats["exported"] == 0


def test_adopted_callers_and_origins_are_bounded_oldest_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long-lived scheduler runs workflows without end: what the callers remember per
    Dask span (its adopted caller, a workflow's origin) forgets the oldest beyond the
    bound instead of growing."""
    from otel_spans.scheduler import callers

    monkeypatch.setattr(callers, "_MAX_REMEMBERED", 3)
    memory: dict[str, int] = {}
    for i in range(5):
        callers._remember(memory, f"span-{i}", i)
    assert memory == {"span-2": 2, "span-3": 3, "span-4": 4}
