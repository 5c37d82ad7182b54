"""A 200k-task workflow with and without otel-spans: scheduler memory, wall, spans.

One workflow inside one ``distributed.span``: a map of tiny tasks, a second map over
its partitions, and a tree reduction of the result with fan-in 10, one task group per
level (about 95k + 95k + 10.5k tasks for ``--tasks 200000``; the exact count is
reported). It is a raw task graph with tuple keys, as Dask collections build them, and
its functions are builtins, so the scheduler imports nothing to unpickle it.

Every variant and round gets a fresh ``dask scheduler`` process and two ``dask worker``
processes (1 thread each; see :func:`benchmarks.scheduler_cpu.processes_cluster`); the
client is this process. So the scheduler's RSS is its own: neither the client's copy of
the graph nor the results are in it. Its peak is the kernel's high-water mark
(``VmHWM``), read once the workflow was exported: nothing between two samples is
missed. The otel-spans variants export over OTLP/gRPC to rotel, which discards it.

Variants, each against ``baseline`` (no otel-spans) of the same round, order
alternating between rounds: ``default`` (task groups, sampled task runs, metrics,
logs) and ``all`` (``traces.tasks.mode: all``; still capped by
``traces.tasks.max-per-trace``).

Reported per variant, median [min–max] over the rounds: the workflow's wall time and
its ratio to the baseline's; the scheduler's peak RSS, that peak minus its RSS just
before the workflow (what the workflow added), and the peak minus the baseline's peak
(what otel-spans added in all, its imports included); the spans otel-spans exported
for the workflow and those it lost, from its own counters (``otel_spans_stats``).

Held memory: every ``--probe-every`` seconds during the workflow and until it was
exported, :func:`benchmarks.held_memory.probe` runs on the scheduler (in every variant,
a no-op without otel-spans) and sums the sizes of otel-spans' own objects, with its
counters of the same moment (task groups, held task spans, tracked spans, queued
records); the largest reading is reported. The walk blocks the scheduler's event loop
while it runs: its total time per run is reported too.

Usage::

    python -m benchmarks.scale                          # 200k tasks, 5 rounds
    python -m benchmarks.scale --tasks 20000 --rounds 1 # a quick check
"""

from __future__ import annotations

import argparse
import json
import operator
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from dask.base import tokenize
from distributed import Client, span

from benchmarks.held_memory import probe
from benchmarks.overhead import blackhole_collector
from benchmarks.rounds import alternating, summarise
from benchmarks.scheduler_cpu import processes_cluster, settle, variant_config

#: otel-spans variants this benchmark compares (keys of ``scheduler_cpu.VARIANTS``).
MODES = ("default", "all")
FAN_IN = 10
MIB = 2**20


def scale_graph(n: int, fan_in: int = FAN_IN) -> tuple[dict[Any, Any], Any]:
    """About ``n`` tasks: ``load`` (w tiny tasks), ``transform`` (one per ``load``
    partition), then a tree reduction of ``fan_in``, one group per level; w is chosen so
    that 2w + w / (fan_in - 1) ≈ n. Returns the graph and its root key."""
    width = max(1, n * (fan_in - 1) // (2 * fan_in - 1))
    token = tokenize("otel-spans scale", n, fan_in)
    graph: dict[Any, Any] = {}
    level: list[Any] = []
    for i in range(width):
        graph[(f"load-{token}", i)] = (operator.neg, i)
        graph[(f"transform-{token}", i)] = (abs, (f"load-{token}", i))
        level.append((f"transform-{token}", i))
    depth = 0
    while len(level) > 1 or depth == 0:
        name = f"combine-{depth}-{token}"
        nodes = []
        for j, start in enumerate(range(0, len(level), fan_in)):
            graph[(name, j)] = (sum, level[start : start + fan_in])
            nodes.append((name, j))
        level, depth = nodes, depth + 1
    return graph, level[0]


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes: Linux's ``VmHWM``."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status (Linux only)")


@contextmanager
def probing(client: Client, every: float) -> Iterator[list[dict[str, Any]]]:
    """:func:`~benchmarks.held_memory.probe` on the scheduler every ``every`` seconds
    (from a thread of this process: the client is thread-safe) while the block runs,
    and once more at its end; yields the list the readings are appended to."""
    readings: list[dict[str, Any]] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            readings.append(client.run_on_scheduler(probe))

    thread = threading.Thread(target=loop, name="scale-probe", daemon=True)
    if every > 0:
        thread.start()
    try:
        yield readings
    finally:
        stop.set()
        if every > 0:
            thread.join()
        readings.append(client.run_on_scheduler(probe))


class Result(NamedTuple):
    tasks: int
    wall: float
    #: the scheduler's RSS just before the workflow, and its peak (VmHWM) after it, bytes
    rss_before: int
    rss_peak: int
    #: spans otel-spans exported for the workflow, and those it lost (dropped, failed)
    exported: int
    lost: int
    #: the largest probe reading: otel-spans' own bytes and objects, and its counters
    held_bytes: int
    held_objects: int
    held_stats: dict[str, Any]
    #: the scheduler's event-loop time spent in probes, and how many ran
    probe_seconds: float
    probes: int


def _stats(client: Client) -> dict[str, Any]:
    assert client.scheduler is not None
    stats: dict[str, Any] = client.sync(client.scheduler.otel_spans_stats)
    return stats


def run_variant(variant: str, endpoint: str, n: int, probe_every: float) -> Result:
    """The workflow once, on a fresh cluster configured as ``variant``."""
    graph, root = scale_graph(n)
    otel = variant != "baseline"
    with (
        processes_cluster(variant_config(variant, endpoint)) as cluster,
        Client(cluster.address, timeout=60) as client,
    ):
        client.wait_for_workers(2, timeout=60)
        client.submit(abs, -1).result()  # warm up (and the "default" span's export)
        client.run_on_scheduler(probe)  # the probe's module is imported before we start
        before: dict[str, Any] = {"traces": {"exported": 0, "lost": 0}}
        if otel:
            settle(client)
            before = _stats(client)
        rss_before = cluster.scheduler.memory_info().rss
        with probing(client, probe_every) as readings:
            started = time.perf_counter()
            with span("scale"):
                client.get(graph, root)
            wall = time.perf_counter() - started
            if otel:
                settle(client, timeout=600)
        after = _stats(client) if otel else before
        rss_peak = peak_rss(cluster.scheduler.pid)
    peak = max(readings, key=lambda reading: int(reading["bytes"]))
    stats = peak["stats"]
    dag = stats.get("dag", {})
    return Result(
        tasks=len(graph),
        wall=wall,
        rss_before=rss_before,
        rss_peak=rss_peak,
        exported=after["traces"]["exported"] - before["traces"]["exported"],
        lost=after["traces"]["lost"] - before["traces"]["lost"],
        held_bytes=peak["bytes"],
        held_objects=peak["objects"],
        held_stats={
            "task_groups": dag.get("task_groups", 0),
            "held_task_spans": dag.get("held_task_spans", 0),
            "tracked_spans": stats.get("tracked_spans", 0),
            "queued": stats.get("traces", {}).get("queued", 0),
        },
        probe_seconds=sum(float(reading["seconds"]) for reading in readings),
        probes=len(readings),
    )


def report(results: dict[str, list[Result]], rounds: int) -> None:
    """The markdown table: per variant, median [min–max] over the rounds."""
    base = results["baseline"]
    tasks = base[0].tasks
    print(
        f"\n{tasks:,}-task workflow, scheduler in its own process, 2 worker processes; "
        f"{rounds} round(s), median [min–max]; ratios and differences against the "
        "baseline of the same round\n"
    )
    print(
        "| variant | wall s | wall ratio | scheduler peak RSS MiB | peak − before MiB "
        "| RSS added MiB "
        "| spans exported | spans lost | otel-spans held at peak MiB "
        "| at that peak: objects, task groups, held task spans, tracked spans, queued "
        "| probes, loop s in them |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for variant, runs in results.items():
        pairs = list(zip(runs, base, strict=True))
        peak = max(runs, key=lambda r: r.held_bytes)
        at = peak.held_stats
        held = (
            f"{peak.held_objects:,}, {at['task_groups']}, {at['held_task_spans']}, "
            f"{at['tracked_spans']}, {at['queued']}"
        )
        print(
            f"| {variant} | {summarise([r.wall for r in runs], '{:.1f}')} "
            f"| {summarise([r.wall / b.wall for r, b in pairs], '{:.3f}')} "
            f"| {summarise([r.rss_peak / MIB for r in runs])} "
            f"| {summarise([(r.rss_peak - r.rss_before) / MIB for r in runs])} "
            f"| {summarise([(r.rss_peak - b.rss_peak) / MIB for r, b in pairs])} "
            f"| {summarise([float(r.exported) for r in runs])} "
            f"| {summarise([float(r.lost) for r in runs])} "
            f"| {summarise([r.held_bytes / MIB for r in runs], '{:.2f}')} | {held} "
            f"| {statistics.median(r.probes for r in runs):.0f}, "
            f"{statistics.median(r.probe_seconds for r in runs):.2f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default=",".join(MODES), help="of: default, all")
    parser.add_argument(
        "--probe-every", type=float, default=2.0, help="seconds between held-memory probes"
    )
    parser.add_argument("--json", help="also write the raw results to this file")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in MODES:
            raise SystemExit(f"--variants: unknown {v!r}; allowed: {', '.join(MODES)}")
    with blackhole_collector() as endpoint:

        def run(variant: str) -> Result:
            return run_variant(variant, endpoint, args.tasks, args.probe_every)

        results = alternating(args.rounds, ["baseline", *variants], run)
    report(results, args.rounds)
    if args.json:
        raw = {variant: [r._asdict() for r in runs] for variant, runs in results.items()}
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "tasks": args.tasks, "results": raw}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
