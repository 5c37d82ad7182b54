"""The demo: a realistic nested-span Dask workflow, exported with otel-spans.

Runs on a fresh machine without a collector: when no OTLP endpoint is configured the
spans land in OTLP/JSON files, which are then read back and printed as a timeline.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

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


def run_workflow(client: object) -> dict[str, float]:
    """The workload: arrays, dataframes and delayed work in nested spans."""
    import dask.array as da
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd
    from distributed import Client, span

    assert isinstance(client, Client)
    results: dict[str, float] = {}
    with span("nightly training"):
        with span("load"):
            x = da.random.default_rng(42).random((2000, 2000), chunks=250).persist()
            pdf = pd.DataFrame(
                {"key": np.arange(20_000) % 17, "value": np.random.default_rng(1).random(20_000)}
            )
            df = dd.from_pandas(pdf, npartitions=8).persist()
        with span("features"):
            centred = (x - x.mean(axis=0)).persist()
            results["feature_norm"] = float((centred**2).sum().compute() ** 0.5)
        with span("aggregate"):
            results["groups"] = float(df.groupby("key")["value"].mean().compute().sum())
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
    """Run the workflow on a LocalCluster with otel-spans preloaded; print what was exported."""
    from distributed import Client, LocalCluster

    from otel_spans.config import Settings
    from otel_spans.report.load import load_spans
    from otel_spans.report.tree import render_tree

    overrides = {
        "distributed.scheduler.preload": ["otel_spans"],
        "distributed.diagnostics.computations.nframes": 1,
        "otel-spans.traces.linger": "500ms",
    }
    with dask.config.set(overrides):
        settings = Settings.from_config()
        target = settings.traces.target
        print(f"otel-spans demo: exporting traces to {target.describe()}")
        started = time.perf_counter()
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
            Client(cluster) as client,
        ):
            results = run_workflow(client)
            stats = client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
            )
        # Closing the cluster flushed every span still in flight.
    print(f"workflow finished in {time.perf_counter() - started:.1f}s: {results}")
    traces = stats.get("traces", {})
    print(f"spans exported before shutdown: {traces.get('exported')}; lost: {traces.get('lost')}")
    if target.kind == "file":
        path = target.directory.resolve() / f"traces-scheduler-{os.getpid()}.jsonl"
        print(f"\nOTLP/JSON written to {path}\n")
        print(render_tree(load_spans(Path(path))))
    return 0
