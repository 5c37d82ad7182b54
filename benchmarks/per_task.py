"""The per-task hooks in place when the scheduler is the bottleneck: tiny tasks.

``benchmarks.hooks`` calls the transition hook in a tight loop, where its code and data
stay in the CPU's caches; on a real scheduler each call runs after Dask's own code, and
costs several times more. This benchmark times it in place on the shape where a
per-task cost is wall time: ``--workflows`` workflows one after another, each one Dask
span of ``--tasks`` tiny tasks in one task group, with ``worker-saturation: inf``, on
``LocalCluster(processes=False)`` (one worker, 2 threads) driven asynchronously, so
that scheduler, worker and client share one event loop, exporting over OTLP/gRPC to a
discarding collector (:mod:`benchmarks.per_span`'s harness, its other workload).

Four variants, each round in a fresh process, order alternating, each timing its
``transition`` hook per call on the thread's CPU clock
(:class:`benchmarks.hook_timer.HookTimer`), the same wrapper on every side:

* ``default``: otel-spans' default mode;
* ``metrics``: otel-spans with metrics alone (``benchmarks.overhead``'s ``metrics``
  mode: no traces, no logs, no task spans): the per-task work the metrics need (the
  span's counts by prefix and state, the duration histogram, the memory ledger), no
  task group or sampling;
* ``floor``: otel-spans with ``SpanTracker.transition`` replaced by a no-op: what its
  hook costs before any per-task work (Dask's call, the hook's first tests, the task's
  lookup). No task is followed, so the variant is not waited for to export (what
  the trace poll still exports depends on when it first meets each span);
* ``taskstream``: no otel-spans, Dask's ``TaskStreamPlugin``: the cheapest useful
  per-task hook, the reference of the per-task budget.

Reported per task, median [min–max] over the rounds, and each otel-spans variant's
ratio to the reference of its round; all include the timer's wrapper (about 0.3 µs
per call, four calls per task).

Usage::

    python -m benchmarks.per_task                   # 5 rounds, 5 workflows of 2,000 tasks
    python -m benchmarks.per_task --rounds 3 --tasks 5000
    python -m benchmarks.per_task --variants default,taskstream
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from benchmarks.overhead import MODES
from benchmarks.per_span import run_workflows, variant_config
from benchmarks.rounds import alternating, child, summarise

#: Workflows run (unmeasured) before the window.
WARMUP = 2
#: Seconds after the workload that still count: the spans' export.
SETTLE = 3.0
#: The scheduler is the bottleneck: every task is sent to a worker at once.
SCHEDULER_BOUND = {"distributed.scheduler.worker-saturation": "inf"}


def inc(i: int) -> int:
    return i + 1


async def tiny_workflow(client: Any, n: int, *, tasks: int) -> None:
    """One Dask span of ``tasks`` tiny tasks in one task group; fresh keys each time."""
    from distributed import span

    token = uuid.uuid4().hex
    with span(f"tiny-{n % 10}"):
        futures = client.map(inc, range(tasks), key=[(f"inc-{token}", j) for j in range(tasks)])
    await client.gather(futures)


#: Every variant, in the order a round runs them (reversed every other round).
VARIANTS = ("default", "metrics", "floor", "taskstream")
#: otel-spans' configuration of each of its variants, over its default.
_OTEL_SPANS_CONFIG: dict[str, dict[str, Any]] = {
    "default": {},
    "metrics": MODES["metrics"],
    "floor": {},
}


@contextmanager
def _following_nothing(floor: bool) -> Iterator[None]:
    """The ``floor`` variant: the tracker's per-task work is a no-op while this is open
    (the class's own method comes back after, so a test can run the variant in its
    process)."""
    from otel_spans.scheduler.tracking import SpanTracker

    follow = SpanTracker.transition
    if floor:
        SpanTracker.transition = lambda *args: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        SpanTracker.transition = follow  # type: ignore[method-assign]


async def run_child(variant: str, endpoint: str, workflows: int, tasks: int) -> dict[str, Any]:
    if variant == "taskstream":
        config = variant_config("baseline", endpoint)
    else:
        config = {**variant_config("default", endpoint), **_OTEL_SPANS_CONFIG[variant]}
    with _following_nothing(variant == "floor"):
        result = await run_workflows(
            {**config, **SCHEDULER_BOUND},
            workflows,
            SETTLE,
            WARMUP,
            taskstream=variant == "taskstream",
            workflow=partial(tiny_workflow, tasks=tasks),
            exports=variant != "floor",
        )
    return {"variant": variant, **result}


def run_variant(variant: str, endpoint: str, workflows: int, tasks: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.per_task", "--child", variant]
    command += ["--endpoint", endpoint, "--workflows", str(workflows), "--tasks", str(tasks)]
    return child(command, variant)


def report(results: dict[str, list[dict[str, Any]]], workflows: int, tasks: int) -> str:
    total = workflows * tasks
    reference = results["taskstream"]
    lines = [
        f"{len(reference)} rounds of {workflows} workflows of {tasks} tiny tasks "
        "(worker-saturation: inf); µs of CPU per task, median [min–max]",
        "",
        "| variant | per-task hooks, µs per task | / TaskStreamPlugin, same round |",
        "|---|---|---|",
    ]
    for variant in (v for v in VARIANTS if v in results and v != "taskstream"):
        runs = results[variant]
        hooks = [r["own"]["loop: per-task hooks"] for r in runs]
        ratios = [h / t["taskstream"] for h, t in zip(hooks, reference, strict=True)]
        per_task = summarise([h / total * 1e6 for h in hooks], "{:.2f}")
        lines.append(f"| otel-spans, {variant} | {per_task} | {summarise(ratios, '{:.2f}')} |")
        if not all(r["settled"] is not False for r in runs):
            lines.append(f"WARNING: {variant} did not settle within the window in some round")
    per_task = summarise([r["taskstream"] / total * 1e6 for r in reference], "{:.2f}")
    lines.append(f"| Dask's TaskStreamPlugin in place | {per_task} | 1 |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workflows", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated, of " + ", ".join(VARIANTS) + " (taskstream always runs)",
    )
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--endpoint")
    args = parser.parse_args(argv)
    asked = set(args.variants.split(","))
    if asked - set(VARIANTS):
        parser.error(f"--variants: unknown {sorted(asked - set(VARIANTS))}, of {VARIANTS}")
    variants = [v for v in VARIANTS if v in asked or v == "taskstream"]
    if args.child:
        endpoint = args.endpoint or "http://127.0.0.1:1"
        result = run_child(args.child, endpoint, args.workflows, args.tasks)
        print(json.dumps(asyncio.run(result)))
        return 0
    from benchmarks.overhead import blackhole_collector

    with blackhole_collector() as endpoint:
        results = alternating(
            args.rounds,
            variants,
            lambda variant: run_variant(variant, endpoint, args.workflows, args.tasks),
        )
    print(report(results, args.workflows, args.tasks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
