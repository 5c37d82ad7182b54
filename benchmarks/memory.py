"""Scheduler memory with and without otel-spans for a large graph (default 1M tasks).

Each variant runs in a fresh subprocess (so RSS is not shared or reused): a LocalCluster
with the scheduler in that process and 2 worker processes, ``client.map`` over N tiny
tasks inside one Dask span, results gathered and released. Reported: the scheduler
process's peak RSS growth over the run, and after the tasks were released. distributed's
own transition log is set short (``distributed.admin.low-level-log-length``) so that it
does not dominate what is measured.

Usage::

    python benchmarks/memory.py [--tasks 1000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time, resource
import dask, psutil
from distributed import Client, LocalCluster, span
n, otel = int(sys.argv[1]), sys.argv[2] == "1"
config = {"distributed.scheduler.worker-saturation": float("inf"),
          "distributed.admin.low-level-log-length": 1000, "logging.distributed": "error"}
if otel:
    config.update({"distributed.scheduler.preload": ["otel_spans"],
                   "otel-spans.traces.exporter": "none", "otel-spans.metrics.exporter": "none",
                   "otel-spans.logs.exporter": "none"})
def inc(x):
    return x + 1
if __name__ == "__main__":
    with dask.config.set(config), LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c, Client(c) as client:
        proc = psutil.Process()
        base = proc.memory_info().rss
        t = time.perf_counter()
        peak = base
        with span("big"):
            for start in range(0, n, 100_000):
                futures = client.map(inc, range(start, min(n, start + 100_000)), key=[f"inc-{i}" for i in range(start, min(n, start + 100_000))])
                client.gather(futures)
                del futures
                peak = max(peak, proc.memory_info().rss)
        elapsed = time.perf_counter() - t
        time.sleep(3)
        after = proc.memory_info().rss
        print(json.dumps({"otel": otel, "tasks": n, "seconds": elapsed, "peak_growth_mib": (peak - base) / 2**20,
                          "after_growth_mib": (after - base) / 2**20}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    results = []
    for otel in ("0", "1"):
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(args.tasks), otel],
            capture_output=True,
            text=True,
            check=True,
        )
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
        results.append(json.loads(line))
        print(f"{'with' if otel == '1' else 'without'} otel-spans: {results[-1]} "
              f"({time.perf_counter() - started:.0f}s)", file=sys.stderr)  # fmt: skip
    base, otel_run = results
    print(f"\nscheduler RSS for {args.tasks:,} tasks in 100k batches (MiB)\n")
    print("| | peak growth | after release | wall s |")
    print("|---|---|---|---|")
    for name, r in (("without otel-spans", base), ("with otel-spans", otel_run)):
        print(
            f"| {name} | {r['peak_growth_mib']:.0f} | {r['after_growth_mib']:.0f} | {r['seconds']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
