"""Overhead of otel-spans: the same Dask workloads with and without it, in one run.

Each round runs every variant (baseline without otel-spans, then each mode) in a
fresh Python process of its own, on a fresh LocalCluster (2 worker processes × 1
thread); the otel-spans variants export over OTLP/gRPC to a real collector (rotel,
discarding what it receives) shared by the whole run. Which variant runs first
alternates between rounds, so drift (caches, thermal, other load) hits both alike.

Why a process per variant and round: distributed keeps every closed Scheduler alive
(``distributed.core._expects_comm`` is an unbounded cache of bound handlers), about
12k objects per cluster. In one long process every later round would pay for the
earlier ones in slower full garbage collections, whichever variant it measures.

Reported: per workload, the median of the per-round wall-time ratios (otel-spans /
baseline) with min and max, and the same for the scheduler process's CPU time
(scheduler, client and otel-spans' exporter threads live in it; workers are other
processes). After each workload the run waits, untimed, until otel-spans has
exported all of it, and reports the CPU its exporter threads spent on it (part of it
falls inside the timed window).

The scheduler runs with ``worker-saturation: inf``, its fastest setting, so that the
scheduler (where otel-spans' hooks run) is the bottleneck and overhead shows most.

With ``--scale`` the workloads are the large ones: a 100k-task graph (a map-reduce
with fan-in 100, built as a raw task graph with tuple keys) and a tree of 1,000
nested Dask spans. Then the scheduler's RSS after each workload and its event-loop lag
(how late a 10 ms timer on the scheduler's loop fires, p99 over the workload) are
reported too.

Usage::

    python -m benchmarks.overhead               # 5 rounds, 20k tasks
    python -m benchmarks.overhead --scale --modes default,metrics
    python -m benchmarks.overhead --scale --only nested --rounds 15
    python -m benchmarks.overhead --quick       # a smoke run for CI
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import dask
import dask.array as da
from distributed import Client, LocalCluster, span

from benchmarks.loop_lag import LoopLag
from benchmarks.rounds import alternating, summarise

Workload = Callable[[Client, int], object]


def inc(x: int) -> int:
    return x + 1


def tiny_tasks(client: Client, n: int) -> object:
    with span("tiny tasks"):
        return sum(client.gather(client.map(inc, range(n))))


def array_reduction(client: Client, n: int) -> object:
    side = 4000 if n >= 20_000 else 1000
    with span("array"), span("reduction"):
        x = da.random.random((side, side), chunks=250)
        return float((x - x.mean(axis=0)).std().compute())


def nested_spans(client: Client, n: int) -> object:
    total = 0
    with span("nested"):
        for i in range(50 if n >= 20_000 else 10):
            with span(f"level1-{i % 5}"), span(f"level2-{i}"):
                keys = [f"nest{i}-{j}" for j in range(20)]
                total += sum(client.gather(client.map(inc, range(20), key=keys)))
    return total


def map_reduce_graph(n: int, fan_in: int = 100) -> tuple[dict[Any, Any], Any]:
    """A raw graph of about ``n`` tasks: leaves, partial sums of ``fan_in``, a total."""
    leaves = n - n // fan_in - 1
    graph: dict[Any, Any] = {("leaf", i): (inc, i) for i in range(leaves)}
    partials = []
    for j, start in enumerate(range(0, leaves, fan_in)):
        inputs = [("leaf", i) for i in range(start, min(leaves, start + fan_in))]
        graph[("partial", j)] = (sum, inputs)
        partials.append(("partial", j))
    graph[("total", 0)] = (sum, partials)
    return graph, ("total", 0)


def big_graph(client: Client, n: int) -> object:
    graph, root = map_reduce_graph(n)
    with span("big graph"):
        return client.get(graph, root)


def thousand_nested_spans(client: Client, n: int) -> object:
    """100 stages × 10 steps under one root (1,101 Dask spans), 5 tasks per step.

    Dask puts a whole task group in the span that first saw it, and a string key's
    group is its prefix: with keys like ``"nested-3-4-0"`` all 5,500 tasks would land
    in the first step's span. Tuple keys give every step its own group, as Dask
    collections do (``("add-<token>", i)``), hence its own span.
    """
    stages, steps = (100, 10) if n >= 20_000 else (10, 10)
    futures = []
    with span("pipeline"):
        for i in range(stages):
            with span(f"stage-{i}"):
                for j in range(steps):
                    with span(f"step-{j}"):
                        keys = [(f"step-{i}-{j}", k) for k in range(5)]
                        futures += client.map(inc, range(5), key=keys)
        return sum(client.gather(futures))


WORKLOADS: dict[str, Workload] = {
    "20k tiny tasks (client.map)": tiny_tasks,
    "dask.array reduction": array_reduction,
    "50 nested spans × 20 tasks": nested_spans,
}
SCALE_WORKLOADS: dict[str, Workload] = {
    "100k-task graph": big_graph,
    "1,000 nested spans": thousand_nested_spans,
}
ALL_WORKLOADS = {**WORKLOADS, **SCALE_WORKLOADS}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def blackhole_collector() -> Iterator[str]:
    """rotel receiving OTLP/gRPC on loopback and discarding it; yields its endpoint."""
    import rotel

    binary = os.path.join(os.path.dirname(rotel.__file__), "rotel-agent")
    grpc_port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        [binary, "start", "--otlp-grpc-endpoint", f"127.0.0.1:{grpc_port}",
         "--otlp-http-endpoint", f"127.0.0.1:{http_port}", "--exporter", "blackhole"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", grpc_port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("rotel did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{grpc_port}"
    finally:
        proc.terminate()
        proc.wait(10)


class Measurement(NamedTuple):
    wall: float
    cpu: float
    #: growth of this process's RSS over the workload, MiB
    rss_growth: float
    #: p99 lateness of the 10 ms timer on the scheduler's loop, ms
    lag_p99: float
    #: CPU of otel-spans' exporter threads over the workload and until it settled, s
    export_cpu: float


def export_threads_cpu() -> float:
    """CPU seconds so far of this process's otel-spans exporter threads."""
    import threading

    import psutil

    ids = {t.native_id for t in threading.enumerate() if t.name.startswith("otel-spans-")}
    threads = psutil.Process().threads()
    return float(sum(t.user_time + t.system_time for t in threads if t.id in ids))


def settle(cluster: LocalCluster, timeout: float = 60) -> None:
    """Wait (untimed) until otel-spans exported everything of the last workload.

    Spans are exported ``traces.linger`` after they finish; without this the export of
    one workload would be billed to the next one.
    """
    assert cluster.scheduler is not None  # a LocalCluster's scheduler is in-process
    plugin = cluster.scheduler.plugins.get("otel-spans")
    if plugin is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = plugin.stats()
        busy = stats["traces"]["queued"] + stats["traces"]["sending"] + stats["logs"]["queued"]
        if stats["open_spans"] == 0 and busy == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"otel-spans did not settle within {timeout}s: {plugin.stats()}")


def run_variant(
    config: dict[str, Any], n: int, workloads: dict[str, Workload]
) -> tuple[dict[str, Measurement], Any]:
    """Time every workload on a fresh cluster."""
    import psutil

    process = psutil.Process()
    out = {}
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        client.submit(inc, 0).result()  # warm the workers up
        for name, workload in workloads.items():
            rss = process.memory_info().rss
            export_cpu = export_threads_cpu()
            wall, cpu = time.perf_counter(), time.process_time()
            with LoopLag(cluster.loop.asyncio_loop) as lag:
                workload(client, n)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rss_growth = (process.memory_info().rss - rss) / 2**20
            settle(cluster)
            out[name] = Measurement(
                wall=wall,
                cpu=cpu,
                rss_growth=rss_growth,
                lag_p99=lag.p99() * 1000,
                export_cpu=export_threads_cpu() - export_cpu,
            )
        stats = None
        if "otel-spans" in cluster.scheduler.plugins:
            stats = cluster.scheduler.plugins["otel-spans"].stats()
    return out, stats


BASE_CONFIG: dict[str, Any] = {
    "distributed.scheduler.worker-saturation": float("inf"),
    "distributed.admin.low-level-log-length": 0,
    "logging.distributed": "error",
}


#: otel-spans variants (``--modes``): their config on top of exporting everything.
MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "all": {"otel-spans.traces.tasks.mode": "all"},
    "metrics": {
        "otel-spans.traces.exporter": "none",
        "otel-spans.logs.exporter": "none",
        "otel-spans.traces.tasks.mode": "none",
    },
}


def variant_config(variant: str, endpoint: str) -> dict[str, Any]:
    """dask.config of one variant: ``baseline`` or an otel-spans mode."""
    if variant == "baseline":
        return BASE_CONFIG
    otel = {
        **BASE_CONFIG,
        "distributed.scheduler.preload": ["otel_spans"],
        "otel-spans.endpoint": endpoint,
    }
    return {**otel, **MODES[variant]}


def run_isolated(
    variant: str, endpoint: str, n: int, workloads: list[str]
) -> tuple[dict[str, Measurement], Any]:
    """:func:`run_variant` in a fresh Python process; its result comes back as JSON."""
    command = [sys.executable, "-m", "benchmarks.overhead", "--child", variant,
               "--endpoint", endpoint, "--tasks", str(n),
               "--workloads", json.dumps(workloads)]  # fmt: skip
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    timings = {name: Measurement(*values) for name, values in out["timings"].items()}
    return timings, out["stats"]


def child(variant: str, endpoint: str, n: int, names: list[str]) -> int:
    """The child side of :func:`run_isolated`: one variant, its result on stdout."""
    workloads = {name: ALL_WORKLOADS[name] for name in names}
    timings, stats = run_variant(variant_config(variant, endpoint), n, workloads)
    print(json.dumps({"timings": timings, "stats": stats}, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2k tasks")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="the large workloads: a 100k-task graph and 1,000 nested spans (--tasks 100000)",
    )
    parser.add_argument(
        "--only", default="", help="run only the workloads whose name contains this text"
    )
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument(
        "--modes",
        default="default",
        help="comma-separated otel-spans variants: default (groups + sampled tasks + "
        "metrics + logs), all (every task run a span), metrics (metrics only, no traces)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--workloads", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.endpoint, args.tasks, json.loads(args.workloads))

    rounds, n = (2, 2000) if args.quick else (args.rounds, args.tasks)
    workloads = [
        name for name in (SCALE_WORKLOADS if args.scale else WORKLOADS) if args.only in name
    ]
    if not workloads:
        raise SystemExit(f"--only: no workload name contains {args.only!r}")
    if args.scale and not args.quick and args.tasks == 20_000:
        n = 100_000

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            raise SystemExit(f"--modes: unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    with blackhole_collector() as endpoint:
        runs = alternating(
            rounds,
            ["baseline", *modes],
            lambda variant: run_isolated(variant, endpoint, n, workloads),
        )
    last_stats = runs[modes[-1]][-1][1] if modes else None
    results: dict[str, dict[str, list[Measurement]]] = {
        variant: {name: [timings[name] for timings, _ in rounds_of] for name in workloads}
        for variant, rounds_of in runs.items()
    }

    print(
        f"\notel-spans overhead, {rounds} rounds (a fresh process per variant and round), "
        "ratio = with / without (median [min–max])\n"
    )
    print(
        "| workload | mode | baseline wall s | wall ratio | scheduler-process CPU ratio "
        "| RSS growth MiB (baseline → with) | loop lag p99 ms (baseline → with) "
        "| exporter threads CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in workloads:
        base_runs = results["baseline"][name]
        base_wall = statistics.median(b.wall for b in base_runs)
        base_rss = statistics.median(b.rss_growth for b in base_runs)
        base_lag = statistics.median(b.lag_p99 for b in base_runs)
        for mode in modes:
            otel_runs = results[mode][name]
            wall = [o.wall / b.wall for o, b in zip(otel_runs, base_runs, strict=True)]
            cpu = [o.cpu / b.cpu for o, b in zip(otel_runs, base_runs, strict=True)]
            rss = statistics.median(o.rss_growth for o in otel_runs)
            lag = statistics.median(o.lag_p99 for o in otel_runs)
            export_cpu = statistics.median(o.export_cpu for o in otel_runs)
            print(
                f"| {name} | {mode} | {base_wall:.2f} "
                f"| {summarise(wall, '{:.3f}')} | {summarise(cpu, '{:.3f}')} "
                f"| {base_rss:.0f} → {rss:.0f} | {base_lag:.0f} → {lag:.0f} "
                f"| {export_cpu:.2f} |"
            )
    print(f"\nexporter counters of the last otel-spans run: {last_stats}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": rounds, "tasks": n, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
