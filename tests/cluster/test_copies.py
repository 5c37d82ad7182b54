"""One live copy of otel-spans per scheduler and worker, whatever registers it how often.

distributed replaces a plugin of the same name without closing it, and unregistering
or ``Scheduler.stop()`` closes nothing: otel-spans notices on its own (docs/telemetry.md,
"Registering, unregistering, stopping").
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Iterator

import dask.config
import pytest
from distributed import Scheduler, span

from otel_spans import OtelSpansPlugin, OtelSpansWorkerPlugin
from otel_spans.config import ConfigError
from otel_spans.scheduler.guard import WATCH_INTERVAL
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import (
    FAST,
    THREADS_GONE_WITHIN,
    await_until,
    cluster_test,
    otel_threads,
    traced_cluster,
)

#: The pipelines of one copy, each with its own exporter thread (started by the
#: pipeline's first record).
PIPELINE_THREADS = {
    "otel-spans-traces-exporter",
    "otel-spans-logs-exporter",
}


def pipeline_threads() -> Counter[str]:
    """Exporter threads by name (the short-lived shutdown helpers left out)."""
    return Counter(t.name for t in otel_threads() if t.name in PIPELINE_THREADS)


def one_set_of_threads() -> bool:
    """No pipeline's thread runs twice (a pipeline without a record yet has none)."""
    return all(count == 1 for count in pipeline_threads().values())


def copies(scheduler: Scheduler) -> list[OtelSpansPlugin]:
    return [p for p in scheduler.plugins.values() if isinstance(p, OtelSpansPlugin)]


def inc(x: int) -> int:
    return x + 1


def registered(receiver: OtlpReceiver) -> OtelSpansPlugin:
    """A copy as a user registers it on a running cluster (same receiver, fast export)."""
    return OtelSpansPlugin(
        endpoint=receiver.grpc_endpoint, traces={"linger": "100ms", "poll-interval": "50ms"}
    )


@cluster_test(90)
async def test_preload_then_register_twice_leaves_one_working_copy(
    otlp_receiver: OtlpReceiver,
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client, scheduler = cluster.client, cluster.scheduler
        assert one_set_of_threads(), pipeline_threads()
        previous = copies(scheduler)
        for step in range(3):  # the preloaded copy, then two registrations
            if step:
                with pytest.warns(UserWarning, match="overwriting"):
                    await client.register_plugin(registered(otlp_receiver))
            (current,) = copies(scheduler)
            assert all(old.signals is None for old in previous if old is not current)
            previous.append(current)
            assert one_set_of_threads(), pipeline_threads()
            with span(f"step-{step}"):
                numbers = range(step * 10, step * 10 + 10)
                futures = client.map(inc, numbers, key=[f"inc{step}-{x}" for x in numbers])
                assert await client.gather(futures) == [x + 1 for x in numbers]
            await await_until(
                lambda step=step: any(s.name == f"step-{step}" for s in otlp_receiver.spans()),
                message=f"span step-{step} was not exported",
            )
            # Both pipelines had records: a copy left running would show twice here.
            running = pipeline_threads()
            assert running["otel-spans-traces-exporter"] == 1, running
            assert running["otel-spans-logs-exporter"] == 1, running
        spans = otlp_receiver.spans()
        span_ids = Counter(s.span_id for s in spans)
        assert [s.name for s in spans if span_ids[s.span_id] > 1] == []
        assert sorted(s.name for s in spans if "dask.span.id" in s.attributes) == [
            "step-0",
            "step-1",
            "step-2",
        ]
        # After the copy closes, nothing of it is left running.
        await client.unregister_scheduler_plugin(OtelSpansPlugin.name)
        await await_until(
            lambda: not otel_threads(),
            timeout=WATCH_INTERVAL + THREADS_GONE_WITHIN,
            message=lambda: f"threads left after unregister: {otel_threads()}",
        )
        assert all(old.signals is None for old in previous)
        # Dask goes on without it.
        assert await client.submit(inc, 1, key="after-unregister") == 2


@cluster_test(60)
async def test_scheduler_stopped_without_close_stops_its_threads(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        **FAST,
    }
    with dask.config.set(config):
        scheduler = await Scheduler(host="127.0.0.1", dashboard_address=":0", port=0)
    try:
        assert one_set_of_threads(), pipeline_threads()
        scheduler.stop()
        await await_until(
            lambda: not otel_threads(),
            timeout=WATCH_INTERVAL + THREADS_GONE_WITHIN,
            message=lambda: f"threads left after Scheduler.stop(): {otel_threads()}",
        )
    finally:
        await scheduler.close()


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@cluster_test(60)
async def test_start_on_a_taken_port_names_the_key_and_leaves_no_thread(
    otlp_receiver: OtlpReceiver, taken_port: int
) -> None:
    async with Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler:
        before = set(threading.enumerate())
        plugin = OtelSpansPlugin(
            endpoint=otlp_receiver.grpc_endpoint,
            metrics={"prometheus-port": taken_port, "prometheus-host": "127.0.0.1"},
        )
        with pytest.raises(ConfigError) as failed:
            await scheduler.register_scheduler_plugin(plugin, idempotent=False)
        message = str(failed.value)
        assert message.startswith("otel-spans.metrics.prometheus-port: ")
        assert f"127.0.0.1:{taken_port}" in message
        assert copies(scheduler) == []
        await await_until(
            lambda: not (set(threading.enumerate()) - before),
            timeout=THREADS_GONE_WITHIN,
            message=lambda: f"left running: {set(threading.enumerate()) - before}",
        )
        # The same copy starts once the port is free again (here: any port).
        retry = OtelSpansPlugin(
            endpoint=otlp_receiver.grpc_endpoint, metrics={"prometheus-port": 0}
        )
        await scheduler.register_scheduler_plugin(retry, idempotent=False)
        assert one_set_of_threads(), pipeline_threads()
    await await_until(lambda: not otel_threads(), timeout=THREADS_GONE_WITHIN)


def wrapped(worker: object) -> object:
    return worker.__dict__.get("execute")  # type: ignore[attr-defined]


@cluster_test(60)
async def test_worker_plugin_under_two_names_leaves_one_copy(
    otlp_receiver: OtlpReceiver,
) -> None:
    async with traced_cluster({"otel-spans.endpoint": otlp_receiver.grpc_endpoint}) as cluster:
        client, workers = cluster.client, cluster.workers
        with dask.config.set({"otel-spans.traces.exporter": "none"}):
            await client.register_plugin(OtelSpansWorkerPlugin(), name="first")
            await client.register_plugin(OtelSpansWorkerPlugin(), name="second")
            await client.register_plugin(OtelSpansWorkerPlugin(), name="second")
        for worker in workers:
            mine = [n for n, p in worker.plugins.items() if isinstance(p, OtelSpansWorkerPlugin)]
            assert mine == ["second"]
            # One wrapper, directly around the class's method: no chain of old copies.
            assert wrapped(worker) is worker.plugins["second"]._wrapper  # type: ignore[attr-defined]
            assert worker.plugins["second"]._shadowed is None  # type: ignore[attr-defined]
        with span("wrapped once"):
            assert await client.submit(inc, 1, key="once-1") == 2
        await client.unregister_worker_plugin("second")
        assert [wrapped(w) for w in workers] == [None, None]
        assert await client.submit(inc, 2, key="after-1") == 3
