"""Per-call cost of otel-spans' scheduler hooks, driven directly with realistic arguments.

A real Scheduler (in-process, no workers) holds a real graph: tasks in task groups
inside nested Dask spans, submitted by a real Client under ``distributed.span``, so the
``TaskState``, ``TaskGroup`` and ``Span`` objects the hooks read are Dask's own. The
hooks are then called the way ``Scheduler._transitions`` calls them, with the kwargs a
worker's task-finished message carries, and timed per call. Dask's own
``TaskStreamPlugin.transition`` (a filter and an append to a bounded buffer: the
cheapest useful hook there is) is timed on the same calls in the same process: the
ratio of the two is what the CI guard compares against a committed baseline, because
it holds on a noisy machine where absolute microseconds do not.

Measured, per call:

* ``transition`` by kind: a task becoming active (``released → waiting``), starting to
  run (``waiting → processing``, not followed), finishing (``processing → memory``
  with its phases, i.e. counting, sampling and the duration histogram), being released
  (``memory → released``), and a transition otel-spans ignores (``released →
  forgotten``);
* ``update_graph`` for a graph of the benchmark's size;
* one trace poll and one metrics slice, as functions of the spans that changed / are
  live.

Usage::

    python -m benchmarks.hooks                 # the table
    python -m benchmarks.hooks --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import dask.config
from distributed import Client, Scheduler, span
from distributed.diagnostics.task_stream import TaskStreamPlugin

from otel_spans import OtelSpansPlugin

#: How many times each measurement is repeated; the median is reported.
REPEATS = 7
#: The transitions of one task's life, summed: what the CI guard holds to its baseline.
LIFECYCLE = "one task's transitions (active, processing, finished, released)"
#: The committed baseline ratios (see tests/unit/test_hook_cost.py).
BASELINE_FILE = "benchmarks/hooks_baseline.json"


def _per_call_ns(call: Callable[[], None], calls: int) -> float:
    """Median over REPEATS of (CPU time of ``call()`` / ``calls``), in ns.

    The calling thread's CPU clock, not the wall clock: on a busy machine another
    process preempting this one adds wall time to whichever side of a ratio is running
    at that moment, but no CPU time to this thread (``tests/load-repeat`` found a wall
    clock ratio of 11 for a cost of 6)."""
    samples = []
    for _ in range(REPEATS):
        t0 = time.thread_time_ns()
        call()
        samples.append((time.thread_time_ns() - t0) / calls)
    return statistics.median(samples)


def _finished_kwargs(i: int, now: float) -> dict[str, Any]:
    """What a worker's task-finished message gives ``transition`` (distributed 2026.8)."""
    return {
        "worker": "tcp://127.0.0.1:40000",
        "nbytes": 28,
        "type": b"int",
        "typename": "int",
        "metadata": {},
        "thread": 140000000000 + i % 2,
        "startstops": ({"action": "compute", "start": now - 0.002, "stop": now - 0.001},),
        "stimulus_id": f"task-finished-{now}",
    }


@contextmanager
def _config(directory: str) -> Iterator[None]:
    with dask.config.set(
        {
            "distributed.scheduler.worker-saturation": "inf",
            "otel-spans.traces.exporter": "file",
            "otel-spans.metrics.exporter": "none",
            "otel-spans.logs.exporter": "none",
            "otel-spans.directory": directory,
            # The periodic callbacks must not run during a measurement.
            "otel-spans.traces.poll-interval": "1h",
            "otel-spans.metrics.interval": "1h",
        }
    ):
        yield


async def measure(tasks: int, spans: int) -> dict[str, float]:
    """ns per call of each hook and of Dask's task stream plugin on the same calls;
    ``tasks`` spread over ``spans`` spans."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as directory, _config(directory):
        async with (
            Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            await client.register_plugin(OtelSpansPlugin())
            plugin = scheduler.plugins[OtelSpansPlugin.name]
            per_span = max(1, tasks // spans)
            futures = []
            with span("benchmark"):
                for s in range(spans):
                    with span(f"part-{s}"):
                        # tuple keys: one task group per part, as collections make them
                        keys = [(f"part{s}", i) for i in range(per_span)]
                        futures += client.map(abs, range(per_span), key=keys)
            keys = [f.key for f in futures]
            while not all(k in scheduler.tasks for k in keys):
                await asyncio.sleep(0.01)
            n = len(keys)
            transition = plugin.transition
            reference = TaskStreamPlugin(scheduler).transition
            now = time.time()
            finished = [_finished_kwargs(i, now) for i in range(n)]

            def call_all(fn: Callable[..., None], start: str, finish: str, kw: bool) -> None:
                if kw:
                    for key, kwargs in zip(keys, finished, strict=True):
                        fn(key, start, finish, **kwargs)
                else:
                    for key in keys:
                        fn(key, start, finish)

            reference_ns: dict[str, float] = {}
            for name, (start, finish, kw) in {
                "transition ignored (released → forgotten)": ("released", "forgotten", False),
                "transition active (released → waiting)": ("released", "waiting", False),
                "transition not followed (waiting → processing)": ("waiting", "processing", False),
                "transition finished (processing → memory)": ("processing", "memory", True),
                "transition released (memory → released)": ("memory", "released", False),
            }.items():
                hook = _per_call_ns(partial(call_all, transition, start, finish, kw), n)
                base = _per_call_ns(partial(call_all, reference, start, finish, kw), n)
                out[name] = hook
                out[name + " / task stream"] = hook / base
                reference_ns[name] = base
            # One task's life: active (waiting), processing (not followed: it is entered
            # from an active state only), finished, released.
            kinds = [k for k in reference_ns if not k.startswith("transition ignored")]
            out[LIFECYCLE] = sum(out[k] for k in kinds)
            out[LIFECYCLE + " / task stream"] = out[LIFECYCLE] / sum(reference_ns[k] for k in kinds)

            ext = scheduler.extensions["spans"]
            # What otel_spans.span adds under a caller's span: the hook reads every task's.
            caller = {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01", "link": False}
            annotations = {"otel_spans": dict.fromkeys(keys, caller)}
            out["update_graph with caller annotations (per task in the graph)"] = _per_call_ns(
                lambda: plugin.update_graph(scheduler, annotations=annotations, tasks=keys), n
            )
            tracker = plugin._tracker
            uuids = list(ext.spans)

            def poll_all_changed() -> None:
                tracker._changed.update(uuids)  # as the spans' transitions mark them
                tracker.poll(final=False)

            out[f"trace poll, {len(uuids)} spans changed (per span)"] = _per_call_ns(
                poll_all_changed, len(uuids)
            )
            metrics = plugin._metrics
            out[f"metrics slice, {len(tracker.live)} live spans (per slice)"] = _per_call_ns(
                lambda: metrics.tick(final=False), 1
            )
            await client.cancel(futures)
    return out


def render(results: dict[str, float]) -> str:
    lines = ["| hook | µs per call | ratio to Dask's TaskStreamPlugin |", "|---|---|---|"]
    for name, value in results.items():
        if name.endswith("/ task stream"):
            continue
        ratio = results.get(name + " / task stream")
        lines.append(f"| {name} | {value / 1000:.2f} | {f'{ratio:.1f}' if ratio else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--spans", type=int, default=50)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.tasks, args.spans))
    print(render(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
