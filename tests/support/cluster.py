"""A real Dask cluster with otel-spans enabled the way users enable it, and async polling.

The scheduler runs on the test's event loop, so waiting for exported data must yield
to the loop (``await_until``) rather than block it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, NamedTuple, TypeVar

import dask.config
from distributed import Client, LocalCluster, Nanny, Scheduler, Worker
from distributed.utils_test import gen_test

from otel_spans.export import grpc_channels

T = TypeVar("T")


def cluster_test(timeout: float = 60) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``gen_test`` without distributed's global thread-leak check.

    The loopback receiver's gRPC server grows its thread pool lazily during the test,
    which that check would report. otel-spans' own threads are checked precisely
    instead: :func:`traced_cluster` asserts none survive the scheduler's close.
    """
    return gen_test(timeout=timeout, clean_kwargs={"threads": False})


#: Seconds otel-spans' threads may outlive the scheduler: a request in flight at the
#: shutdown deadline runs out its export timeout first (the tests that leave one in
#: flight against a failing collector use timeouts of 2 s at most).
THREADS_GONE_WITHIN = 5.0


def otel_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("otel-spans-")]


#: Fast export for tests: spans leave 100 ms after they finish, and a batch of them
#: waits 200 ms, not the default 5 s, before it is sent. Tests run tiny tasks
#: (``inc``) and assert on their spans, so the sampler's ``min-duration`` is 0 here;
#: its default is tested on its own (``tests/cluster/test_dag.py``).
FAST = {
    "otel-spans.traces.linger": "100ms",
    "otel-spans.traces.poll-interval": "50ms",
    "otel-spans.traces.batch-wait": "200ms",
    "otel-spans.traces.tasks.min-duration": 0,
}

#: Fast metrics for tests: a collection every 200 ms, and a finished span's values final
#: 2 s after its export (not the default 5 s). A span's worker metrics travel with the
#: workers' heartbeats (every 0.5 s here); on a busy machine a heartbeat comes late, and
#: values that arrive after a span settled are not the span's any more. 2 s leaves
#: three heartbeats of margin.
FAST_METRICS = {
    "otel-spans.metrics.interval": "200ms",
    "otel-spans.metrics.settle": "2s",
}


async def await_until(
    predicate: Callable[[], T | Awaitable[T | None] | None],
    timeout: float = 15.0,
    message: str | Callable[[], str] = "condition was not met",
    interval: float = 0.05,
) -> T:
    """Poll ``predicate`` (sync or async) with a deadline, yielding to the event loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(message() if callable(message) else message)
        await asyncio.sleep(interval)


class Cluster(NamedTuple):
    client: Client
    scheduler: Scheduler
    workers: list[Worker]


@asynccontextmanager
async def traced_cluster(
    config: Mapping[str, Any], n_workers: int = 2, nthreads: int = 1
) -> AsyncIterator[Cluster]:
    """Scheduler with ``preload: [otel_spans]`` from dask.config, workers, and a client."""
    full = {"distributed.scheduler.preload": ["otel_spans"], **FAST, **config}
    with dask.config.set(full):
        async with Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler:
            workers = [
                Worker(scheduler.address, host="127.0.0.1", nthreads=nthreads)
                for _ in range(n_workers)
            ]
            await asyncio.gather(*workers)
            try:
                async with Client(scheduler.address, asynchronous=True) as client:
                    yield Cluster(client, scheduler, workers)
            finally:
                await asyncio.gather(*(w.close() for w in workers))
    # Shutdown waits at most shutdown-timeout; a request still in flight then is
    # abandoned to its daemon thread, which ends when the request does (bounded by the
    # export timeout). So the threads must be gone within that, not at once.
    deadline = time.monotonic() + THREADS_GONE_WITHIN
    while otel_threads() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not otel_threads(), f"otel-spans threads survived the scheduler: {otel_threads()}"
    # every sender shut down: the last user of each shared gRPC channel closed it
    assert grpc_channels.open_channels() == 0, "a gRPC channel survived the scheduler"


@asynccontextmanager
async def traced_nanny_cluster(
    config: Mapping[str, Any],
    n_workers: int = 2,
    nthreads: int = 1,
    memory_limit: str | float = "auto",
) -> AsyncIterator[tuple[Client, Scheduler]]:
    """:func:`traced_cluster` with each worker in a process of its own (a Nanny's).

    For measurements of a task's CPU against its wall time: an in-process worker's
    task waits for the GIL behind this process's scheduler, receiver and exporter
    threads, and that wait is counted as ``thread-noncpu``. Force a heartbeat with
    ``client.run(tests.support.tasks.heartbeat)``. ``memory_limit`` is each worker's
    (the nanny's memory monitor kills a worker above its ``terminate`` fraction).
    """
    full = {"distributed.scheduler.preload": ["otel_spans"], **FAST, **config}
    with dask.config.set(full):
        async with Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler:
            nannies = [
                Nanny(
                    scheduler.address,
                    host="127.0.0.1",
                    nthreads=nthreads,
                    dashboard_address=":0",
                    memory_limit=memory_limit,
                )
                for _ in range(n_workers)
            ]
            await asyncio.gather(*nannies)
            try:
                async with Client(scheduler.address, asynchronous=True) as client:
                    await client.wait_for_workers(n_workers)
                    yield client, scheduler
            finally:
                await asyncio.gather(*(n.close() for n in nannies))
    deadline = time.monotonic() + THREADS_GONE_WITHIN
    while otel_threads() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not otel_threads(), f"otel-spans threads survived the scheduler: {otel_threads()}"


@contextmanager
def process_cluster(
    config: Mapping[str, Any], n_workers: int = 2
) -> Iterator[tuple[LocalCluster, Client]]:
    """A LocalCluster with worker *processes*, enabled purely through dask.config."""
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


async def stats(client: Client) -> dict[str, Any]:
    """otel-spans' own counters, through the scheduler handler users call."""
    result: dict[str, Any] = await client.scheduler.otel_spans_stats()
    return result
