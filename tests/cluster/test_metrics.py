"""Per-span worker metrics arrive over OTLP and in Prometheus with the scheduler's values."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import dask.array as da
import pytest
from distributed import Scheduler, span

from otel_spans import ids
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import flatten_metrics
from tests.servers.prometheus import PrometheusServer, promtool_check_metrics, sample_value
from tests.servers.rotel import RotelCollector
from tests.support.cluster import (
    FAST_METRICS,
    Cluster,
    await_until,
    cluster_test,
    process_cluster,
    traced_cluster,
)
from tests.support.received import latest

UNITS = {"seconds": "s", "bytes": "By", "count": "1"}


def expected_from_scheduler(scheduler: Scheduler) -> dict[tuple[str, tuple[Any, ...]], float]:
    """What the scheduler's Span objects say, in the exported series' shape."""
    out: dict[tuple[str, tuple[Any, ...]], float] = defaultdict(float)
    for sp in scheduler.extensions["spans"].spans.values():
        name, root = "/".join(sp.name), sp.name[0]
        own = dict(sp._cumulative_worker_metrics)
        if sp.parent is None:
            idle = ("execute", "N/A", "idle or other spans", "seconds")
            own[idle] = sp.cumulative_worker_metrics[idle]
        for (context, middle, activity, unit), value in own.items():
            if context != "execute" or not value:
                continue
            metric = {"seconds": "time", "bytes": "bytes", "count": "count"}[unit]
            attrs = {
                "dask.span.name": name,
                "dask.span.root": root,
                "dask.task.prefix": middle,
                "dask.activity": activity,
            }
            out[(f"dask.span.execute.{metric}", tuple(sorted(attrs.items())))] += value
    return out


async def workload(c: Cluster) -> None:
    client = c.client
    with span("workflow"):
        with span("load"):
            x = client.persist(da.random.random((300, 300), chunks=100))
            await client.wait_for_workers(2)
        with span("reduce"):
            assert await client.compute(x.sum()) > 0
        assert await client.submit(sum, [1, 2, 3]) == 6
    # Worker metrics travel with heartbeats: force one instead of waiting for it.
    await asyncio.gather(*(w.heartbeat() for w in c.workers))


@cluster_test(90)
async def test_otlp_metrics_equal_the_schedulers_span_metrics(otlp_receiver: OtlpReceiver) -> None:
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint, **FAST_METRICS}
    async with traced_cluster(config) as c:
        await workload(c)
        expected = expected_from_scheduler(c.scheduler)
        assert len(expected) >= 6

        def matches() -> bool:
            got = latest(otlp_receiver.metrics())
            return all(got.get(k) == pytest.approx(v, rel=1e-9) for k, v in expected.items())

        await await_until(matches, 20, lambda: _diff(expected, latest(otlp_receiver.metrics())))
        root = next(
            sp for sp in c.scheduler.extensions["spans"].spans.values() if sp.name == ("workflow",)
        )
        root_total = sum(
            v
            for (ctx, _, _, unit), v in root.cumulative_worker_metrics.items()
            if ctx == "execute" and unit == "seconds"
        )
    got = latest(otlp_receiver.metrics())
    by_root = sum(
        value
        for (name, attrs), value in got.items()
        if name == "dask.span.execute.time" and dict(attrs)["dask.span.root"] == "workflow"
    )
    assert by_root == pytest.approx(root_total, rel=1e-9)
    points = {p.name: p for p in otlp_receiver.metrics()}
    assert points["dask.span.execute.time"].unit == "s"
    assert points["dask.span.execute.bytes"].unit == "By"
    assert points["dask.span.execute.time"].kind == "sum"
    assert points["dask.span.execute.time"].is_monotonic
    tasks = {
        dict(attrs)["dask.span.name"]: v
        for (name, attrs), v in got.items()
        if name == "dask.span.tasks" and dict(attrs)["dask.task.state"] == "memory"
        and dict(attrs)["dask.task.prefix"] == "random_sample"
    }  # fmt: skip
    assert tasks == {"workflow/load": 9}
    duration = [p for p in otlp_receiver.metrics() if p.name == "dask.task.duration"]
    assert duration and duration[-1].kind == "histogram"
    assert any(p.exemplars for p in duration)
    # every exemplar points at a task span of this workflow's trace (the root's id)
    workflow_trace = f"{ids.workflow_trace_id(root.id):032x}"
    exemplars = [e for p in duration for e in p.exemplars]
    assert {e["trace_id"] for e in exemplars} == {workflow_trace}
    task_span_ids = {s.span_id for s in otlp_receiver.spans() if "dask.task.key" in s.attributes}
    assert {e["span_id"] for e in exemplars} <= task_span_ids
    cpu = [p for p in otlp_receiver.metrics() if p.name == "dask.span.cpu.available"]
    assert cpu and all(p.value > 0 for p in cpu)
    # high-cardinality ids never become metric attributes: worker addresses only on the
    # per-worker memory gauges, bounded by metrics.max-workers
    per_worker = {"dask.worker.memory", "dask.worker.memory_limit"}
    for p in otlp_receiver.metrics():
        for key, value in p.attributes.items():
            if p.name in per_worker and key == "dask.worker.address":
                continue
            assert "tcp://" not in str(value)
            assert "-" not in str(value) or len(str(value)) < 36 or " " in str(value)


def _diff(expected: dict, got: dict) -> str:
    lines = [f"{k}: expected {v}, got {got.get(k)}" for k, v in expected.items() if got.get(k) != v]
    return "\n".join(lines[:20])


@cluster_test(90)
async def test_sliced_passes_lose_nothing(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no time budget at all, every poll and metrics pass reads one span per loop
    iteration: the passes continue across iterations, every span gets its turn (a
    span that keeps lingering does not starve the others) and the totals match."""
    from otel_spans.scheduler import metrics_tick, tracking

    monkeypatch.setattr(tracking, "LOOP_BUDGET", 0.0)
    monkeypatch.setattr(metrics_tick, "LOOP_BUDGET", 0.0)
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint, **FAST_METRICS}
    async with traced_cluster(config) as c:
        plugin = c.scheduler.plugins["otel-spans"]
        slices = {"tick": 0, "poll": 0}
        resume_tick, resume_poll = plugin._metrics._resume_tick, plugin._tracker._resume_poll
        tick, poll = resume_tick.callback, resume_poll.callback

        def count_tick() -> None:
            slices["tick"] += 1
            tick()

        def count_poll() -> None:
            slices["poll"] += 1
            poll()

        resume_tick.callback, resume_poll.callback = count_tick, count_poll
        with span("many"):
            for i in range(20):
                with span(f"part-{i}"):
                    # tuple keys: one task group (hence one span) per part
                    assert await c.client.submit(abs, -i, key=(f"part-{i}", 0)) == i
        await workload(c)
        expected = expected_from_scheduler(c.scheduler)
        for i in range(20):
            attrs = {
                "dask.span.name": f"many/part-{i}",
                "dask.span.root": "many",
                "dask.task.prefix": "part",  # key_split("part-3")
                "dask.task.state": "memory",
            }
            expected[("dask.span.tasks", tuple(sorted(attrs.items())))] = 1

        def matches() -> bool:
            got = latest(otlp_receiver.metrics())
            return all(got.get(k) == pytest.approx(v, rel=1e-9) for k, v in expected.items())

        await await_until(matches, 30, lambda: _diff(expected, latest(otlp_receiver.metrics())))
        await await_until(lambda: plugin.stats()["open_spans"] == 0, 30)
    assert slices["tick"] > 20 and slices["poll"] > 20, slices
    exported = {s.name for s in otlp_receiver.spans() if s.attributes.get("dask.span.id")}
    assert {f"part-{i}" for i in range(20)} <= exported


@cluster_test(90)
async def test_prometheus_scrapes_the_pull_endpoint(prometheus: Any) -> None:
    config = {
        "otel-spans.metrics.exporter": "none",
        "otel-spans.metrics.prometheus-port": 0,
        "otel-spans.metrics.prometheus-host": "127.0.0.1",
        "otel-spans.metrics.cpu-hour-price": 0.5,
        **FAST_METRICS,
    }
    async with traced_cluster(config) as c:
        await workload(c)
        port = (await c.client.scheduler.otel_spans_stats())["prometheus_port"]
        url = f"http://127.0.0.1:{port}/metrics"
        expected = expected_from_scheduler(c.scheduler)
        per_name: dict[str, float] = defaultdict(float)
        for (name, attrs), value in expected.items():
            if name == "dask.span.execute.time":
                per_name[dict(attrs)["dask.span.name"]] += value

        def exposition() -> str:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read().decode()

        await await_until(lambda: "dask_span_execute_time_seconds_total" in exposition())
        ok, output = promtool_check_metrics(exposition())
        assert ok, output
        server: PrometheusServer = await asyncio.to_thread(prometheus, [f"127.0.0.1:{port}"])
        promql = "sum by (dask_span_name) (dask_span_execute_time_seconds_total)"

        async def queried() -> dict[str, float] | None:
            result = await asyncio.to_thread(server.query, promql)
            values = {r["metric"]["dask_span_name"]: sample_value(r) for r in result}
            if all(values.get(k) == pytest.approx(v, rel=1e-6) for k, v in per_name.items()):
                return values
            return None

        values = await await_until(queried, 40, lambda: f"wanted {dict(per_name)}")
        assert set(values) == {"workflow", "workflow/load", "workflow/reduce"}
        cost = await asyncio.to_thread(server.query, "sum(dask_span_cost_total)")
        assert cost and sample_value(cost[0]) > 0


# Deadlines, not a speed claim: 5,000 span() blocks cost Dask itself about 5 ms each
# on a quiet machine, several times that on a loaded one.
@cluster_test(360)
async def test_five_thousand_span_names_stay_within_the_budget(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.max-span-names": 100,
        "otel-spans.traces.exporter": "none",  # metrics only
        "otel-spans.logs.exporter": "none",
        "distributed.scheduler.worker-saturation": float("inf"),
        "otel-spans.metrics.interval": "1s",
    }
    async with traced_cluster(config) as c:
        futures = []
        for i in range(5000):
            with span(f"job-{i}"):
                futures.append(c.client.submit(abs, -i, key=f"n{i}-0"))
        assert sum(await c.client.gather(futures)) == sum(range(5000))

        def overflowed() -> float | None:
            # Only the newest export: with cumulative temporality it holds every
            # series, and decoding all earlier ones on every poll would starve the
            # scheduler sharing this event loop.
            requests = otlp_receiver.records("metrics")
            if not requests:
                return None
            got = latest(flatten_metrics(requests[-1]))
            key = ("otel_spans.cardinality.overflow", (("otel_spans.attribute", "dask.span.name"),))
            tasks = [
                v
                for (name, attrs), v in got.items()
                if name == "dask.span.tasks" and dict(attrs)["dask.task.state"] == "memory"
            ]
            return got.get(key) if sum(tasks) == 5000 else None

        # distinct names replaced: 5,000 (a root's name is its span's), 100 kept
        designed = 5000 - 100
        await await_until(
            lambda: overflowed() == designed,
            180,
            lambda: f"overflow {overflowed()}, designed {designed}",
            interval=0.5,
        )
        # Without traces nothing is built for them, but the span metrics that come from
        # a span's export (duration, workflow efficiency) still are.
        assert "dag" not in c.scheduler.plugins["otel-spans"].stats()
    assert otlp_receiver.records("traces") == []
    exported = {p.name for p in flatten_metrics(otlp_receiver.records("metrics")[-1])}
    assert {"dask.span.duration", "dask.workflow.efficiency"} <= exported
    names = {
        p.attributes["dask.span.name"]
        for p in flatten_metrics(otlp_receiver.records("metrics")[-1])
        if "dask.span.name" in p.attributes
    }
    assert len(names) == 101  # 100 admitted + "(overflow)"
    assert "(overflow)" in names


def test_metrics_through_rotel_with_http(
    otlp_receiver: OtlpReceiver, rotel: RotelCollector
) -> None:

    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        "otel-spans.endpoint": rotel.http_endpoint,
        "otel-spans.protocol": "http/protobuf",
        **FAST_METRICS,
    }
    with process_cluster(config, n_workers=1) as (_cluster, client):
        with span("through rotel"):
            assert client.submit(sum, [1, 2]).result() == 3
        (point, *_) = otlp_receiver.wait_for_metrics(
            lambda p: (
                p.name == "dask.span.tasks"
                and p.attributes.get("dask.span.name") == "through rotel"
            ),
            timeout=30,
        )
    # the workload's one task, finished in memory, through rotel over HTTP
    assert point.value == 1
    assert point.attributes["dask.task.state"] == "memory"
    assert point.attributes["dask.task.prefix"] == "sum"


@cluster_test(60)
async def test_embedded_default_writes_metrics_files(tmp_path: Path) -> None:
    config = {"otel-spans.directory": str(tmp_path), **FAST_METRICS}
    async with traced_cluster(config) as c:
        with span("offline"):
            assert await c.client.submit(sum, [4, 5]) == 9

        def metric_names() -> set[str] | None:
            names = set()
            for file in tmp_path.glob("metrics-scheduler-*.jsonl"):
                for line in file.read_text().splitlines():
                    for rm in json.loads(line)["resourceMetrics"]:
                        for sm in rm["scopeMetrics"]:
                            names.update(m["name"] for m in sm["metrics"])
            return names if names >= wanted else None

        # The CPU made available arrives with the span's export or a later metrics
        # tick, not always in the same export as its task counts: wait for all three.
        wanted = {"dask.span.tasks", "dask.span.cpu.available", "otel_spans.records"}
        names = await await_until(metric_names, 20, lambda: f"not all of {wanted} exported")
    assert names >= wanted
    assert list(tmp_path.glob("traces-scheduler-*.jsonl"))


# dask.dataframe warns that layer annotations are ignored with query planning; the
# span annotation travels as the graph's global annotation all the same.
@pytest.mark.filterwarnings("ignore:Dask annotations .* detected:UserWarning")
@cluster_test(120)
async def test_p2p_shuffle_time_and_the_execute_time_that_adds_up_to_the_cpu(
    otlp_receiver: OtlpReceiver,
) -> None:
    """The contract with a real P2P shuffle (docs/telemetry.md, per-span worker metrics).

    Over a root, the ``dask.span.execute.time`` series (its idle share included) add up
    to the thread-seconds the cluster made available (``dask.span.cpu.available``), as
    Dask computes its "idle or other spans" activity; the shuffle's own work is in
    ``dask.span.p2p.time``, equal to the root's ``p2p`` seconds.
    """
    import dask.dataframe as dd
    import pandas as pd

    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint, **FAST_METRICS}
    async with traced_cluster(config) as c:
        frame = pd.DataFrame({"k": [i % 7 for i in range(20_000)], "v": range(20_000)})
        with span("shuffled"):
            shuffled = dd.from_pandas(frame, npartitions=8).shuffle(on="k", shuffle_method="p2p")
            result = await c.client.compute(shuffled)
        assert len(result) == 20_000
        await asyncio.gather(*(w.heartbeat() for w in c.workers))
        root = next(
            sp for sp in c.scheduler.extensions["spans"].spans.values() if sp.name == ("shuffled",)
        )
        assert any(k[0] == "p2p" and v > 0 for k, v in root.cumulative_worker_metrics.items())

        def totals() -> dict[str, float]:
            out: dict[str, float] = defaultdict(float)
            for (name, attrs), value in latest(otlp_receiver.metrics()).items():
                if dict(attrs).get("dask.span.root") == "shuffled" and isinstance(
                    value, int | float
                ):
                    out[name] += value
            return out

        def settled() -> bool:
            got = totals()
            cpu = got.get("dask.span.cpu.available", 0.0)
            return bool(
                got.get("dask.span.p2p.time")
                and cpu
                and got.get("dask.span.execute.time") == pytest.approx(cpu, rel=1e-6)
            )

        await await_until(settled, 30, lambda: dict(totals()))
    got = totals()
    assert got["dask.span.execute.time"] == pytest.approx(root.active_cpu_seconds, rel=1e-6)
    p2p_seconds = sum(
        v for k, v in root.cumulative_worker_metrics.items() if k[0] == "p2p" and k[-1] == "seconds"
    )
    assert got["dask.span.p2p.time"] == pytest.approx(p2p_seconds, rel=1e-6)
