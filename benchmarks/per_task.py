"""The per-task hooks in place when the scheduler is the bottleneck: tiny tasks.

``benchmarks.hooks`` calls the transition hook in a tight loop, where its code and data
stay in the CPU's caches; on a real scheduler each call runs after Dask's own code, and
costs several times more. This benchmark times it in place on the shape where a
per-task cost is wall time: ``--workflows`` workflows one after another, each one Dask
span of ``--tasks`` tiny tasks in one task group, with ``worker-saturation: inf``, on
``LocalCluster(processes=False)`` (one worker, 2 threads) driven asynchronously, so
that scheduler, worker and client share one event loop, exporting over OTLP/gRPC to a
discarding collector (:mod:`benchmarks.per_span`'s harness, its other workload).

Two variants, each round in a fresh process, order alternating: otel-spans' default
mode, its ``transition`` timed per call on the thread's CPU clock
(:class:`benchmarks.hook_timer.HookTimer`), and no otel-spans with Dask's
``TaskStreamPlugin`` timed the same way: the cheapest useful per-task hook, the
reference of the per-task budget. Reported per task, median [min–max] over the
rounds; both include the timer's wrapper (the same number of calls on each side).

Usage::

    python -m benchmarks.per_task                   # 5 rounds, 5 workflows of 2,000 tasks
    python -m benchmarks.per_task --rounds 3 --tasks 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from functools import partial
from typing import Any

from benchmarks.per_span import run_workflows, summarise, variant_config
from benchmarks.rounds import alternating, child

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


async def run_child(variant: str, endpoint: str, workflows: int, tasks: int) -> dict[str, Any]:
    base = "baseline" if variant == "taskstream" else "default"
    config = {**variant_config(base, endpoint), **SCHEDULER_BOUND}
    result = await run_workflows(
        config,
        workflows,
        SETTLE,
        WARMUP,
        taskstream=variant == "taskstream",
        workflow=partial(tiny_workflow, tasks=tasks),
    )
    return {"variant": variant, **result}


def run_variant(variant: str, endpoint: str, workflows: int, tasks: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.per_task", "--child", variant]
    command += ["--endpoint", endpoint, "--workflows", str(workflows), "--tasks", str(tasks)]
    return child(command, variant)


def report(results: dict[str, list[dict[str, Any]]], workflows: int, tasks: int) -> str:
    total = workflows * tasks
    runs = results["default"]
    lines = [
        f"{len(runs)} rounds of {workflows} workflows of {tasks} tiny tasks "
        "(worker-saturation: inf); µs of CPU per task, median [min–max]",
        "",
        "| figure | µs per task |",
        "|---|---|",
    ]
    for bucket in runs[0]["own"]:
        values = [r["own"][bucket] / total * 1e6 for r in runs]
        lines.append(f"| otel-spans' own: {bucket} | {summarise(values, '{:.2f}')} |")
    reference = [r["taskstream"] / total * 1e6 for r in results["taskstream"]]
    lines.append(f"| Dask's TaskStreamPlugin in place | {summarise(reference, '{:.2f}')} |")
    ratios = [
        o["own"]["loop: per-task hooks"] / t["taskstream"]
        for o, t in zip(runs, results["taskstream"], strict=True)
    ]
    lines.append(
        f"| per-task hooks / TaskStreamPlugin (same round) | {summarise(ratios, '{:.2f}')} |"
    )
    if not all(r["settled"] for r in runs):
        lines.append("WARNING: otel-spans did not settle within the window in some round")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workflows", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--child", choices=("default", "taskstream"))
    parser.add_argument("--endpoint")
    args = parser.parse_args(argv)
    if args.child:
        endpoint = args.endpoint or "http://127.0.0.1:1"
        result = run_child(args.child, endpoint, args.workflows, args.tasks)
        print(json.dumps(asyncio.run(result)))
        return 0
    from benchmarks.overhead import blackhole_collector

    with blackhole_collector() as endpoint:
        results = alternating(
            args.rounds,
            ["default", "taskstream"],
            lambda variant: run_variant(variant, endpoint, args.workflows, args.tasks),
        )
    print(report(results, args.workflows, args.tasks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
