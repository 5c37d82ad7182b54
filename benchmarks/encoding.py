"""CPU of encoding per Dask span: the exporter threads' share that is ours alone.

``benchmarks.per_span`` reads the exporter threads' CPU whole: the encoding of records
into OTLP bytes, the collector calls (whose cost is gRPC's, and grows with the idle
time between two calls) and the threads' waits. This benchmark isolates the first. It
runs ``per_span``'s workload once, keeps every batch the traces and logs pipelines
handed to their encoders in the window, with those encoders, and then encodes the
batches again in a loop: the best of ``--repeat`` rounds, in µs of thread CPU per Dask
span, by signal. The records are those of a real run (Dask spans, task groups, sampled
tasks, Dask's events), so the figures move with what an encoder change does to them.

Usage::

    python -m benchmarks.encoding                  # 300 workflows, best of 7
    python -m benchmarks.encoding --workflows 100 --repeat 15
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import per_span
from benchmarks.hook_timer import HookTimer
from otel_spans.export import outcome
from otel_spans.telemetry import logs, signals

_DELIVER = "deliver"
#: (signal, records of one batch, the pipeline's encoder of a batch)
Batch = tuple[str, Sequence[Any], Callable[[Sequence[Any]], bytes]]


def capture(workflows: int) -> list[Batch]:
    """The batches both pipelines encoded in ``per_span``'s window, with their encoders."""
    from benchmarks.overhead import blackhole_collector

    batches: list[Batch] = []
    window = [False]
    deliver = outcome.deliver

    def keeping(signal: str) -> Callable[..., outcome.Delivery]:
        def kept(
            records: Sequence[Any],
            encode: Callable[[Sequence[Any]], bytes],
            send: Callable[[bytes], outcome.Sent],
        ) -> outcome.Delivery:
            if window[0]:
                batches.append((signal, list(records), encode))
            return deliver(records, encode, send)

        return kept

    instrument = per_span.instrument

    def windowed(scheduler: Any, meter: type[per_span.Meter] = HookTimer) -> Any:
        window[0] = True
        return instrument(scheduler, meter)

    # Each pipeline's module calls deliver by its own name for it, at each batch.
    pipelines = ((signals, "traces"), (logs, "logs"))
    for module, signal in pipelines:
        setattr(module, _DELIVER, keeping(signal))
    per_span.instrument = windowed
    try:
        with blackhole_collector() as endpoint:
            config = per_span.variant_config("default", endpoint)
            asyncio.run(per_span.run_workflows(config, workflows))
    finally:
        for module, _ in pipelines:
            setattr(module, _DELIVER, deliver)
        per_span.instrument = instrument
    return batches


def best_ns(batches: list[Batch], signal: str, repeat: int) -> int:
    """Thread CPU of encoding every batch of ``signal`` once: the best of ``repeat``."""
    mine = [(records, encode) for s, records, encode in batches if s == signal]
    best = None
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.thread_time_ns()
            for records, encode in mine:
                encode(records)
            elapsed = time.thread_time_ns() - t0
            best = elapsed if best is None else min(best, elapsed)
    finally:
        gc.enable()
    return best or 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    batches = capture(args.workflows)
    spans = args.workflows * per_span.SPANS_PER_WORKFLOW
    print(f"{args.workflows} workflows ({spans} Dask spans); µs of thread CPU per Dask span")
    for signal in ("traces", "logs"):
        records = sum(len(r) for s, r, _ in batches if s == signal)
        ns = best_ns(batches, signal, args.repeat)
        print(f"{signal:7s} {ns / 1e3 / spans:7.2f}   ({records} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
