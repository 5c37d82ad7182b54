"""The demo: a realistic nested-span Dask workflow, exported with otel-spans.

Runs on a fresh machine without a collector: when no OTLP endpoint is configured the
spans land in OTLP/JSON files, which are then read back and printed as a timeline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
from dask.base import compute
from dask.delayed import delayed


def _slow(x: int, seconds: float) -> int:
    time.sleep(seconds)
    return x * 2


def _fragile(x: int) -> int:
    if x == 3:
        raise ValueError(f"record {x} is corrupt")
    return x


def _quiet(message: str) -> None:
    pass


def _partition(seed: int) -> Any:
    """One 2,500-row pandas partition of the demo's records."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    return pd.DataFrame({"key": rng.integers(0, 17, 2_500), "value": rng.random(2_500)})


def _sums(part: Any) -> Any:
    return part.groupby("key")["value"].agg(["sum", "count"])


def _means(partials: list[Any]) -> float:
    total = partials[0]
    for partial in partials[1:]:
        total = total.add(partial, fill_value=0)
    return float((total["sum"] / total["count"]).sum())


def run_workflow(client: object, progress: Callable[[str], None] = _quiet) -> dict[str, float]:
    """The workload: arrays and delayed pandas work in nested spans.

    One straggler (a delayed task 20× slower than its siblings) and one failing task
    that the workflow handles, so the report has something to find. The records are
    pandas partitions under ``dask.delayed``: a dask.dataframe built inside a span
    makes dask-expr warn that annotations are ignored (the span still reaches the
    scheduler with the graph, but the demo prints no warning it would have to explain).
    """
    import dask.array as da
    from distributed import Client, span

    assert isinstance(client, Client)
    results: dict[str, float] = {}
    with span("nightly training"):
        progress("load: a 2000×2000 array and 8 pandas partitions of 2,500 records")
        with span("load"):
            x = da.random.default_rng(42).random((2000, 2000), chunks=250).persist()
            parts = client.persist([delayed(_partition)(seed) for seed in range(8)])
        progress("features: centring the array")
        with span("features"):
            centred = (x - x.mean(axis=0)).persist()
            results["feature_norm"] = float((centred**2).sum().compute() ** 0.5)
        progress("aggregate: a groupby mean over the partitions")
        with span("aggregate"):
            results["groups"] = delayed(_means)([delayed(_sums)(p) for p in parts]).compute()
        progress("model: 8 delayed steps (one straggler), 5 records (one corrupt: Dask logs it)")
        with span("model"):
            parts = [delayed(_slow)(i, 1.0 if i == 5 else 0.05) for i in range(8)]
            results["model"] = float(sum(compute(*parts)))
            futures = client.map(_fragile, range(5))
            ok = 0
            for future in futures:
                try:
                    future.result()
                    ok += 1
                except ValueError:
                    pass  # the handled failure: one corrupt record is skipped
            results["records_ok"] = ok
    return results


def main() -> int:
    """Run the workflow on a LocalCluster with otel-spans preloaded, then report on it."""
    from distributed import Client, LocalCluster

    from otel_spans.config import Settings
    from otel_spans.report.cli import report

    overrides: dict[str, object] = {
        "distributed.scheduler.preload": ["otel_spans"],
        "distributed.diagnostics.computations.nframes": 1,
        "otel-spans.traces.linger": "500ms",
        # A small workflow: keep every task run, so the report's critical path is exact.
        "otel-spans.traces.tasks.mode": "all",
    }
    with dask.config.set(overrides):
        if Settings.from_config().traces.target.kind == "file":
            # A directory of its own, so the report covers this run only.
            run_dir = Path(dask.config.get("otel-spans.directory")) / time.strftime(
                "demo-%Y%m%d-%H%M%S"
            )
            overrides["otel-spans.directory"] = str(run_dir)
    with dask.config.set(overrides):
        settings = Settings.from_config()
        target = settings.traces.target
        print(f"otel-spans demo: exporting to {target.describe()}", flush=True)
        started = time.perf_counter()
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
            Client(cluster) as client,
        ):
            print(f"cluster up: {cluster.scheduler_address}, 2 workers × 1 thread", flush=True)
            results = run_workflow(
                client, lambda m: print(f"[{time.perf_counter() - started:5.1f}s] {m}", flush=True)
            )
            stats = client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
            )
            print("closing the cluster (flushes every span still in flight)…", flush=True)
    print(f"workflow finished in {time.perf_counter() - started:.1f}s: {results}")
    traces = stats.get("traces", {})
    print(f"trace records so far: {traces.get('submitted')} submitted, {traces.get('lost')} lost")
    if target.kind != "file":
        print("traces, metrics and logs went to the collector; open Jaeger/Tempo and Grafana")
        return 0
    print(f"\nOTLP/JSON written to {target.directory.resolve()}\n")
    return report(target.directory, None, stdout=sys.stdout, stderr=sys.stderr)
