"""Cost conserves and parallel efficiency has one definition (docs/telemetry.md, Cost and
efficiency).

Two workflows of sleeping tasks run side by side on a cluster of 4 threads, then the
cluster idles. The design gives the expected values: each workflow's tasks are busy for
the seconds they sleep, so each pays for that and not for the other's work or the
whole cluster; the cluster offered its 4 threads for as long as its workers lived,
which the test brackets with its own clock; and the workflows' costs plus the idle cost
add up to the cluster's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import dask.config
import pytest
from distributed import Client, Scheduler, Worker, span

from otel_spans.analysis.workflow import analyse
from otel_spans.export.files import to_otlp_json
from otel_spans.report.build import build_workflows
from otel_spans.report.load import load_spans
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import FAST, FAST_METRICS, await_until, cluster_test
from tests.support.received import latest
from tests.support.tasks import nap

pytestmark = pytest.mark.usefixtures("default_otel_config")

#: Per thread-hour: 3.6 makes one thread-second cost 0.001.
PRICE = 3.6
THREADS_PER_WORKER, WORKERS = 2, 2
THREADS = THREADS_PER_WORKER * WORKERS
#: The two workflows' tasks: seconds each sleeps; 4 tasks on 4 threads run together.
ETL = [1.0, 1.0]
ML = [1.0, 1.0]
IDLE_GAP = 1.5
#: What a sleeping task's thread time may exceed its sleep by (executor overhead,
#: the sleep overshooting on a busy machine), per task.
OVERHEAD = 0.1


def cost_seconds(value: float) -> float:
    """A cost back in thread-seconds."""
    return value / PRICE * 3600


def series(metrics: dict[tuple[str, tuple[Any, ...]], Any], name: str) -> dict[Any, Any]:
    return {attrs: v for (n, attrs), v in metrics.items() if n == name}


@cluster_test(120)
async def test_concurrent_workflows_and_idle_add_up_to_the_clusters_cost(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        **FAST,
        **FAST_METRICS,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.cpu-hour-price": PRICE,
        # long enough for the forced heartbeats to land before the roots are exported
        "otel-spans.traces.linger": "1s",
    }
    with dask.config.set(config):
        async with Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler:
            t0 = time.time()
            workers = [
                Worker(scheduler.address, host="127.0.0.1", nthreads=THREADS_PER_WORKER)
                for _ in range(WORKERS)
            ]
            await asyncio.gather(*workers)
            t1 = time.time()
            try:
                async with Client(scheduler.address, asynchronous=True) as client:
                    # submitted together, so they share the cluster's threads
                    with span("etl"):
                        etl = client.map(nap, ETL, key=[f"extract-{i}" for i in range(len(ETL))])
                    with span("ml"):
                        ml = client.map(nap, ML, key=[f"train-{i}" for i in range(len(ML))])
                    assert await client.gather(etl + ml) == ETL + ML
                    await asyncio.gather(*(w.heartbeat() for w in workers))
                    await await_until(
                        lambda: {"etl", "ml"} <= {s.name for s in otlp_receiver.spans()}, 20
                    )
                    await asyncio.sleep(IDLE_GAP)  # the workload: an idle cluster
            finally:
                t2 = time.time()
                await asyncio.gather(*(w.close() for w in workers))
                t3 = time.time()
        # closed: the final reading counted the workers leaving, and was exported

    def cluster_cost() -> dict[Any, Any]:
        return series(latest(otlp_receiver.metrics()), "dask.cluster.cost")

    await await_until(lambda: len(cluster_cost()) == 2, 20)
    metrics = latest(otlp_receiver.metrics())
    (available,) = series(metrics, "dask.cluster.cpu.available").values()
    (idle,) = series(metrics, "dask.cluster.cpu.idle").values()
    shares = {dict(attrs)["dask.cost.share"]: v for attrs, v in cluster_cost().items()}
    span_costs = {
        dict(attrs)["dask.span.name"]: v for attrs, v in series(metrics, "dask.span.cost").items()
    }

    # The cluster offered its threads while its workers lived, by the test's own clock.
    assert THREADS * (t2 - t1) <= available <= THREADS * (t3 - t0)
    # Each workflow pays for its own tasks' thread time, from the design, not for the
    # threads offered while it ran (which held the other's work too).
    assert set(span_costs) == {"etl", "ml"}
    offered = {
        dict(attrs)["dask.span.name"]: v
        for attrs, v in series(metrics, "dask.span.cpu.available").items()
    }
    assert offered["etl"] >= sum(ETL) + sum(ML) - OVERHEAD * THREADS
    assert sum(ETL) <= cost_seconds(span_costs["etl"]) <= sum(ETL) + OVERHEAD * len(ETL)
    assert sum(ML) <= cost_seconds(span_costs["ml"]) <= sum(ML) + OVERHEAD * len(ML)
    # The idle gap alone left every thread idle.
    assert idle >= THREADS * IDLE_GAP
    # Conservation: the workflows' share is every span's cost, idle the rest ...
    assert shares["workflows"] == pytest.approx(sum(span_costs.values()), rel=1e-9)
    assert cost_seconds(shares["idle"]) == pytest.approx(idle, rel=1e-9)
    # ... and together they are what the cluster's threads cost.
    assert cost_seconds(sum(shares.values())) == pytest.approx(available, rel=0.01)

    # One definition of parallel efficiency, the same in every signal.
    roots = {s.name: s for s in otlp_receiver.spans() if s.name in ("etl", "ml")}
    trace_file = tmp_path / "traces.jsonl"
    trace_file.write_text("".join(to_otlp_json(r) + "\n" for r in otlp_receiver.requests("traces")))
    built = build_workflows(load_spans(trace_file))
    reports = {b.workflow.name: analyse(b.workflow) for b in built}
    for name in ("etl", "ml"):
        on_span = roots[name].attributes["dask.workflow.efficiency"]
        # half of the 4 threads, the other workflow's tasks in the other half
        assert 0.4 < on_span < 0.6, (name, on_span)
        (histogram,) = (
            v
            for (n, attrs), v in metrics.items()
            if n == "dask.workflow.efficiency" and dict(attrs)["dask.span.root"] == name
        )
        assert histogram["count"] == 1 and histogram["sum"] == on_span
        # the PromQL of docs/telemetry.md and the dashboard, on the settled series
        execute = [
            (dict(attrs), v)
            for attrs, v in series(metrics, "dask.span.execute.time").items()
            if dict(attrs)["dask.span.root"] == name
        ]
        root_idle = sum(v for a, v in execute if a["dask.activity"] == "idle or other spans")
        promql = 1 - root_idle / sum(v for _, v in execute)
        assert promql == pytest.approx(on_span, rel=0.02)
        report = reports[name].efficiency
        assert report.basis == "worker metrics"
        assert report.efficiency == pytest.approx(on_span, rel=0.02)
