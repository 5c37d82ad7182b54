"""Strange input from user code never crashes the scheduler and is exported within limits.

Span tags, task keys, exceptions and results come from user code: each case runs on a
real cluster and checks what went over the wire, that the workload's results are
unchanged, and that otel-spans caught nothing (``internal_errors`` stays 0).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest
from distributed import Client, span, wait

from otel_spans.task_records import DeferredTask
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster
from tests.support.received import dask_spans
from tests.support.tasks import inc

HUGE = "h" * 100_000
NON_ASCII = "données-处理-✓-🚀"
CONTROL = "tab\tnew\nline\x00nul\x1b[31mred\x7f"


async def no_internal_errors(client: Client) -> dict[str, Any]:
    current = await stats(client)
    assert current["internal_errors"] == 0, current
    return current


@cluster_test(90)
async def test_empty_huge_non_ascii_and_control_character_tags(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.interval": "200ms",
    }
    tags = {"empty": "", "huge": HUGE, "non-ascii": NON_ASCII, "control": CONTROL}
    async with traced_cluster(config) as (client, _, _):
        for i, (case, tag) in enumerate(tags.items()):
            with span(case, tag):
                assert await client.submit(inc, i, key=f"inc-{case}") == i + 1
        got = await await_until(
            lambda: (
                len({tuple(s.attributes["dask.span.tags"]) for s in dask_spans(otlp_receiver)}) >= 8
                and otlp_receiver.metrics()
                and dask_spans(otlp_receiver)
            )
        )
        await no_internal_errors(client)
        # the next workload is unaffected
        assert await client.submit(inc, 41, key="inc-after") == 42
    limit = 4096
    by_path = {tuple(s.attributes["dask.span.tags"]): s for s in got}
    assert by_path[("empty", "")].name == "(empty)"
    huge = by_path[("huge", HUGE[:limit])]
    assert huge.name == HUGE[:limit]
    assert by_path[("non-ascii", NON_ASCII)].name == NON_ASCII  # unchanged, not escaped
    assert by_path[("control", CONTROL)].name == CONTROL  # valid UTF-8, passed through
    # Metric attribute values are cut shorter: a label names a series, it is no document.
    names = {
        p.attributes.get("dask.span.name")
        for p in otlp_receiver.metrics()
        if "dask.span.name" in p.attributes
    }
    assert "huge/" + HUGE[: 256 - len("huge/")] in names
    assert max(len(n) for n in names) <= 256
    assert f"non-ascii/{NON_ASCII}" in names


@cluster_test(420)
async def test_ten_thousand_distinct_span_names(otlp_receiver: OtlpReceiver) -> None:
    """100 workflows, each a chain of 100 nested Dask spans: 10k distinct names, fast.

    (10k separate ``span()`` blocks cost Dask itself ~5 ms each here; nesting creates
    the same number of distinct spans and tags in 100 graph submissions.)
    """
    roots, depth = 100, 100
    n = roots * depth
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.traces.tasks.mode": "none",
        "otel-spans.metrics.interval": "500ms",
        "otel-spans.metrics.max-span-names": 100,
        "distributed.diagnostics.computations.nframes": 0,
    }
    async with traced_cluster(config) as (client, _, _):
        futures = []
        for i in range(roots):
            with span(*(f"workflow-{i}-level-{j}" for j in range(depth))):
                # a prefix per workflow: a live task group keeps the first span it was in
                futures.append(client.submit(inc, i, key=f"w{i}-0"))
        assert sum(await client.gather(futures)) == roots * (roots + 1) // 2

        async def all_accounted() -> dict[str, Any] | None:
            current = await stats(client)
            traces = current["traces"]
            settled = traces["queued"] == traces["sending"] == 0
            return current if settled and traces["submitted"] == n + roots else None

        # A deadline, not a speed claim: on a loaded 2-core machine the 10,100 spans
        # take minutes to export (seconds on a quiet one).
        final = await await_until(all_accounted, timeout=300)
        assert final["internal_errors"] == 0
        # Distinct values replaced: every span's name (its tags joined by "/", cut to
        # 256 characters: a deep chain's names end up alike) and root, less the 100 kept.
        names = {f"workflow-{i}-level-0" for i in range(roots)} | {
            "/".join(f"workflow-{i}-level-{k}" for k in range(j + 1))[:256]
            for i in range(roots)
            for j in range(depth)
        }
        replaced = len(names) - 100
        await await_until(
            lambda: _overflow(otlp_receiver) == replaced,
            timeout=30,
            message=lambda: f"overflow {_overflow(otlp_receiver)}, designed {replaced}",
        )
    traces = final["traces"]
    # every Dask span and task group exported or counted, none lost silently
    assert traces["exported"] + traces["dropped"] + traces["failed"] == n + roots
    exported = dask_spans(otlp_receiver)
    assert len({s.name for s in exported}) >= n - traces["dropped"] - traces["failed"]
    assert len({s.trace_id for s in exported}) == roots
    deepest = max(exported, key=lambda s: len(s.attributes["dask.span.tags"]))
    assert len(deepest.attributes["dask.span.tags"]) == depth
    # the metric budget held: 100 names, then (overflow); long paths cut to 256
    series = {
        p.attributes["dask.span.name"]
        for p in otlp_receiver.metrics()
        if p.name == "dask.span.tasks" and "dask.span.name" in p.attributes
    }
    assert "(overflow)" in series and len(series) <= 101
    assert max(len(name) for name in series) == 256


def _overflow(receiver: OtlpReceiver) -> float:
    values = [
        p.value
        for p in receiver.metrics()
        if p.name == "otel_spans.cardinality.overflow"
        and p.attributes.get("otel_spans.attribute") == "dask.span.name"
    ]
    return max(values, default=0)


def fail(message: str) -> None:
    raise ValueError(message)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


def fail_unprintable() -> None:
    raise Unprintable()


def lock() -> threading.Lock:
    return threading.Lock()  # cannot be pickled


def use(value: object) -> str:
    return type(value).__name__


@cluster_test(90)
async def test_odd_keys_strange_exceptions_and_unpicklable_results(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.traces.tasks.mode": "all",
    }
    # Every key type Dask accepts (bytes keys are refused by Dask itself, at submit).
    keys: list[Any] = [("tuple-key", 1, "a"), "str-key", 1234, 5.5, ("nested", ("t", 2), 3)]
    async with traced_cluster(config) as (client, _, workers):
        with span("odd keys"):
            futures = [client.submit(inc, i, key=k) for i, k in enumerate(keys)]
            assert await client.gather(futures) == [1, 2, 3, 4, 5]
        with span("strange exceptions"):
            huge = client.submit(fail, "m" * 5_000_000, key="fail-huge")
            unprintable = client.submit(fail_unprintable, key="fail-unprintable")
            with pytest.raises(ValueError):
                await huge
            # Dask's worker cannot print it either: its own str() call raises, and that
            # RuntimeError is what the task fails with
            with pytest.raises(RuntimeError, match="no str for you"):
                await unprintable
        with span("unpicklable"):
            # Computed and held on its worker; only fetching it fails (in the client).
            made = client.submit(lock, key="lock-1", workers=[workers[0].address])
            await wait(made)
            with pytest.raises(TypeError, match="serialize"):
                await made
            local = client.submit(use, made, key="use-2", workers=[workers[0].address])
            assert await local == "lock"
        await await_until(
            lambda: (
                {"odd keys", "strange exceptions", "unpicklable"}
                <= {s.name for s in otlp_receiver.spans()}
            ),
            timeout=30,
        )
        await no_internal_errors(client)
        assert await client.submit(inc, 1, key="inc-after") == 2
    task_spans = [s for s in otlp_receiver.spans() if "dask.task.key" in s.attributes]
    task_keys = {s.attributes["dask.task.key"] for s in task_spans}
    assert {str(k) for k in keys} <= task_keys
    erred = {s.attributes["dask.task.key"]: s for s in task_spans if s.status_code == 2}
    huge_exc = next(e for e in erred["fail-huge"].events if e.name == "exception")
    assert huge_exc.attributes["exception.type"] == "ValueError"
    assert 0 < len(huge_exc.attributes["exception.message"]) <= 4096
    assert len(erred["fail-huge"].status_message) <= 4096
    assert "fail-unprintable" in erred
    assert next(e for e in erred["fail-unprintable"].events if e.name == "exception")
    for log in otlp_receiver.logs():
        assert len(str(log.body)) <= 2 * 4096 + 100


@cluster_test(60)
async def test_a_task_that_cannot_be_recorded_costs_only_itself(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Kept tasks are recorded on the exporter thread, from what the worker reported.

    Should a report ever be malformed, that one task span is missing and counted as an
    internal error; the other records of its batch are exported, and nothing reaches
    the scheduler.
    """
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint}
    async with traced_cluster(config) as (client, scheduler, _):
        signals = scheduler.plugins["otel-spans"].signals
        good = DeferredTask(
            key="good",
            prefix="good",
            group="good",
            trace_id=1,
            span_id=2,
            parent_span_id=3,
            state="memory",
            attempt=1,
            sampled_because="slowest",
            finished_at=1.5,
            phases=(("compute", 1.0, 2.0, None),),
            worker="",
            thread=None,
            nbytes=0,
            typename="",
            dependencies=(("dep", 0),),
        )
        bad_phase = ("compute", "noon", 2.0, None)
        bad = replace(good, key="bad", span_id=4, phases=(bad_phase,))
        assert signals.submit_span(bad) and signals.submit_span(good)
        got = await await_until(
            lambda: [s for s in otlp_receiver.spans() if s.attributes.get("dask.task.key")]
        )
        assert (await stats(client))["internal_errors"] == 1
        assert await client.submit(inc, 1, key="inc-after") == 2
    (task,) = got
    assert task.attributes["dask.task.key"] == "good"
    assert task.attributes["dask.task.dependencies"] == ["('dep', 0)"]
    assert (task.start_ns, task.end_ns) == (1_000_000_000, 2_000_000_000)
