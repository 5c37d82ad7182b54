"""Run the otel-spans demo workflow on a running Dask cluster (the compose ``demo`` service).

The workload is :func:`otel_spans.demo.run_workflow` (arrays, dataframes, delayed work
and one handled task failure in nested spans); this script only connects a client to
the scheduler, waits for workers and runs it ``--runs`` times, ``--pause`` seconds
apart, so that the dashboards have more than one point in time to show. The scheduler,
with otel-spans preloaded, exports the traces and metrics.

    python deploy/run_demo.py --scheduler tcp://localhost:8786 --runs 1
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

#: The scheduler of deploy/docker-compose.yaml, as seen from another container.
DEFAULT_SCHEDULER = "tcp://scheduler:8786"


def run(
    address: str,
    runs: int = 1,
    pause: float = 0.0,
    workers: int = 0,
    timeout: float = 120.0,
) -> list[dict[str, float]]:
    """Connect to ``address``, wait for ``workers`` workers, run the workflow ``runs`` times."""
    from distributed import Client

    from otel_spans.demo import run_workflow

    results = []
    with Client(address, timeout=timeout) as client:  # type: ignore[no-untyped-call]
        if workers:
            client.wait_for_workers(workers, timeout=timeout)
        for i in range(runs):
            if i:
                time.sleep(pause)
            started = time.perf_counter()
            result = run_workflow(client)
            elapsed = time.perf_counter() - started
            print(f"demo run {i + 1}/{runs} finished in {elapsed:.1f}s: {result}", flush=True)
            results.append(result)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scheduler",
        default=os.environ.get("DASK_SCHEDULER_ADDRESS", DEFAULT_SCHEDULER),
        help="scheduler address (default: $DASK_SCHEDULER_ADDRESS, else %(default)s)",
    )
    parser.add_argument("--runs", type=int, default=1, help="how many times to run it")
    parser.add_argument("--pause", type=float, default=30.0, help="seconds between runs")
    parser.add_argument("--workers", type=int, default=0, help="wait for this many workers")
    parser.add_argument("--timeout", type=float, default=120.0, help="connect/wait timeout (s)")
    args = parser.parse_args(argv)
    run(args.scheduler, args.runs, args.pause, args.workers, args.timeout)
    print("demo done: open Grafana on http://localhost:3000 and Jaeger on http://localhost:16686")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
