"""``dask.span.run.bytes.*`` and ``dask.span.run.count.*`` (docs/telemetry.md): each
Dask span's own tasks' byte and count metrics, by activity, from Dask's fine
performance metrics (context ``execute``).

The workload fixes them. One worker, one thread, managed memory spilled above 5 MiB
(Dask's ``SpillBuffer``; the memory monitor off), results of 2 MiB each:

* ``produce`` stores three results: the third pushes managed memory over 5 MiB, the
  oldest is written to disk: 1 disk write of one result's pickled size;
* ``consume`` reads the two results still in memory: 2 memory reads of their sizes;
* ``reload`` reads the spilled one back: 1 disk read, and bringing it into memory
  pushes the least recently used result out: 1 disk write.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import dask.config
import pytest
from dask.sizeof import sizeof
from distributed import Client, Scheduler, Worker, span, wait
from distributed.protocol import serialize_bytelist
from distributed.utils import nbytes

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import FAST, await_until, cluster_test

pytestmark = pytest.mark.usefixtures("default_otel_config")

BYTES = "dask.span.run.bytes."
COUNT = "dask.span.run.count."
MIB = 2**20
#: Managed memory above this is spilled (memory limit x target).
LIMIT, TARGET = 10 * MIB, 0.5
RESULT = 2 * MIB

MEMORY = {
    "distributed.worker.memory.target": TARGET,
    "distributed.worker.memory.spill": False,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": False,
    # the pickled size on disk is then the design's, not a compressor's
    "distributed.worker.memory.spill-compression": False,
}


def make(i: int) -> bytes:
    return bytes([i]) * RESULT


def total(a: bytes, b: bytes) -> int:
    return len(a) + len(b)


def size(a: bytes) -> int:
    return len(a)


@asynccontextmanager
async def spilling_cluster(config: dict[str, Any]) -> AsyncIterator[tuple[Client, Worker]]:
    """The scheduler with otel-spans, one worker with a 10 MiB memory limit."""
    full = {"distributed.scheduler.preload": ["otel_spans"], **FAST, **MEMORY, **config}
    with dask.config.set(full):
        async with (
            Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler,
            Worker(scheduler.address, host="127.0.0.1", nthreads=1, memory_limit=LIMIT) as worker,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            yield client, worker


def run_values(spans: list[ReceivedSpan], prefix: str) -> dict[str, dict[str, float]]:
    """Span name -> activity -> value, summed over the span's exports (a continuation
    carries only what came after the previous export)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in spans:
        if "dask.span.id" not in s.attributes:
            continue
        values = out[s.name]
        for key, value in s.attributes.items():
            if key.startswith(prefix):
                values[key.removeprefix(prefix)] += float(value)
    return {name: dict(values) for name, values in out.items()}


@cluster_test(90)
async def test_run_bytes_and_counts_are_each_spans_own_reads_and_spills(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        # long enough for the forced heartbeats to land before the export
        "otel-spans.traces.linger": "1s",
    }
    async with spilling_cluster(config) as (client, worker):
        assert worker.data.fast.n == int(LIMIT * TARGET)  # type: ignore[attr-defined]
        with span("spill"):
            with span("produce"):
                made = []
                for i in range(3):  # one after another: the oldest is the one spilled
                    made.append(client.submit(make, i, key=f"make-{i}"))
                    await wait(made[-1])
                await worker.heartbeat()
            with span("consume"):
                assert await client.submit(total, made[1], made[2], key="consume-0") == 2 * RESULT
                await worker.heartbeat()
            with span("reload"):
                assert await client.submit(size, made[0], key="reload-0") == RESULT
                await worker.heartbeat()
        names = {"spill", "produce", "consume", "reload"}
        await await_until(lambda: names <= {s.name for s in otlp_receiver.spans()}, 30)
        spans = otlp_receiver.spans()

    # from the design: what Dask weighs a result at in memory, and writes for it on disk
    weight = sizeof(make(0))
    with dask.config.set(MEMORY):
        pickled = sum(map(nbytes, serialize_bytelist(make(0), compression=False)))
    counts, byte_values = run_values(spans, COUNT), run_values(spans, BYTES)
    # each span's own tasks only: a sum over the subtree would put them on the root too
    assert counts.get("spill", {}) == {} and byte_values.get("spill", {}) == {}
    assert counts["produce"] == {"disk_write": 1}
    assert byte_values["produce"] == {"disk_write": pickled}
    assert counts["consume"] == {"memory_read": 2}
    assert byte_values["consume"] == {"memory_read": 2 * weight}
    assert counts["reload"] == {"disk_read": 1, "disk_write": 1}
    assert byte_values["reload"] == {"disk_read": pickled, "disk_write": pickled}
