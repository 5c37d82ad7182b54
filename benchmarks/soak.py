"""A long-lived scheduler: otel-spans' retained memory per workflow, after thousands.

One ``dask scheduler`` process and two ``dask worker`` processes (started as
``benchmarks.scheduler_cpu`` starts them, ``distributed.admin.low-level-log-length: 0``
so that Dask's own message log does not hide a plugin's growth) run N small workflows
one after the other: each a ``distributed.span`` tree of depth 1–3 under one of 50
names, two tasks in task groups of their own; every 5th has a task that errs, every
7th one that raises ``distributed.Reschedule`` once per worker (retried).

Variants, each in a fresh cluster:

* ``baseline``: no otel-spans; the scheduler's RSS before and after;
* ``otel-spans``: the scheduler preload, exporting to a blackhole collector; RSS;
* ``tracemalloc``: the same with tracemalloc started in the scheduler process before
  the first workflow. After workflow N - W and after workflow N (W = min(1000, N/2)),
  once otel-spans released every span (its metrics settled), ``gc.collect()`` and the
  traced bytes allocated in otel-spans' own files (``client.run_on_scheduler``): their
  difference over W is the retained bytes per workflow, amortised over the last W.

Usage::

    python -m benchmarks.soak                # 2,000 workflows
    python -m benchmarks.soak -n 400 --variants tracemalloc
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from typing import Any

from dask.delayed import delayed
from distributed import Client, Reschedule, get_worker, span, wait

from benchmarks.overhead import blackhole_collector
from benchmarks.scheduler_cpu import BASE_CONFIG, merge, processes_cluster

VARIANTS = ("baseline", "otel-spans", "tracemalloc")
#: Distinct root span names (metric series per name are bounded by
#: ``metrics.max-span-names``; this stays below it so that every name is a series).
NAMES = 50


def inc(x: int) -> int:
    return x + 1


def fail(x: int) -> int:
    raise ValueError(f"designed failure {x}")


def reschedule_once(x: int, token: str) -> int:
    """Raises ``Reschedule`` the first time each worker runs it."""
    worker = get_worker()
    seen: set[str] = worker.__dict__.setdefault("_soak_rescheduled", set())
    if token not in seen:
        seen.add(token)
        raise Reschedule()
    return x + 1


def workflow(client: Client, i: int) -> None:
    names = [f"service-{i % NAMES}", "stage", "inner"][: 1 + i % 3]
    with ExitStack() as stack:
        for name in names:
            stack.enter_context(span(name))
        # (name-token, 0) keys: task groups of their own, two prefixes shared by all
        first = delayed(inc)(i, dask_key_name=(f"first-{i:032x}", 0))
        if i % 5 == 0:
            second = delayed(fail)(first, dask_key_name=(f"second-{i:032x}", 0))
        elif i % 7 == 0:
            second = delayed(reschedule_once)(first, f"r{i}", dask_key_name=(f"second-{i:032x}", 0))
        else:
            second = delayed(inc)(first, dask_key_name=(f"second-{i:032x}", 0))
        futures = client.compute([first, second])
    wait(futures)


def _start_tracing(dask_scheduler: Any = None) -> None:
    import tracemalloc

    tracemalloc.start()


def _retained(dask_scheduler: Any = None) -> tuple[int, dict[str, int]]:
    """Bytes traced in otel-spans' files, after gc (the least of three readings), and
    by line (of that reading)."""
    import gc
    import os
    import tracemalloc

    import otel_spans

    pattern = os.path.join(os.path.dirname(otel_spans.__file__), "*")
    readings = []
    for _ in range(3):
        gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, pattern)])
        lines = {str(s.traceback[0]): s.size for s in snapshot.statistics("lineno")}
        readings.append((sum(lines.values()), lines))
        time.sleep(0.2)
    return min(readings, key=lambda reading: reading[0])


def released(client: Client, timeout: float = 120) -> dict[str, Any]:
    """Until otel-spans released every span (exported, metrics settled)."""
    deadline = time.monotonic() + timeout
    while True:
        stats: dict[str, Any] = client.sync(client.scheduler.otel_spans_stats)  # type: ignore[union-attr]
        if stats["tracked_spans"] == 0 and stats["traces"]["queued"] == 0:
            return stats
        if time.monotonic() > deadline:
            raise RuntimeError("otel-spans did not release its spans")
        time.sleep(0.2)


def run(variant: str, endpoint: str, n: int) -> dict[str, Any]:
    config = merge(BASE_CONFIG, {"logging": {"distributed": "critical"}})
    if variant != "baseline":
        config = merge(
            config,
            {
                "distributed": {"scheduler": {"preload": ["otel_spans"]}},
                "otel-spans": {"endpoint": endpoint},
            },
        )
    window = min(1000, n // 2)
    out: dict[str, Any] = {"variant": variant}
    with processes_cluster(config) as cluster, Client(cluster.address, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
        if variant == "tracemalloc":
            client.run_on_scheduler(_start_tracing)
        workflow(client, -1)  # warm up
        rss0 = cluster.scheduler.memory_info().rss
        t0 = time.perf_counter()
        for i in range(n):
            if variant == "tracemalloc" and i == n - window:
                released(client)
                out["retained_before"], before = client.run_on_scheduler(_retained)
            workflow(client, i)
        out["wall"] = time.perf_counter() - t0
        if variant != "baseline":
            stats = released(client)
            out["released_evicted"] = stats["released_evicted"]
        if variant == "tracemalloc":
            out["retained_after"], after = client.run_on_scheduler(_retained)
            growth = {line: after.get(line, 0) - before.get(line, 0) for line in after}
            out["top"] = sorted(growth.items(), key=lambda item: -item[1])[:5]
            out["per_workflow"] = (out["retained_after"] - out["retained_before"]) / window
        out["rss_growth"] = cluster.scheduler.memory_info().rss - rss0
    out["window"] = window
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="workflows (default 2,000)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    variants = args.variants.split(",")
    results = []
    with blackhole_collector() as endpoint:
        for variant in variants:
            results.append(run(variant, endpoint, args.n))
    print(f"{args.n} workflows through one scheduler")
    print(f"{'variant':<12} {'wall s':>7} {'RSS growth MiB':>15} {'RSS B/workflow':>15}")
    for r in results:
        growth = r["rss_growth"]
        print(
            f"{r['variant']:<12} {r['wall']:>7.1f} {growth / 2**20:>15.1f} {growth / args.n:>15.0f}"
        )
    for r in results:
        if "per_workflow" in r:
            print(
                f"otel-spans retained (tracemalloc, after gc): {r['retained_before']:,} B after "
                f"workflow {args.n - r['window']:,}, {r['retained_after']:,} B after {args.n:,}: "
                f"{r['per_workflow']:.1f} B per workflow over the last {r['window']:,} "
                f"({r['released_evicted']:,} released spans evicted); most growth:"
            )
            for line, size in r["top"]:
                print(f"  {size:+,} B  {line}")


if __name__ == "__main__":
    main()
