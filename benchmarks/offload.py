"""Work off the event loop, on a thread: what it does for the loop, under CPython's GIL.

A scheduler's event loop runs a stream of short CPU-bound steps (Dask's handlers). A
plugin can do its own work on the loop, between those steps, or hand it to a thread
through a queue; the thread still needs the GIL to run Python. This benchmark runs, for
``--seconds`` each, a stream of ``--chunk`` µs steps on a loop, a 1 ms timer whose
lateness is the loop's lag, and every ``--period`` ms ``--work`` µs of pure Python done
nowhere (``none``), on the loop (``loop``) or on a thread fed by a queue (``thread``).
Each mode runs in a fresh process, order alternating between rounds. Reported: the
works finished within the window (a thread runs Python only while it holds the GIL),
the steps the loop got through (its throughput, relative to ``none`` in the same
round), and the timer's lag, median and largest.

Usage::

    python -m benchmarks.offload                          # a span's export: 100 µs / 2 ms
    python -m benchmarks.offload --work 50000 --period 500    # one 50 ms export
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import statistics
import sys
import threading
import time
from typing import Any

from benchmarks.rounds import alternating, child, summarise

MODES = ("none", "loop", "thread")


def spin(us: float) -> None:
    """``us`` µs of this thread's CPU in pure Python."""
    end = time.thread_time_ns() + us * 1000
    while time.thread_time_ns() < end:
        pass


async def run(
    mode: str, work: float, period: float, chunk: float, seconds: float
) -> dict[str, Any]:
    jobs: queue.SimpleQueue[float | None] = queue.SimpleQueue()

    done = {"loop": 0, "thread": 0}  # works finished, by where they ran

    def worker() -> None:
        while (us := jobs.get()) is not None:
            spin(us)
            done["thread"] += 1

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    stop = False
    lags: list[float] = []
    steps = 0

    async def timer() -> None:
        while not stop:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t0 - 0.001)

    async def plugin_work() -> None:
        while not stop:
            await asyncio.sleep(period / 1000)
            if mode == "loop":
                spin(work)
                done["loop"] += 1
            elif mode == "thread":
                jobs.put(work)

    async def stream() -> None:
        nonlocal steps
        while not stop:
            spin(chunk)
            steps += 1
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(c()) for c in (timer, plugin_work, stream)]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*tasks)
    finished = dict(done)  # within the window: what the loop's throughput paid for
    jobs.put(None)
    thread.join()
    lag = statistics.median(lags), max(lags)
    works = finished["loop"] + finished["thread"]
    return {
        "steps": steps,
        "works": works,
        "works_on_thread": finished["thread"],
        "lag_median": lag[0],
        "lag_max": lag[1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=float, default=100.0, help="µs of work per period")
    parser.add_argument("--period", type=float, default=2.0, help="ms between works")
    parser.add_argument("--chunk", type=float, default=200.0, help="µs per loop step")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--child", choices=MODES)
    args = parser.parse_args(argv)
    shape = (args.work, args.period, args.chunk, args.seconds)
    if args.child:
        print(json.dumps(asyncio.run(run(args.child, *shape))))
        return 0

    def run_mode(mode: str) -> dict[str, Any]:
        command = [sys.executable, "-m", "benchmarks.offload", "--child", mode]
        command += ["--work", str(args.work), "--period", str(args.period)]
        command += ["--chunk", str(args.chunk), "--seconds", str(args.seconds)]
        return child(command, mode)

    print(report(alternating(args.rounds, MODES, run_mode), args))
    return 0


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    lines = [
        f"{args.rounds} rounds of {args.seconds:g} s: {args.work:g} µs of work every "
        f"{args.period:g} ms, loop steps of {args.chunk:g} µs; median [min–max]",
        "",
        "| work done | works finished in the window | loop steps / none's (same round) "
        "| lag, median ms | lag, largest ms |",
        "|---|---|---|---|---|",
    ]
    for mode in MODES:
        runs = results[mode]
        share = [r["steps"] / n["steps"] for r, n in zip(runs, results["none"], strict=True)]
        median = [r["lag_median"] * 1e3 for r in runs]
        largest = [r["lag_max"] * 1e3 for r in runs]
        works = summarise([float(r["works"]) for r in runs])
        row = f"| {mode} | {works} | {summarise(share, '{:.3f}')} | {summarise(median, '{:.2f}')} "
        lines.append(row + f"| {summarise(largest, '{:.2f}')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
