"""A collector that is down, hangs or dies never changes results, speed or shutdown."""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
import weakref

import pytest
from distributed import Client, Scheduler, span

from benchmarks.loop_lag import LoopLag
from otel_spans.config import ConfigError
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.ports import free_port, wait_until
from tests.servers.rotel import RotelCollector
from tests.support.cluster import await_until, cluster_test, process_cluster, stats, traced_cluster


def accounted(traces: dict[str, int]) -> int:
    """Every submitted record is in exactly one bucket."""
    return (
        traces["exported"]
        + traces["dropped"]
        + traces["failed"]
        + traces["unsent"]
        + traces["queued"]
        + traces["sending"]
    )


async def ping_latency(client: Client) -> float:
    start = time.perf_counter()
    await client.scheduler.identity()
    return time.perf_counter() - start


def square(x: int) -> int:
    return x * x


@cluster_test(90)
async def test_collector_down_for_the_whole_run() -> None:
    config = {
        "otel-spans.endpoint": f"http://127.0.0.1:{free_port()}",  # nothing listens
        "otel-spans.timeout": "500ms",
        "otel-spans.shutdown-timeout": "2s",
        "otel-spans.traces.tasks.mode": "none",
    }
    async with traced_cluster(config) as (client, scheduler, _):
        latencies = []
        for i in range(5):
            with span(f"step {i}"):
                # distinct key prefixes: a live task group would keep the first span
                numbers = range(i * 100, i * 100 + 100)
                futures = client.map(square, numbers, key=[f"sq{i}-{x}" for x in numbers])
                assert sum(await client.gather(futures)) == sum(
                    x * x for x in range(i * 100, i * 100 + 100)
                )
                latencies.append(await ping_latency(client))
        traces = (await await_until(lambda: _failed_all(client, 10)))["traces"]
        assert traces["exported"] == 0
        # 5 Dask spans and their 5 task groups (tasks.mode none)
        assert accounted(traces) == traces["submitted"] == 10
        started = time.perf_counter()
        await scheduler.close()
        assert time.perf_counter() - started < 2 + 1.5
    assert max(latencies) < 0.5, latencies


async def _failed_all(client: Client, n: int) -> dict | None:
    current = await stats(client)
    return current if current["traces"]["failed"] >= n else None


@cluster_test(90)
async def test_hanging_collector_drops_and_counts_and_shutdown_is_bounded(
    otlp_receiver: OtlpReceiver,
) -> None:
    otlp_receiver.set_mode("hang")
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.timeout": "5s",
        "otel-spans.queue-size": 2,
        "otel-spans.batch-size": 1,
        "otel-spans.shutdown-timeout": "1s",
        "otel-spans.traces.tasks.mode": "none",
    }
    async with traced_cluster(config) as (client, scheduler, _):
        for i in range(8):
            with span(f"burst {i}"):
                assert await client.submit(square, i, key=f"sq{i}-0") == i * i
        current = await await_until(lambda: _dropped_some(client))
        traces = current["traces"]
        # one batch in flight (hanging), at most queue-size queued, the rest dropped
        assert traces["sending"] == 1
        assert 1 <= traces["queued"] <= 2
        assert traces["dropped"] >= traces["submitted"] - 3
        assert traces["exported"] == traces["failed"] == 0
        assert accounted(traces) == traces["submitted"] == 16  # 8 spans + 8 task groups
        assert await ping_latency(client) < 0.5
        started = time.perf_counter()
        await scheduler.close()
        assert time.perf_counter() - started < 1 + 1.5
    otlp_receiver.set_mode("ok")


async def _dropped_some(client: Client) -> dict | None:
    current = await stats(client)
    traces = current["traces"]
    return current if traces["submitted"] == 16 and traces["dropped"] else None


def test_bad_configuration_stops_the_scheduler_start() -> None:
    import dask.config

    async def start() -> None:
        async with Scheduler(host="127.0.0.1", dashboard_address=":0", port=0):
            pass

    with (
        dask.config.set(
            {"distributed.scheduler.preload": ["otel_spans"], "otel-spans.protocol": "udp"}
        ),
        pytest.raises(RuntimeError, match="Scheduler failed to start") as info,
    ):
        asyncio.run(start())
    assert isinstance(info.value.__cause__, ConfigError)
    assert str(info.value.__cause__) == (
        "otel-spans.protocol: invalid value 'udp'; expected grpc or http/protobuf"
    )


def test_end_to_end_through_rotel_with_worker_processes_and_a_collector_restart(
    otlp_receiver: OtlpReceiver, rotel: RotelCollector
) -> None:

    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        "otel-spans.endpoint": rotel.grpc_endpoint,
        # Room for the exporter's one retry after it rebuilds a channel broken by the kill.
        "otel-spans.timeout": "3s",
        "otel-spans.traces.linger": "100ms",
        "otel-spans.traces.poll-interval": "50ms",
    }
    with process_cluster(config, n_workers=2) as (cluster, client):
        assert all(not isinstance(w, str) for w in cluster.workers.values())

        def run(name: str) -> None:
            with span(name):
                assert client.submit(sum, range(10), key=f"sum-{name}").result() == 45

        def counters() -> dict:
            return client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
            )["traces"]

        run("before")
        otlp_receiver.wait_for_spans(lambda s: s.name == "before", timeout=20)

        rotel.kill()
        run("during outage")
        wait_until(lambda: counters()["failed"] >= 1, timeout=20, message=lambda: str(counters()))

        rotel.restart()
        run("after restart")
        otlp_receiver.wait_for_spans(lambda s: s.name == "after restart", timeout=30)
        names = {s.name for s in otlp_receiver.spans()}
        assert "during outage" not in names
        final = counters()
        assert final["failed"] >= 1  # the outage's records, counted
        assert final["exported"] >= 2


def burst_keys(round_: str, i: int) -> str:
    # a prefix per span: a live task group keeps the first span it was seen in
    return f"{round_}{i}-0"


async def burst(client: Client, round_: str, n: int) -> float:
    """n Dask spans of one task each, submitted at once; returns the loop lag p99.

    A full collection first: a gen-2 GC pause (100-170 ms here, with and without
    otel-spans alike) would otherwise land in one burst or another at random.
    """
    gc.collect()
    with LoopLag(asyncio.get_running_loop()) as lag:
        futures = []
        for i in range(n):
            with span(f"{round_} {i}"):
                futures.append(client.submit(square, i, key=burst_keys(round_, i)))
        assert await client.gather(futures) == [i * i for i in range(n)]
    return lag.p99()


@cluster_test(120)
async def test_queue_overflow_is_counted_and_the_event_loop_keeps_its_pace(
    otlp_receiver: OtlpReceiver,
) -> None:
    otlp_receiver.set_mode("hang")
    n = 300
    overflowing = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.queue-size": 10,
        "otel-spans.batch-size": 5,
        "otel-spans.timeout": "30s",
        "otel-spans.shutdown-timeout": "500ms",
        "otel-spans.traces.tasks.mode": "all",
        "otel-spans.traces.linger": "0s",
    }
    # One p99 is one sample, and a burst can still meet a pause of the machine:
    # compare medians of rounds.
    rounds = 3
    async with traced_cluster({"otel-spans.enabled": False}) as (client, _, _):
        await burst(client, "warm", 20)
        baselines = [await burst(client, f"plain{r}x", n) for r in range(rounds)]
    async with traced_cluster(overflowing) as (client, scheduler, _):
        await burst(client, "warm", 20)
        with_otel = [await burst(client, f"burst{r}x", n) for r in range(rounds)]
        current = await await_until(
            lambda: _settled_with_drops(client, at_least=2 * n * rounds), timeout=30
        )
        plugin = scheduler.plugins["otel-spans"]
        started = time.perf_counter()
        await scheduler.close()
        closing = time.perf_counter() - started
        final = plugin.stats()["traces"]
    otlp_receiver.set_mode("ok")
    traces = current["traces"]
    assert traces["dropped"] >= traces["submitted"] - 10 - 5  # queue + one batch in flight
    assert current["internal_errors"] == 0
    # after close, every record is in exactly one bucket and nothing is in flight
    assert final["queued"] == final["sending"] == 0
    assert accounted(final) == final["submitted"]
    assert final["unsent"] >= 1
    assert closing < 0.5 + 1.5
    print(f"event-loop lag p99 during {rounds} bursts of {n} spans (ms): "
          f"{[round(b * 1e3, 1) for b in baselines]} without otel-spans, "
          f"{[round(w * 1e3, 1) for w in with_otel]} with a full queue")  # fmt: skip
    # The full queue costs the loop nothing measurable: within the noise of the run.
    baseline, otel = statistics.median(baselines), statistics.median(with_otel)
    assert otel <= max(3 * baseline, baseline + 0.05), (baselines, with_otel)


async def _settled_with_drops(client: Client, at_least: int) -> dict | None:
    current = await stats(client)
    traces = current["traces"]
    return current if traces["submitted"] >= at_least and traces["dropped"] else None


@cluster_test(90)
async def test_scheduler_closed_during_a_burst(otlp_receiver: OtlpReceiver) -> None:
    n = 200
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.shutdown-timeout": "1s",
        "otel-spans.traces.tasks.mode": "all",
        "otel-spans.traces.linger": "0s",
    }
    async with traced_cluster(config) as (client, scheduler, _):
        futures = []
        for i in range(n):
            with span(f"burst {i}"):
                futures.append(client.submit(slow_square, i, key=burst_keys("closing", i)))
        # close while tasks still run and spans are being exported
        await await_until(lambda: _exported_some(client))
        plugin = scheduler.plugins["otel-spans"]
        started = time.perf_counter()
        await scheduler.close()
        closing = time.perf_counter() - started
        final = plugin.stats()
    assert closing < 1 + 1.5
    traces = final["traces"]
    assert traces["exported"] > 0
    assert traces["queued"] == traces["sending"] == 0
    assert accounted(traces) == traces["submitted"]
    assert final["internal_errors"] == 0
    # unfinished spans were flushed as such, not lost
    received = otlp_receiver.spans()
    assert any(s.attributes.get("dask.span.done") is False for s in received)


def slow_square(x: int) -> int:
    time.sleep(0.02)  # simulated work: the burst must still be running at close
    return x * x


async def _exported_some(client: Client) -> bool:
    return bool((await stats(client))["traces"]["exported"])


@cluster_test(60)
async def test_a_closed_scheduler_that_lives_on_holds_nothing_of_ours(
    otlp_receiver: OtlpReceiver,
) -> None:
    """distributed keeps closed schedulers alive (an unbounded cache of handlers), and
    their plugins with them. What otel-spans held must go at close: otherwise every
    scheduler a process ever ran keeps its spans, DAG and metric series, and every full
    garbage collection of the process walks them again.
    """
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.interval": "200ms",
    }
    async with traced_cluster(config) as (client, scheduler, _):
        with span("work"):
            assert await client.gather(client.map(square, range(10))) == [i * i for i in range(10)]
        plugin = scheduler.plugins["otel-spans"]
        signals = plugin.signals
        tracker = plugin._tracker
        assert signals is not None and tracker is not None and tracker.task_groups is not None
        held = {
            "meter provider": weakref.ref(signals.meter_provider),
            "metric series": weakref.ref(signals.metric_state),
            "task histogram": weakref.ref(signals.task_durations),
            "task groups": weakref.ref(tracker.task_groups),
            "span tracker": weakref.ref(tracker),
        }
        del tracker
        await await_until(lambda: plugin.stats()["tracked_spans"] and otlp_receiver.spans())
    # `scheduler` is still referenced here, as distributed's cache references it.
    gc.collect()
    assert [name for name, ref in held.items() if ref() is not None] == []
    after = plugin.stats()
    assert (after["tracked_spans"], after["open_spans"], after["live_spans"]) == (0, 0, 0)
    assert after["traces"]["exported"] >= 1 and after["metric_exports"]["exported"] >= 1
    assert after["internal_errors"] == 0
