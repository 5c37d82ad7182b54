"""Task functions the cluster tests submit (importable by worker processes too)."""

from __future__ import annotations

from distributed import Event, Worker


def inc(x: int) -> int:
    return x + 1


def wait_for(name: str) -> int:
    """Hold the task (and its dependents) until the test sets the event ``name``."""
    assert Event(name).wait(timeout=120)
    return 1


async def heartbeat(dask_worker: Worker) -> None:
    """``client.run(heartbeat)``: the worker's metrics reach the scheduler now (they
    travel with heartbeats), also from a worker in another process."""
    await dask_worker.heartbeat()
