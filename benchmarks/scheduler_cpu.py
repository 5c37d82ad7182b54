"""Scheduler CPU per task: otel-spans' cost read from the scheduler's own process.

``benchmarks.overhead`` runs the scheduler inside the client's process, so its CPU
figure mixes the scheduler with the client. Here every variant gets a fresh
``dask scheduler`` process and two fresh ``dask worker`` processes (one thread each, no
nanny), started from a dask.config file of the variant; the client is this process.
The CPU time of the scheduler process (and of each worker process) is read with
psutil before a workload and after it, once otel-spans has exported all of it (the
exporter threads live in the scheduler process: their CPU is part of the cost).

Variants, each against ``baseline`` (no otel-spans) in the same round:

* ``default``: traces (task groups + sampled task runs), metrics and logs;
* ``metrics``: metrics only;
* ``all``: ``traces.tasks.mode: all`` (every task run a span);
* ``profile``: ``default`` plus ``profile: true`` (each finished workflow's busiest
  prefixes' profiles fetched from the workers and exported);
* ``worker``: the worker preload only (tasks that start no spans): worker CPU.

Reported per workload and variant: added scheduler CPU per task in µs (the variant's
scheduler CPU minus the baseline's of the same round, over the workload's task count),
added worker CPU per task, and the wall ratio; each as the median [min–max] over the
rounds. Order alternates between rounds; the scheduler is the bottleneck
(``worker-saturation: inf``).

Usage::

    python -m benchmarks.scheduler_cpu                 # 6 rounds, 20k tasks
    python -m benchmarks.scheduler_cpu --quick         # 2 rounds of 2k tasks
    python -m benchmarks.scheduler_cpu --variants default,metrics --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, NamedTuple

import psutil
import yaml
from distributed import Client

from benchmarks.overhead import blackhole_collector, free_port, inc, nested_spans, tiny_tasks
from benchmarks.rounds import alternating, summarise

#: Workloads: name -> (function, tasks it runs for ``n``).
WORKLOADS: dict[str, tuple[Callable[[Client, int], object], Callable[[int], int]]] = {
    "tiny tasks (client.map)": (tiny_tasks, lambda n: n),
    "nested spans (50 × 20 tasks)": (nested_spans, lambda n: (50 if n >= 20_000 else 10) * 20),
}

BASE_CONFIG: dict[str, Any] = {
    "distributed": {
        "scheduler": {"worker-saturation": float("inf")},
        "admin": {"low-level-log-length": 0},
    },
    "logging": {"distributed": "error"},
}

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "metrics": {
        "otel-spans": {
            "traces": {"exporter": "none", "tasks": {"mode": "none"}},
            "logs": {"exporter": "none"},
        }
    },
    "all": {"otel-spans": {"traces": {"tasks": {"mode": "all"}}}},
    "profile": {"otel-spans": {"profile": True}},
}
#: The worker-preload variant: the scheduler runs without otel-spans.
WORKER = "worker"


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        out[key] = merge(out[key], value) if isinstance(out.get(key), dict) else value
    return out


def variant_config(variant: str, endpoint: str) -> dict[str, Any]:
    if variant == "baseline":
        return BASE_CONFIG
    otel: dict[str, Any] = {"otel-spans": {"endpoint": endpoint}}
    if variant == WORKER:
        otel["distributed"] = {"worker": {"preload": ["otel_spans.worker"]}}
    else:
        otel["distributed"] = {"scheduler": {"preload": ["otel_spans"]}}
        otel = merge(otel, VARIANTS[variant])
    return merge(BASE_CONFIG, otel)


class Cluster(NamedTuple):
    address: str
    scheduler: psutil.Process
    workers: list[psutil.Process]


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


@contextmanager
def processes_cluster(config: dict[str, Any]) -> Iterator[Cluster]:
    """A ``dask scheduler`` and two ``dask worker`` processes reading ``config``."""
    with tempfile.TemporaryDirectory() as config_dir, ExitStack() as stack:
        with open(os.path.join(config_dir, "bench.yaml"), "w") as f:
            yaml.safe_dump(config, f)
        env = {**os.environ, "DASK_CONFIG": config_dir}
        port = free_port()
        address = f"tcp://127.0.0.1:{port}"
        procs: list[subprocess.Popen[bytes]] = []

        def stop() -> None:
            for proc in reversed(procs):
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()

        stack.callback(stop)

        def start(*args: str) -> None:
            command = [sys.executable, "-m", *args]
            out = subprocess.DEVNULL
            procs.append(subprocess.Popen(command, stdout=out, stderr=out, env=env))

        local = ("--host", "127.0.0.1", "--dashboard-address", ":0")
        start("distributed.cli.dask_scheduler", "--port", str(port), *local)
        for _ in range(2):
            start("distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny", *local)
        workers = [psutil.Process(p.pid) for p in procs[1:]]
        yield Cluster(address, psutil.Process(procs[0].pid), workers)


#: Seconds after a workload during which every variant's CPU still counts: long enough
#: for otel-spans to export the workload (linger 2 s, one poll, the traces' batch
#: wait of 5 s, the export itself).
SETTLE = 7.5


class Measurement(NamedTuple):
    wall: float
    #: scheduler-process CPU s, from the workload's start until SETTLE s after it (or
    #: until otel-spans settled, if later)
    scheduler_cpu: float
    #: the same over the workload's wall time only
    scheduler_cpu_during: float
    #: CPU s of both worker processes over the same window as ``scheduler_cpu`` (the
    #: workers answer profile requests after the workload)
    worker_cpu: float


def settle(client: Client, timeout: float = 120) -> None:
    """Until otel-spans on the scheduler has exported everything (untimed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert client.scheduler is not None  # connected by run_variant
        stats = client.sync(client.scheduler.otel_spans_stats)
        busy = stats["traces"]["queued"] + stats["traces"]["sending"] + stats["logs"]["queued"]
        busy += stats.get("profiles", {}).get("waiting", 0)
        if stats["open_spans"] == 0 and busy == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("otel-spans did not settle")


def run_variant(variant: str, endpoint: str, n: int) -> dict[str, Measurement]:
    out = {}
    with (
        processes_cluster(variant_config(variant, endpoint)) as cluster,
        Client(cluster.address, timeout=60) as client,
    ):
        client.wait_for_workers(2, timeout=60)
        client.submit(inc, 0).result()  # warm up
        for name, (workload, _) in WORKLOADS.items():
            s0, w0 = _cpu(cluster.scheduler), sum(_cpu(w) for w in cluster.workers)
            t0 = time.perf_counter()
            workload(client, n)
            wall = time.perf_counter() - t0
            during = _cpu(cluster.scheduler) - s0
            # The same window for every variant: otel-spans exports a span
            # ``traces.linger`` (2 s) after it ends, and the idle scheduler's own
            # CPU over the wait must not count as otel-spans' cost.
            deadline = t0 + wall + SETTLE
            if variant not in ("baseline", WORKER):
                settle(client)
            time.sleep(max(0.0, deadline - time.perf_counter()))
            worker_cpu = sum(_cpu(w) for w in cluster.workers) - w0
            out[name] = Measurement(wall, _cpu(cluster.scheduler) - s0, during, worker_cpu)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2k tasks")
    parser.add_argument("--variants", default=f"default,metrics,all,{WORKER}")
    parser.add_argument("--json", help="also write the raw results to this file")
    args = parser.parse_args(argv)
    rounds, n = (2, 2000) if args.quick else (args.rounds, args.tasks)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in (*VARIANTS, WORKER):
            allowed = ", ".join([*VARIANTS, WORKER])
            raise SystemExit(f"--variants: unknown {v!r}; allowed: {allowed}")
    with blackhole_collector() as endpoint:
        results = alternating(
            rounds, ["baseline", *variants], lambda variant: run_variant(variant, endpoint, n)
        )

    print(
        f"\nAdded CPU per task, scheduler in its own process; {rounds} rounds, "
        "median [min–max] of (variant − baseline of the same round)\n"
    )
    print(
        "| workload | variant | tasks | baseline wall s | baseline scheduler µs/task | wall ratio "
        "| scheduler µs/task (incl. export) | scheduler µs/task (during) | worker µs/task |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (_, count) in WORKLOADS.items():
        tasks = count(n)
        base = [runs[name] for runs in results["baseline"]]
        base_wall = statistics.median(b.wall for b in base)
        base_sched = statistics.median(b.scheduler_cpu / tasks * 1e6 for b in base)
        for variant in variants:
            runs = [r[name] for r in results[variant]]
            pairs = list(zip(runs, base, strict=True))
            wall = [o.wall / b.wall for o, b in pairs]
            sched = [(o.scheduler_cpu - b.scheduler_cpu) / tasks * 1e6 for o, b in pairs]
            during = [
                (o.scheduler_cpu_during - b.scheduler_cpu_during) / tasks * 1e6 for o, b in pairs
            ]
            worker = [(o.worker_cpu - b.worker_cpu) / tasks * 1e6 for o, b in pairs]
            print(
                f"| {name} | {variant} | {tasks} | {base_wall:.2f} | {base_sched:.0f} "
                f"| {summarise(wall, '{:.3f}')} "
                f"| {summarise(sched, '{:.1f}')} | {summarise(during, '{:.1f}')} "
                f"| {summarise(worker, '{:.1f}')} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": rounds, "tasks": n, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
