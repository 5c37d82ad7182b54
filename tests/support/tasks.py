"""Task functions the cluster tests submit (importable by worker processes too).

Worker processes unpickle a task function by its module path, so these live in an
importable module (the repository root is on ``sys.path``), not in a test module.
"""

from __future__ import annotations

import os
import time
from typing import Any

from distributed import Event, Reschedule, Worker
from opentelemetry import trace


class TaskFailure(ValueError):
    """An exception of an importable module: its qualified name is
    ``tests.support.tasks.TaskFailure``."""


def fail_with_task_failure(x: int) -> int:
    raise TaskFailure(f"record {x} is corrupt")


def inc(x: int) -> int:
    return x + 1


def nap(seconds: float) -> float:
    """Sleep (off the CPU: ``thread-noncpu`` time) and return how long."""
    time.sleep(seconds)
    return seconds


def step(seconds: float, *inputs: object) -> float:
    """A stage of a designed workflow: sleeps ``seconds`` after its ``inputs`` arrived."""
    time.sleep(seconds)
    return seconds


def wait_for(name: str) -> int:
    """Hold the task (and its dependents) until the test sets the event ``name``."""
    assert Event(name).wait(timeout=120)
    return 1


def user_span(label: str) -> None:
    """A span of task code (global tracer, no explicit context), ended at once: its
    worker exports it while the task goes on. ``test.pid`` tells the run's process."""
    tracer = trace.get_tracer("tests.user")
    with tracer.start_as_current_span(
        "user/run", attributes={"test.label": label, "test.pid": os.getpid()}
    ):
        pass


def user_span_then_wait(label: str, event: str) -> int:
    """Start a user span, then hold the task until the test sets the event ``event``
    (or kills this worker first); returns the process id of the run that finished."""
    user_span(label)
    assert Event(event).wait(timeout=120)
    return os.getpid()


def user_span_rescheduled_once(label: str, marker: str) -> int:
    """Start a user span; on the first run (no file ``marker`` yet) create the file and
    raise ``Reschedule``, so that the scheduler runs the task again."""
    first = not os.path.exists(marker)
    user_span(f"{label}/{'first' if first else 'rerun'}")
    if first:
        with open(marker, "x"):
            pass
        raise Reschedule()
    return os.getpid()


def worker_stats(dask_worker: Any) -> dict[str, Any]:
    """The worker plugin's own counters (``client.run(worker_stats)``)."""
    stats: dict[str, Any] = dask_worker.plugins["otel-spans"].stats()
    return stats


async def heartbeat(dask_worker: Worker) -> None:
    """``client.run(heartbeat)``: the worker's metrics reach the scheduler now (they
    travel with heartbeats), also from a worker in another process."""
    await dask_worker.heartbeat()


def hold_memory(nbytes: int, seconds: float) -> int:
    """Allocate and touch ``nbytes`` inside the task, hold them ``seconds``, free them:
    process memory a worker's memory monitor (or its nanny's) sees, never a result."""
    block = b"\x01" * nbytes
    time.sleep(seconds)
    del block
    return nbytes


def spin(cpu_seconds: float) -> float:
    """Pure Python on the CPU for ``cpu_seconds`` of this thread's CPU time, holding
    the GIL the whole time (threads of one worker running it wait for each other)."""
    start = time.thread_time()
    n = 0
    while time.thread_time() - start < cpu_seconds:
        n += 1
    return cpu_seconds


def blob(megabytes: int, seed: int) -> bytes:
    """``megabytes`` of bytes no fast compressor shrinks (1 MiB of random bytes
    repeated: further apart than lz4's window), made by copying, not by computing."""
    import random

    return random.Random(seed).randbytes(1 << 20) * megabytes


def total_size(*blobs: bytes) -> int:
    return sum(len(b) for b in blobs)


def fail(x: int) -> int:
    raise ValueError(f"record {x} is corrupt")
