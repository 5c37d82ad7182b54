"""Per-task cost of the worker preload for tasks that start no spans, driven directly.

The worker side does one thing per task: its wrapper around ``Worker.execute`` derives
the task's span context from the task's annotations and ``span_id``, makes it current
for the task, and clears the children count afterwards. Here that wrapper runs around
an ``execute`` that returns at once, on real ``distributed.worker_state_machine``
``TaskState`` objects annotated the way the scheduler sends them (nested Dask spans),
on an asyncio loop as the worker runs it; the same loop awaits the bare ``execute`` on
the same keys. The difference of the two, per task, is what the preload adds to a
worker's CPU per task: far below what a whole-cluster benchmark can resolve, where
the workers' own CPU varies by tens of µs per task from round to round.

Usage::

    python -m benchmarks.worker_hook             # µs per task, median [min–max]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import dask.config
from distributed.worker_state_machine import TaskState

from otel_spans.worker.plugin import OtelSpansWorkerPlugin

ROUNDS = 7


class _Worker:
    """What the plugin reads of a Worker: its state's tasks, ``execute``, its plugins,
    its ``scheduler_delay`` and ``log_event`` (the delay is announced once)."""

    def __init__(self, tasks: dict[str, TaskState]):
        self.state = type("State", (), {"tasks": tasks})()
        self.plugins: dict[str, object] = {}
        self.scheduler_delay = 0.001
        self.events: list[tuple[str, object]] = []

    def log_event(self, topic: str, msg: object) -> None:
        self.events.append((topic, msg))

    async def execute(self, key: Any, *, stimulus_id: str) -> None:
        return None


def _tasks(n: int, spans: int) -> dict[str, TaskState]:
    root = str(uuid.uuid4())
    children = [str(uuid.uuid4()) for _ in range(spans)]
    tasks = {}
    for i in range(n):
        child = children[i % spans]
        key = f"inc-{i}"
        ts = TaskState(key)
        ts.annotations = {
            "span": {"name": ("workflow", f"stage-{i % spans}"), "ids": (root, child)}
        }
        ts.span_id = child
        tasks[key] = ts
    return tasks


async def _per_task_ns(execute: Any, keys: list[str]) -> float:
    t0 = time.perf_counter_ns()
    for key in keys:
        await execute(key, stimulus_id="benchmark")
    return (time.perf_counter_ns() - t0) / len(keys)


async def measure(n: int, spans: int) -> list[float]:
    """ns per task added by the wrapper, one value per round (alternating order)."""
    tasks = _tasks(n, spans)
    keys = list(tasks)
    worker = _Worker(tasks)
    with dask.config.set(
        {"otel-spans.traces.exporter": "none", "otel-spans.logs.exporter": "none"}
    ):
        plugin = OtelSpansWorkerPlugin()
        plugin.setup(worker)  # type: ignore[arg-type]
    wrapped = worker.execute  # the instance attribute the plugin set
    bare = _Worker(tasks).execute
    try:
        await _per_task_ns(wrapped, keys)  # warm up: caches, the trace id per root
        added = []
        for r in range(ROUNDS):
            if r % 2:
                with_ns = await _per_task_ns(wrapped, keys)
                without_ns = await _per_task_ns(bare, keys)
            else:
                without_ns = await _per_task_ns(bare, keys)
                with_ns = await _per_task_ns(wrapped, keys)
            added.append(with_ns - without_ns)
    finally:
        await plugin.teardown(worker)  # type: ignore[arg-type]
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--spans", type=int, default=20)
    args = parser.parse_args(argv)
    added = asyncio.run(measure(args.tasks, args.spans))
    print(
        f"worker preload, added per task: {statistics.median(added) / 1000:.2f} µs "
        f"[{min(added) / 1000:.2f}–{max(added) / 1000:.2f}] over {len(added)} rounds "
        f"of {args.tasks} tasks"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
