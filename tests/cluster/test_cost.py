"""Cost conserves and parallel efficiency has one definition (docs/telemetry.md, Cost and
efficiency).

Two workflows of sleeping tasks run side by side on a cluster of 4 threads, then the
cluster idles. The design gives the expected values: each workflow's tasks are busy for
the seconds they sleep, so each pays for that and not for the other's work or the
whole cluster; the cluster offered its 4 threads for as long as its workers lived,
which the test brackets with its own clock; and the workflows' costs plus the idle cost
add up to the cluster's.

A second workload takes the other branch of the model: seceded tasks
(``distributed.secede``) hold no thread the cluster offers, so their busy time runs
ahead of the thread time offered. Idle is a counter and is never taken back: the
cluster's cost runs ahead of what it offered until idle time catches up.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import dask.config
import pytest
from distributed import Client, Scheduler, Worker, secede, span

from otel_spans.analysis.workflow import analyse
from otel_spans.export.files import to_otlp_json
from otel_spans.report.build import build_workflows
from otel_spans.report.load import load_spans
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import flatten_metrics
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


def seceded_nap(seconds: float) -> float:
    """Leave the worker's thread pool, then sleep: busy time on no offered thread.

    Returns how long it ran by its own clock: on a loaded machine a woken thread waits
    for a core, and that wait is busy time too (Dask measures the task, not the sleep).
    """
    started = time.perf_counter()
    secede()
    time.sleep(seconds)
    return time.perf_counter() - started


def cost_seconds(value: float) -> float:
    """A cost back in thread-seconds."""
    return value / PRICE * 3600


def series(metrics: dict[tuple[str, tuple[Any, ...]], Any], name: str) -> dict[Any, Any]:
    return {attrs: v for (n, attrs), v in metrics.items() if n == name}


@cluster_test(120)
async def test_concurrent_workflows_and_idle_add_up_to_the_clusters_cost(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """Catches: a workflow charged for the thread time offered while it ran (the whole
    cluster's: twice its own tasks' here) or for the other workflow's tasks; idle that
    counts busy threads, or misses the cluster's idle time; shares that do not add up to
    what the threads cost; efficiency defined differently in the span attribute, the
    histogram, the PromQL and the report."""
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
    # The workflows' share is the designed busy time (both workflows' sleeps), not
    # the thread time offered while they ran.
    busy_min, busy_max = sum(ETL) + sum(ML), sum(ETL) + sum(ML) + OVERHEAD * THREADS
    assert busy_min <= cost_seconds(shares["workflows"]) <= busy_max
    # Idle: the idle gap alone left every thread idle; and all in all, what the
    # threads offered by the test's clock less the designed busy time.
    assert idle >= THREADS * IDLE_GAP
    assert THREADS * (t2 - t1) - busy_max <= idle <= THREADS * (t3 - t0) - busy_min
    assert cost_seconds(shares["idle"]) == pytest.approx(idle, rel=1e-9)
    # Conservation: the busy time reported after the reading of its interval (with
    # heartbeats) left idle ahead by at most busy_max, and the idle gap's
    # THREADS × IDLE_GAP idle thread-seconds exceed that: idle has caught up, and the
    # two shares are what the cluster's threads cost.
    assert busy_max < THREADS * IDLE_GAP  # the design leaves room to catch up
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


#: The seceded workload: SECEDED tasks, each seceding then sleeping SECEDED_SLEEP, on one
#: worker with one thread. All run at once, so their busy time is SECEDED ×
#: SECEDED_SLEEP while the cluster offers one thread for about SECEDED_SLEEP.
SECEDED, SECEDED_SLEEP = 6, 1.0
#: Offered thread time between the last reading before the tasks' time arrived and the
#: first with all of it: one reading interval (200 ms), or two heartbeats' worth if the
#: tasks' reports are split across two (0.5 s apart), with room for a stalled loop.
READING_GAP = 2.0


def cost_readings(receiver: OtlpReceiver) -> list[dict[str, float]]:
    """Per metrics export, in order: available, idle and the cost shares (seconds)."""
    out = []
    for record in receiver.records("metrics"):
        row: dict[str, float] = {}
        for p in flatten_metrics(record):
            if p.name == "dask.cluster.cpu.available":
                row["available"] = float(p.value)
            elif p.name == "dask.cluster.cpu.idle":
                row["idle"] = float(p.value)
            elif p.name == "dask.cluster.cost":
                row[str(p.attributes["dask.cost.share"])] = cost_seconds(float(p.value))
        if "available" in row:
            out.append(row)
    return out


@cluster_test(120)
async def test_seceded_tasks_run_the_cost_ahead_of_offered_time_until_idle_catches_up(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Catches: busy time clipped to the thread time offered (seceded tasks' time lost);
    idle recomputed as offered minus busy at each reading, so that it falls (a counter
    going backwards) or is clamped at 0 and then counts the same idle seconds twice;
    idle that never catches up, leaving the cluster's cost ahead for good."""
    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        **FAST,
        **FAST_METRICS,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.cpu-hour-price": PRICE,
    }
    with dask.config.set(config):
        async with (
            Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler,
            Worker(scheduler.address, host="127.0.0.1", nthreads=1) as worker,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            # an idle cluster first: idle is all that was offered
            await await_until(
                lambda: any(r.get("idle", 0) > 0 for r in cost_readings(otlp_receiver))
            )
            with span("seceded"):
                futures = client.map(
                    seceded_nap,
                    [SECEDED_SLEEP] * SECEDED,
                    key=[f"seceded-{i}" for i in range(SECEDED)],
                )
                ran = await client.gather(futures)
                assert len(ran) == SECEDED and min(ran) >= SECEDED_SLEEP
            await worker.heartbeat()
            busy_min = SECEDED * SECEDED_SLEEP
            busy_max = sum(ran) + OVERHEAD * SECEDED
            # every task's time is in: the first reading with all of it
            await await_until(
                lambda: any(
                    r.get("workflows", 0) >= busy_min for r in cost_readings(otlp_receiver)
                ),
                20,
                lambda: str(cost_readings(otlp_receiver)[-3:]),
            )
            readings = cost_readings(otlp_receiver)
            at = next(i for i, r in enumerate(readings) if r.get("workflows", 0) >= busy_min)
            before = max(i for i in range(at) if readings[i].get("workflows", 0) == 0)
            reached, last_idle = readings[at], readings[before]

            # Idle catches up once the cluster has offered what the cost ran ahead by:
            # at one thread, that many seconds (plus the margin of a loaded machine).
            ahead = reached["workflows"] + reached["idle"] - reached["available"]

            def caught_up() -> dict[str, float] | None:
                # idle is offered less busy again (not its old value, a little less)
                r = cost_readings(otlp_receiver)[-1]
                exact = r["idle"] == pytest.approx(r["available"] - r["workflows"], rel=1e-9)
                return r if exact else None

            settled = await await_until(caught_up, max(ahead, 0) + 15)
        history = cost_readings(otlp_receiver)

    # The seceded tasks' busy time, in full: more than the cluster offered meanwhile.
    assert busy_min <= reached["workflows"] <= busy_max, reached
    # Idle did not move while available grew: nothing was idle, and nothing is taken
    # back from a counter.
    assert reached["available"] > last_idle["available"]
    assert reached["idle"] == last_idle["idle"], (last_idle, reached)
    idles = [r["idle"] for r in history if "idle" in r]
    assert idles == sorted(idles), "idle went backwards"
    # So the cluster's cost ran ahead of the thread time it offered, by the busy time
    # less the thread time offered between the two readings (at most READING_GAP).
    assert ahead >= busy_min - READING_GAP, (last_idle, reached)
    # Then idle caught up: the shares again add up to what the thread offered, and
    # it took at least as many offered thread-seconds as the cost had run ahead.
    total = settled["workflows"] + settled["idle"]
    assert total == pytest.approx(settled["available"], rel=1e-9)
    assert settled["available"] - reached["available"] >= ahead
