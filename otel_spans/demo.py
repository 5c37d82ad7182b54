"""The demo: a realistic nested-span Dask workflow, exported with otel-spans.

Runs on a fresh machine without a collector: when no OTLP endpoint is configured the
spans land in OTLP/JSON files, which are then read back and printed as a timeline.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
from dask.base import compute
from dask.delayed import delayed

#: The root span of the demo's workflow.
WORKFLOW = "nightly training"
#: ``--compare``, ``--history``: the stage the last run makes slower, and by how much
#: per task.
SLOWER_STAGE, SLOWER_BY = "aggregate", 0.4


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


def _sums(part: Any, slower: float = 0.0) -> Any:
    if slower:
        time.sleep(slower)  # the stage a later run made slower (demo --compare)
    return part.groupby("key")["value"].agg(["sum", "count"])


def _means(partials: list[Any]) -> float:
    total = partials[0]
    for partial in partials[1:]:
        total = total.add(partial, fill_value=0)
    return float((total["sum"] / total["count"]).sum())


def run_workflow(
    client: object, progress: Callable[[str], None] = _quiet, slower: float = 0.0
) -> dict[str, float]:
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
    with span(WORKFLOW):
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
            sums = [delayed(_sums)(p, slower) for p in parts]
            results["groups"] = delayed(_means)(sums).compute()
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


def _warm_up() -> None:
    import dask.array  # noqa: F401
    import numpy  # noqa: F401
    import pandas  # noqa: F401


def _wait_for_export(client: Any, timeout: float = 20.0) -> None:
    """Until the scheduler exported the finished workflow (and fetched its profiles,
    with ``otel-spans.profile``); bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
        )
        profiles = stats.get("profiles", {})
        if stats.get("open_spans") == 0 and profiles.get("waiting", 0) == 0:
            return
        time.sleep(0.2)


def _run(overrides: dict[str, object], slower: float, label: str) -> tuple[Path | None, int]:
    """One run of the workflow on a fresh LocalCluster; its output directory (None when
    the telemetry went to a collector) and the exit code."""
    from distributed import Client, LocalCluster

    from otel_spans.config import Settings

    with dask.config.set(overrides):
        settings = Settings.from_config()
        target = settings.traces.target
        print(f"otel-spans demo{label}: exporting to {target.describe()}", flush=True)
        started = time.perf_counter()
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
            Client(cluster) as client,
        ):
            print(f"cluster up: {cluster.scheduler_address}, 2 workers × 1 thread", flush=True)
            # Imports on the workers before the workflow: a first stage that pays for
            # them would differ from run to run by more than noise (--compare).
            client.run(_warm_up)
            results = run_workflow(
                client,
                lambda m: print(f"[{time.perf_counter() - started:5.1f}s] {m}", flush=True),
                slower=slower,
            )
            _wait_for_export(client)
            stats = client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
            )
            print("closing the cluster (flushes every span still in flight)…", flush=True)
    print(f"workflow finished in {time.perf_counter() - started:.1f}s: {results}")
    traces = stats.get("traces", {})
    print(f"trace records so far: {traces.get('submitted')} submitted, {traces.get('lost')} lost")
    if target.kind != "file":
        print("traces, metrics and logs went to the collector; open Jaeger/Tempo and Grafana")
        return None, 0
    print(f"\nOTLP/JSON written to {target.directory.resolve()}\n", flush=True)
    return target.directory, 0


def run_into(directory: str, slower: float) -> int:
    """One run of ``demo --compare`` or ``--history``, into ``directory`` (in a
    process of its own)."""
    label = f" ({Path(directory).name})"
    if slower:
        label = f" ({Path(directory).name}: {SLOWER_STAGE} made slower on purpose)"
    overrides = {**_OVERRIDES, "otel-spans.directory": directory}
    return _run(overrides, slower, label)[1]


#: The demo's configuration: every task run kept (a small workflow: the report's
#: critical path is exact), spans exported half a second after they finish.
_OVERRIDES: dict[str, object] = {
    "distributed.scheduler.preload": ["otel_spans"],
    "distributed.diagnostics.computations.nframes": 1,
    "otel-spans.traces.linger": "500ms",
    "otel-spans.traces.tasks.mode": "all",
}


def _run_series(run_dir: Path, slowdowns: list[tuple[str, float]]) -> tuple[list[Path], int]:
    """Each run in a process of its own, as nightly runs would be: a second run in the
    same client process finds its array graphs cached and its early stages faster."""
    runs: list[Path] = []
    for name, slower in slowdowns:
        directory = run_dir / name
        command = [sys.executable, "-m", "otel_spans", "demo", "--run-into", str(directory)]
        if slower:
            command += ["--slower-by", str(slower)]
        code = subprocess.run(command, check=False).returncode
        if code:
            return runs, code
        runs.append(directory)
    return runs, 0


def main(compare: bool = False, history: int | None = None) -> int:
    """Run the workflow on a LocalCluster with otel-spans preloaded, then report on it;
    with ``compare``, run it twice, the second time with one stage made slower on
    purpose, and compare the two runs; with ``history``, run it that many times, the
    last time with that stage slower, and judge the last run against the others."""
    from otel_spans.config import Settings
    from otel_spans.report.cli import report
    from otel_spans.report.compare_cli import compare as compare_runs
    from otel_spans.report.history_cli import history_command

    overrides = dict(_OVERRIDES)
    run_dir: Path | None = None
    with dask.config.set(overrides):
        if Settings.from_config().traces.target.kind == "file":
            # A directory of its own, so the report covers this run only.
            run_dir = Path(dask.config.get("otel-spans.directory")) / time.strftime(
                "demo-%Y%m%d-%H%M%S"
            )
    if not compare and history is None:
        if run_dir is not None:
            overrides["otel-spans.directory"] = str(run_dir)
        directory, code = _run(overrides, 0.0, "")
        if directory is None:
            return code
        return report(directory, None, stdout=sys.stdout, stderr=sys.stderr)
    if run_dir is None:
        what = "--compare" if compare else "--history"
        print(f"otel-spans demo {what} reads the runs back: it needs the file exporter")
        return 2
    if history is not None:
        if history < 2:
            print("otel-spans demo --history: at least 2 runs")
            return 2
        series = [(f"run-{n:02d}", 0.0) for n in range(1, history)]
        runs, code = _run_series(run_dir, [*series, (f"run-{history:02d}", SLOWER_BY)])
        if code:
            return code
        print(f"otel-spans report --history {run_dir}\n", flush=True)
        return history_command([run_dir], stdout=sys.stdout, stderr=sys.stderr)
    runs, code = _run_series(run_dir, [("baseline", 0.0), ("slower", SLOWER_BY)])
    if code:
        return code
    print(
        f"otel-spans report --compare {runs[0]} {runs[1]} --workflow '{WORKFLOW}'\n",
        flush=True,
    )
    return compare_runs(
        runs[0],
        runs[1],
        workflow=WORKFLOW,
        json_out=None,
        out_dir=None,
        fail_if_slower=None,
        stdout=sys.stdout,
        stderr=sys.stderr,
    )
