"""Dask spans arrive at a real OTLP receiver as OTel spans: tree, ids, times, attributes."""

from __future__ import annotations

import operator
from collections.abc import Callable

import dask
import dask.array as da
import pytest
from dask.delayed import delayed
from distributed import Client, span
from distributed.utils_test import gen_cluster

from otel_spans import OtelSpansPlugin, ids
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import await_until, cluster_test, traced_cluster
from tests.support.received import dask_spans

ERROR = 2
INTERNAL = 1  # protobuf enum value of SPAN_KIND_INTERNAL


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans}


async def wait_spans(
    receiver: OtlpReceiver, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 20
) -> list[ReceivedSpan]:
    def ready() -> list[ReceivedSpan] | None:
        got = dask_spans(receiver)
        return got if predicate(got) else None

    return await await_until(
        ready, timeout, lambda: f"spans so far: {[s.name for s in dask_spans(receiver)]}"
    )


def names_present(*names: str) -> Callable[[list[ReceivedSpan]], bool]:
    return lambda spans: set(names) <= {s.name for s in spans}


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
@cluster_test()
async def test_nested_spans_form_one_trace(otlp_receiver: OtlpReceiver, protocol: str) -> None:
    endpoint = otlp_receiver.grpc_endpoint if protocol == "grpc" else otlp_receiver.http_endpoint
    config = {
        "otel-spans.endpoint": endpoint,
        "otel-spans.protocol": protocol,
        "otel-spans.cluster-name": "test-cluster",
        "distributed.diagnostics.computations.nframes": 1,
    }
    async with traced_cluster(config) as (client, scheduler, _):
        with span("Alice's workflow") as root_id:
            with span("data load") as load_id:
                a = client.persist(da.random.random((400, 400), chunks=100))
            with span("ML preprocessing") as prep_id:
                b = client.persist(a - a.mean(axis=0))
            total = await client.compute(b.sum())
        assert abs(total) < 1e-6
        got = await wait_spans(
            otlp_receiver, names_present("Alice's workflow", "data load", "ML preprocessing")
        )
        ext = scheduler.extensions["spans"]
        dask_root = ext.spans[root_id]

    spans = by_name(got)
    root, load, prep = spans["Alice's workflow"], spans["data load"], spans["ML preprocessing"]
    # one trace, ids derived from the Dask uuids, parents mirroring the Dask tree
    assert {s.trace_id for s in (root, load, prep)} == {f"{ids.workflow_trace_id(root_id):032x}"}
    assert root.span_id == f"{ids.dask_span_id(root_id):016x}"
    assert load.span_id == f"{ids.dask_span_id(load_id):016x}"
    assert prep.span_id == f"{ids.dask_span_id(prep_id):016x}"
    assert root.parent_span_id == ""
    assert load.parent_span_id == prep.parent_span_id == root.span_id
    assert {s.kind for s in spans.values()} == {INTERNAL}
    assert {s.transport for s in spans.values()} == {"grpc" if protocol == "grpc" else "http"}
    # times: the root covers its children and matches the scheduler's own view: from
    # its enqueueing (or its first task group's start, if a worker reported that
    # earlier) to its last compute (these workers have no preload: no clock offsets)
    assert root.attributes["dask.span.enqueued"] == int(dask_root.enqueued * 1e9)
    assert root.start_ns <= int(dask_root.enqueued * 1e9)
    assert root.end_ns == int(dask_root.stop * 1e9)
    assert root.start_ns <= load.start_ns < load.end_ns <= root.end_ns
    assert root.start_ns <= prep.start_ns < prep.end_ns <= root.end_ns
    # attributes
    assert root.attributes["dask.span.id"] == root_id
    assert root.attributes["dask.span.tags"] == ["Alice's workflow"]
    assert load.attributes["dask.span.tags"] == ["Alice's workflow", "data load"]
    # one key, one meaning: the joined path, as on metrics and logs
    assert load.attributes["dask.span.name"] == "Alice's workflow/data load"
    assert load.attributes["dask.span.task_count"] == 16
    assert load.attributes["dask.span.task_states.memory"] == 16
    assert load.attributes["dask.span.nbytes"] == 400 * 400 * 8
    assert root.attributes["dask.span.task_count"] == dask_root_tasks(dask_root)
    assert root.attributes["dask.span.task_duration"] > 0
    assert root.attributes["dask.span.active_cpu_seconds"] > 0
    assert root.attributes["dask.span.done"] is True
    assert "persist" in load.attributes["dask.span.code.snippet"]
    assert load.attributes["code.file.path"].endswith("test_traces.py")
    assert root.status_code == 0
    resource = root.resource
    assert resource["service.name"] == "dask"
    assert resource["dask.cluster.name"] == "test-cluster"
    assert resource["dask.scheduler.address"].startswith("tcp://127.0.0.1:")
    assert resource["service.instance.id"].startswith("Scheduler-")


def dask_root_tasks(dask_span: object) -> int:
    return sum(len(tg) for tg in dask_span.traverse_groups())  # type: ignore[attr-defined]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], clean_kwargs={"threads": False})
async def test_register_plugin_on_running_cluster(
    c: Client, s: object, a: object, otlp_receiver: OtlpReceiver
) -> None:
    await c.register_plugin(
        OtelSpansPlugin(
            endpoint=otlp_receiver.grpc_endpoint,
            service_name="analytics",
            traces={"linger": "100ms", "poll_interval": "50ms"},
        )
    )
    with span("registered"):
        assert await c.submit(sum, [1, 2, 3]) == 6
    (got,) = await wait_spans(otlp_receiver, names_present("registered"))
    assert got.resource["service.name"] == "analytics"
    assert got.attributes["dask.span.task_states.memory"] == 1


@cluster_test()
async def test_every_default_span_is_its_own_trace(otlp_receiver: OtlpReceiver) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as (
        client,
        _s,
        _,
    ):
        assert await client.submit(lambda: 1, pure=False) == 1
        await wait_spans(otlp_receiver, lambda got: len(got) == 1)
        assert await client.submit(lambda: 2, pure=False) == 2
        got = await wait_spans(otlp_receiver, lambda got: len(got) == 2)
    assert [g.name for g in got] == ["default", "default"]
    assert got[0].trace_id != got[1].trace_id
    assert {g.parent_span_id for g in got} == {""}


def fail(x: int) -> int:
    raise RuntimeError(f"bad input {x}")


@cluster_test()
async def test_erred_tasks_make_the_span_tree_an_error(otlp_receiver: OtlpReceiver) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as (
        client,
        _s,
        _,
    ):
        with span("pipeline"), span("step"):
            futures = client.map(fail, range(3)) + client.map(abs, range(4))
            results = await client.gather(futures, errors="skip")
        assert results == [0, 1, 2, 3]
        del futures  # the erred tasks are released and forgotten; the count must stay
        got = by_name(await wait_spans(otlp_receiver, names_present("pipeline", "step")))
    for name in ("pipeline", "step"):
        assert got[name].status_code == ERROR
        assert got[name].status_message == "3 of 7 tasks erred"
        assert got[name].attributes["dask.span.task_states.erred"] == 3
        assert got[name].attributes["dask.span.task_states.memory"] == 4


@cluster_test()
async def test_reopened_span_is_exported_as_a_linked_continuation(
    otlp_receiver: OtlpReceiver,
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as (
        client,
        _s,
        _,
    ):
        with span("session") as session_id:
            assert await client.submit(abs, -1) == 1
            first = await wait_spans(otlp_receiver, names_present("session"))
            # More work lands in the already exported span, and a sub-span under it:
            # the span reopens. (Distinct functions: tasks of a live task group would
            # join the old group's span instead of the new one.)
            second = client.submit(operator.neg, 2)
            with span("late child"):
                third = client.submit(str, 3)
            assert await second == -2
            assert await third == "3"
        got = await wait_spans(
            otlp_receiver,
            lambda got: (
                [g.name for g in got].count("session") == 2 and names_present("late child")(got)
            ),
        )
    original = first[0]
    assert original.attributes["dask.span.task_states.memory"] == 1
    continuation = next(g for g in got if g.name == "session" and g.span_id != original.span_id)
    assert continuation.span_id == f"{ids.continuation_span_id(session_id, 1):016x}"
    assert continuation.trace_id == original.trace_id
    assert continuation.parent_span_id == original.span_id
    assert continuation.attributes["dask.span.continuation"] == 1
    assert continuation.attributes["dask.span.task_states.memory"] == 3
    assert [(link.span_id, link.attributes) for link in continuation.links] == [
        (original.span_id, {"dask.span.continuation": 0})
    ]
    assert continuation.start_ns >= original.end_ns
    late = by_name(got)["late child"]
    assert late.parent_span_id == original.span_id
    assert len({g.span_id for g in got}) == len(got)


@cluster_test(90)
async def test_collection_types_each_get_their_span(otlp_receiver: OtlpReceiver) -> None:
    import dask.dataframe as dd
    import pandas as pd

    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as (
        client,
        _s,
        _,
    ):
        with span("kinds"):
            with span("submit"):
                assert await client.submit(abs, -1) == 1
            with span("map"):
                # (another function than above: a live task group keeps its first span)
                assert await client.gather(client.map(operator.neg, [1, 2, 3])) == [-1, -2, -3]
            with span("array"):
                assert await client.compute(da.arange(100, chunks=10).sum()) == 4950
            with span("dataframe"):
                pdf = pd.DataFrame({"x": range(100), "y": [i % 3 for i in range(100)]})
                ddf = dd.from_pandas(pdf, npartitions=4)
                result = await client.compute(ddf.groupby("y").x.sum())
                assert result.sum() == 4950
            with span("delayed"):
                parts = [delayed(abs)(-i) for i in range(5)]
                assert await client.compute(delayed(sum)(parts)) == 10
        names = ("kinds", "submit", "map", "array", "dataframe", "delayed")
        got = by_name(await wait_spans(otlp_receiver, names_present(*names)))
    for name in names[1:]:
        assert got[name].parent_span_id == got["kinds"].span_id, name
        assert got[name].attributes["dask.span.task_states.memory"] >= 1, name
    assert got["map"].attributes["dask.span.task_states.memory"] == 3
    assert got["delayed"].attributes["dask.span.task_states.memory"] == 6
    assert got["kinds"].attributes["dask.span.task_states.memory"] == sum(
        got[n].attributes["dask.span.task_states.memory"] for n in names[1:]
    )


@cluster_test()
async def test_unfinished_spans_are_flushed_at_shutdown(otlp_receiver: OtlpReceiver) -> None:
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint, "otel-spans.traces.linger": "1h"}
    async with traced_cluster(config) as (client, scheduler, _):
        with span("finished but lingering"):
            assert await client.submit(abs, -5) == 5
        with span("still running"):
            future = client.submit(_block, 2)
        await await_until(lambda: any(ts.state == "processing" for ts in scheduler.tasks.values()))
        assert dask_spans(otlp_receiver) == []
        await scheduler.close()
        # close() exported both without waiting for the linger or the running task
        got = by_name(dask_spans(otlp_receiver))
        del future
    assert got["finished but lingering"].attributes["dask.span.done"] is True
    assert got["still running"].attributes["dask.span.done"] is False
    assert got["still running"].attributes["dask.span.task_states.processing"] == 1


def _block(seconds: float) -> None:
    import time

    time.sleep(seconds)


CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.mark.parametrize("link", [False, True])
@cluster_test()
async def test_root_adopts_the_callers_context_from_the_task_annotation(
    otlp_receiver: OtlpReceiver, link: bool
) -> None:
    traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as (c, _, _):
        with (
            dask.annotate(otel_spans={"traceparent": traceparent, "link": link}),
            span("called") as root_id,
            span("inner"),
        ):
            assert await c.submit(abs, -3) == 3
        got = by_name(await wait_spans(otlp_receiver, names_present("called", "inner")))
    root, inner = got["called"], got["inner"]
    assert inner.parent_span_id == root.span_id
    assert inner.trace_id == root.trace_id
    if link:
        assert root.trace_id == f"{ids.workflow_trace_id(root_id):032x}"
        assert root.parent_span_id == ""
        assert [(lk.trace_id, lk.span_id, lk.attributes) for lk in root.links] == [
            (CALLER_TRACE, CALLER_SPAN, {"dask.link.kind": "caller"})
        ]
    else:
        assert root.trace_id == CALLER_TRACE
        assert root.parent_span_id == CALLER_SPAN
        assert root.links == []


def wait_for(event_name: str, x: int) -> int:
    from distributed import Event

    Event(event_name).wait()
    return x


@pytest.mark.parametrize("linger", ["0ms", "1h"])
@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)], clean_kwargs={"threads": False})
async def test_cached_done_checks_agree_with_dask(
    c: Client, s: object, a: object, otlp_receiver: OtlpReceiver, linger: str
) -> None:
    """The poll decides done-ness from own groups and cached children; Dask walks all."""
    from distributed import Event

    await c.register_plugin(
        OtelSpansPlugin(
            endpoint=otlp_receiver.grpc_endpoint, traces={"linger": linger, "poll_interval": "1h"}
        )
    )
    tracker = s.plugins["otel-spans"]._tracker  # type: ignore[attr-defined]
    ext = s.extensions["spans"]  # type: ignore[attr-defined]

    def poll_and_compare() -> None:
        # One whole pass: a poll that runs out of its 5 ms slice (a loaded machine)
        # leaves the rest for the next loop iteration, which this test does not wait for.
        tracker.poll(final=False)
        for _ in range(10_000):
            if not tracker._deferred and tracker._discovered >= len(ext.spans):
                break
            tracker.poll(final=False)
        for uuid, open_span in tracker.open.items():
            cached = tracker.tracks[uuid].done_since is not None
            assert cached == open_span.done, (open_span.name, cached)
        for dask_span in ext.spans.values():
            if dask_span.id not in tracker.open:  # exported, hence done
                assert dask_span.done, dask_span.name

    go = Event("go")
    with span("root"):
        with span("quick"):
            quick = c.map(operator.neg, range(3))
        with span("blocked"), span("deep"):
            blocked = c.submit(wait_for, "go", 1)
        with span("other"):
            other = c.map(str, range(2))
    await c.gather(quick + other)
    poll_and_compare()
    assert not ext.spans[next(i for i, sp in ext.spans.items() if sp.name[-1] == "root")].done
    await go.set()
    assert await blocked == 1
    poll_and_compare()
    # New work under a finished sub-span: it and its ancestors are no longer done.
    with span("root"), span("quick"), span("late"):
        late = c.submit(wait_for, "later", 2)
    tasks = s.tasks  # type: ignore[attr-defined]
    await await_until(lambda: late.key in tasks and tasks[late.key].state == "processing", 10)
    poll_and_compare()
    await Event("later").set()
    assert await late == 2
    poll_and_compare()


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)], clean_kwargs={"threads": False})
async def test_dask_gives_each_task_group_to_one_computation(
    c: Client, s: object, a: object
) -> None:
    """What ``snapshots.fed_by`` rests on: a task group is held by one computation, the
    newest when the group was created, also when a busy scheduler adds a new graph to
    the running computation, and when a later graph depends on the group."""
    from distributed import Event

    gate = Event()
    with span("first"):
        held = c.submit(gate.wait, key="held-1")
        busy = c.submit(operator.add, 1, 2, key="busy-1")  # joins the running computation
    await busy
    with span("second"):
        after = c.submit(operator.add, busy, 1, key="after-1")  # depends on busy's group
    await gate.set()
    await held
    await after
    with span("third"):
        await c.submit(operator.add, after, 1, key="third-1")
    computations = list(s.computations)  # type: ignore[attr-defined]
    holders: dict[str, int] = {}
    for computation in computations:
        for tg in computation.groups:
            holders[tg.name] = holders.get(tg.name, 0) + 1
    assert {"held", "busy", "after", "third"} <= set(holders)
    assert set(holders.values()) == {1}, holders
    assert len(computations) >= 2  # the idle scheduler started a new one at least once


@cluster_test()
async def test_a_span_keeps_its_computation_after_dask_dropped_it(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Dask keeps its recent computations (100 by default, 1 here), which a busy
    scheduler rolls over before a span is exported (``traces.linger`` after it is done):
    the span's computation event and its task group's submission time come from the
    computation that held its groups when it was first seen."""
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.traces.linger": "1s",
        "distributed.diagnostics.computations.max-history": 1,
    }
    async with traced_cluster(config) as (client, scheduler, _):
        with span("first") as first_id:
            assert await client.submit(operator.add, 1, 2, key="first-1") == 3
            (computation,) = scheduler.computations
        with span("second"):  # a new computation: the first one leaves Dask's deque
            assert await client.submit(operator.add, 3, 4, key="second-1") == 7
        assert computation not in scheduler.computations
        await wait_spans(otlp_receiver, names_present("first", "second"))
        group = await await_until(
            lambda: [
                s
                for s in otlp_receiver.spans()
                if s.attributes.get("dask.task_group.name") == "first"
            ]
        )
    (first,) = [s for s in dask_spans(otlp_receiver) if s.attributes["dask.span.id"] == first_id]
    events = [e for e in first.events if e.name == "dask.computation"]
    assert [e.attributes["dask.computation.id"] for e in events] == [str(computation.id)]
    assert group[0].attributes["dask.task_group.submitted"] == int(computation.start * 1e9)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)], clean_kwargs={"threads": False})
async def test_a_span_is_exported_once_its_own_linger_is_over(
    c: Client, s: object, a: object, otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each done span waits out ``traces.linger`` from when the poll first saw it done,
    whatever spans finished before or after it; one that got new work waits again from
    when it is done again."""
    from otel_spans.scheduler import tracking

    await c.register_plugin(
        OtelSpansPlugin(
            endpoint=otlp_receiver.grpc_endpoint, traces={"linger": "10s", "poll_interval": "1h"}
        )
    )
    tracker = s.plugins["otel-spans"]._tracker  # type: ignore[attr-defined]
    clock = [1_000.0]
    monkeypatch.setattr(tracking, "time", lambda: clock[0])

    ext = s.extensions["spans"]  # type: ignore[attr-defined]

    def poll_at(t: float) -> set[str]:
        clock[0] = t
        # One whole pass: a poll past its 5 ms slice (a loaded machine) leaves the rest
        # for the next loop iteration, which this test does not wait for.
        tracker.poll(final=False)
        for _ in range(10_000):
            if not tracker._deferred and tracker._discovered >= len(ext.spans):
                break
            tracker.poll(final=False)
        return {tracker.open[uuid].name[-1] for uuid in tracker.open}

    held = []  # results kept: a released one is a transition, which re-checks its span
    ids = {}

    async def done(name: str) -> None:
        with span(name) as ids[name]:
            held.append(c.submit(operator.neg, 1, key=f"{name}-1"))
            await held[-1]

    await done("a")
    assert "a" in poll_at(1_000.0)  # done at 1000: lingers until 1010
    await done("b")
    assert {"a", "b"} <= poll_at(1_005.0)  # done at 1005
    await done("c")
    assert {"a", "b", "c"} <= poll_at(1_008.0)  # done at 1008
    # New work in b (its annotation: the same Dask span): b is no longer done.
    with dask.annotate(span={"name": ("b",), "ids": (ids["b"],)}):
        more = c.submit(wait_for, "b-more", 2)
    tasks = s.tasks  # type: ignore[attr-defined]
    await await_until(lambda: more.key in tasks and tasks[more.key].state == "processing", 10)
    assert tasks[more.key].group.span_id == ids["b"]
    assert {"a", "b", "c"} <= poll_at(1_009.0)
    open_now = poll_at(1_010.5)
    assert "a" not in open_now and {"b", "c"} <= open_now
    from distributed import Event

    await Event("b-more").set()
    assert await more == 2
    assert {"b", "c"} <= poll_at(1_011.0)  # b done again at 1011: lingers until 1021
    open_now = poll_at(1_018.5)
    assert "c" not in open_now and "b" in open_now
    assert "b" not in poll_at(1_021.5)
