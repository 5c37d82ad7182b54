"""What otel-spans adds to a cluster's start and close.

Notebooks and test suites open and close a ``LocalCluster`` again and again; Dask's own
test suite starts one per test. Each variant runs in a fresh Python process (order
alternating), which imports everything first (imports are paid once per process, not
per cluster), then starts and closes ``LocalCluster(processes=False, n_workers=1)``
``--cycles`` times, the first ``WARMUP`` unmeasured. Variants:

* ``baseline``: no otel-spans;
* ``preloads``: ``distributed.scheduler.preload`` and ``distributed.worker.preload``
  set to ``otel_spans``, exporting over OTLP/gRPC to a discarding collector on loopback.

Reported: wall and process CPU (every thread) per start+close cycle, the median per
process, then median [min–max] over the processes; and the difference to the baseline
of the same round.

Usage::

    python -m benchmarks.start_close                    # 6 rounds of 15 cycles
    python -m benchmarks.start_close --rounds 4 --cycles 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from benchmarks.rounds import alternating, child, summarise

#: Cycles run (unmeasured) before the measured ones.
WARMUP = 2


def variant_config(variant: str, endpoint: str) -> dict[str, Any]:
    config: dict[str, Any] = {"logging.distributed": "error"}
    if variant == "preloads":
        config["distributed.scheduler.preload"] = ["otel_spans"]
        config["distributed.worker.preload"] = ["otel_spans"]
        config["otel-spans.endpoint"] = endpoint
    return config


async def cycle() -> None:
    from distributed import LocalCluster

    async with LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        asynchronous=True,
        dashboard_address=":0",
    ):
        pass


async def cycles_cpu(config: dict[str, Any], cycles: int) -> tuple[float, float]:
    """Median wall and process CPU seconds of a start+close cycle under ``config``."""
    import dask.config

    import otel_spans  # noqa: F401  (imports are paid once per process)

    wall, cpu = [], []
    with dask.config.set(config):
        for i in range(WARMUP + cycles):
            t0, c0 = time.perf_counter(), time.process_time()
            await cycle()
            if i >= WARMUP:
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


async def run_child(variant: str, endpoint: str, cycles: int) -> dict[str, Any]:
    wall, cpu = await cycles_cpu(variant_config(variant, endpoint), cycles)
    return {"variant": variant, "wall": wall, "cpu": cpu}


async def measure_ratio(endpoint: str, cycles: int = 8) -> float:
    """The CPU the preloads add to a start+close cycle over the cycle's CPU without them,
    both in this process: what the CI guard holds to its committed baseline."""
    _, base = await cycles_cpu(variant_config("baseline", endpoint), cycles)
    _, with_preloads = await cycles_cpu(variant_config("preloads", endpoint), cycles)
    return (with_preloads - base) / base


def run_variant(variant: str, endpoint: str, cycles: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.start_close", "--child", variant]
    command += ["--endpoint", endpoint, "--cycles", str(cycles)]
    return child(command, variant)


def milliseconds(values: list[float]) -> str:
    """Seconds over the rounds, in ms with their spread."""
    return summarise([v * 1000 for v in values], "{:.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cycles", type=int, default=15)
    parser.add_argument("--child", choices=("baseline", "preloads"))
    parser.add_argument("--endpoint")
    args = parser.parse_args(argv)
    if args.child:
        endpoint = args.endpoint or "http://127.0.0.1:1"
        print(json.dumps(asyncio.run(run_child(args.child, endpoint, args.cycles))))
        return 0
    from benchmarks.overhead import blackhole_collector

    with blackhole_collector() as endpoint:
        results = alternating(
            args.rounds,
            ["baseline", "preloads"],
            lambda variant: run_variant(variant, endpoint, args.cycles),
        )
    base, runs = results["baseline"], results["preloads"]
    print(
        f"{args.rounds} processes per variant, {args.cycles} start+close cycles each; "
        "ms per cycle, median [min–max] over the processes' medians\n"
    )
    print("| figure | baseline | with the preloads | added (same round) |")
    print("|---|---|---|---|")
    for what in ("wall", "cpu"):
        added = [o[what] - b[what] for o, b in zip(runs, base, strict=True)]
        print(
            f"| {what} | {milliseconds([b[what] for b in base])} "
            f"| {milliseconds([o[what] for o in runs])} | {milliseconds(added)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
