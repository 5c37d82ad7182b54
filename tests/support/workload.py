"""A demo-shaped workflow whose every span, count and second is fixed by its design.

Shaped like ``otel_spans.demo``: a caller's OTel span around a tenant's workflow
(``otel_spans.span(..., attributes=...)``) of nested Dask spans, a stage that depends on
the one before, task code that starts OTel spans of its own, and one task that raises
and is handled. Run on one worker with two threads, so that no task fetches data from
another worker: each task run has exactly one phase, ``compute``.

The design, in the names the backends show::

    nightly request                      the caller's span (service caller-app)
    └ nightly training                   root Dask span, tenant=acme
      ├ load                             Dask span
      │ └ load                           task group: 4 tasks of LOAD_S seconds
      │   └ load ×4 ─ compute            task spans, each with its phase
      └ model                            Dask span
        ├ fit                            task group (a link to the load group: it
        │ └ fit ×2 ─ compute             depends on it): 2 tasks of FIT_S seconds
        │   (fit-0 also ─ epoch ─ step)  spans its task code started
        └ fragile                        task group: 3 tasks, fragile-1 raises
          └ fragile ×3 ─ compute

Run on two workers (``run_on_a_cluster(..., workers=2)``), load-i and fit-i run on
worker i % 2: each fit then fetches the two loads of the other worker, in one transfer
(Dask gathers the keys a task needs from one worker at once and records the transfer
as a phase of that task), so each fit span has a ``transfer`` phase before its
``compute``; everything else is as above.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.servers.ports import LOOPBACK, wait_until

#: The root Dask span, the caller's span and the tenant the workflow carries.
WORKFLOW = "nightly training"
CALLER = "nightly request"
CALLER_SERVICE = "caller-app"
TENANT = {"tenant": "acme"}
#: Seconds each task sleeps (off the CPU: thread-noncpu time). The 4 loads on 2 threads
#: end in two waves LOAD_S apart, twice the metrics interval the test exports at: a
#: rate() of the task-duration histogram sees it grow (a p95 panel needs that).
LOAD_S, FIT_S = 1.0, 0.3
LOADS, FITS, FRAGILES = 4, 2, 3
#: The fragile task that raises, and what.
ERRED_KEY, ERROR = "fragile-1", "ValueError"
#: The spans the code of task fit-0 starts (step is a child of epoch), and its tracer.
TASK_CODE_SPANS = ("epoch", "step")
TASK_CODE_SCOPE = "tests.workload"

#: Tasks by Dask span (own tasks), and in the whole workflow.
TASKS = {"load": LOADS, "model": FITS + FRAGILES}
TASK_COUNT = LOADS + FITS + FRAGILES
#: Worker seconds the tasks sleep, by Dask span: what the worker-time metrics must show.
WORKER_SECONDS = {"load": LOADS * LOAD_S, "model": FITS * FIT_S}
#: Task groups (named by prefix) by Dask span.
GROUPS = {"load": ("load",), "model": ("fit", "fragile")}
#: Spans in the trace: the caller's, 3 Dask spans, 3 groups, a task span and a compute
#: phase per task run, and the 2 spans of fit-0's code.
SPAN_COUNT = 1 + 3 + 3 + 2 * TASK_COUNT + len(TASK_CODE_SPANS)
#: Spans with ERROR status: the erred task, its group, its Dask span and the root.
ERROR_SPANS = 4
#: caller → root → model → fit group → fit-0 → epoch → step.
TREE_DEPTH = 7
#: On two workers: one transfer phase per fit, and as many more spans.
TRANSFERS = FITS
SPREAD_SPAN_COUNT = SPAN_COUNT + TRANSFERS


def load(i: int) -> int:
    time.sleep(LOAD_S)
    return i


def fit(i: int, *parts: int) -> int:
    if i == 0:
        tracer = trace.get_tracer(TASK_CODE_SCOPE)
        with tracer.start_as_current_span("epoch"), tracer.start_as_current_span("step"):
            time.sleep(FIT_S)
    else:
        time.sleep(FIT_S)
    return i + sum(parts)


def fragile(i: int) -> int:
    if f"fragile-{i}" == ERRED_KEY:
        raise ValueError(f"record {i} is corrupt")
    return i


@dataclass(frozen=True)
class Ran:
    """What the client knows of the run: the ids the backends must show."""

    #: The caller span's trace and span id (32 and 16 hex digits).
    trace_id: str
    caller_span_id: str
    #: Tasks that computed, and how many raised.
    ok: int
    erred: int


def run(client: Any, tracer: trace.Tracer, spread: bool = False) -> Ran:
    """The workflow, under the caller's span from ``tracer``; with ``spread``, load-i
    and fit-i on worker i % 2 (of two)."""
    from distributed import span

    import otel_spans

    addresses = sorted(client.scheduler_info()["workers"])
    if spread:
        assert len(addresses) == 2, addresses

    def on(i: int) -> dict[str, Any]:
        return {"workers": [addresses[i % 2]]} if spread else {}

    with tracer.start_as_current_span(CALLER) as caller:
        with otel_spans.span(WORKFLOW, attributes=TENANT):
            with span("load"):
                if spread:
                    parts = [client.submit(load, i, key=f"load-{i}", **on(i)) for i in range(LOADS)]
                else:
                    keys = [f"load-{i}" for i in range(LOADS)]
                    parts = client.map(load, range(LOADS), key=keys)
                client.gather(parts)
            with span("model"):
                fits = [client.submit(fit, i, *parts, key=f"fit-{i}", **on(i)) for i in range(FITS)]
                client.gather(fits)
                keys = [f"fragile-{i}" for i in range(FRAGILES)]
                ok, erred = 0, 0
                for future in client.map(fragile, range(FRAGILES), key=keys):
                    try:
                        future.result()
                        ok += 1
                    except ValueError:
                        erred += 1  # the handled failure
        context = caller.get_span_context()
    return Ran(f"{context.trace_id:032x}", f"{context.span_id:016x}", LOADS + FITS + ok, erred)


def run_on_a_cluster(
    endpoint: str, directory: Path, timeout: float = 60.0, workers: int = 1
) -> Ran:
    """:func:`run` on a LocalCluster (one worker process of two threads, or ``workers=2``
    of them, spread), otel-spans on the scheduler and the workers exporting OTLP to
    ``endpoint``, as the caller does; returns once the scheduler has exported every
    span and read every span's final metrics (``metrics.settle`` after its export), and
    the cluster is closed (flushed)."""
    from distributed import Client, LocalCluster

    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        "distributed.worker.preload": ["otel_spans"],
        "otel-spans.endpoint": endpoint,
        # Longer than the caller's longest pause between stages: the scheduler sees no
        # end of a `with span()` block, only tasks, so a root whose tasks are all done
        # for longer than this is exported, and the next stage's tasks make a
        # continuation (one span more than SPAN_COUNT). At 200 ms a loaded machine
        # paused that long between "load" and "model" (tests/load-repeat: 28 of 27).
        "otel-spans.traces.linger": "2s",
        "otel-spans.traces.poll-interval": "50ms",
        "otel-spans.traces.tasks.mode": "all",
        "otel-spans.metrics.interval": "500ms",
        "otel-spans.metrics.settle": "1s",
        "otel-spans.metrics.cpu-hour-price": 0.05,
        "otel-spans.directory": str(directory),
    }
    provider = TracerProvider(resource=Resource({"service.name": CALLER_SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint, insecure=True)))
    # The worker process inherits it: its spans leave 100 ms after they end.
    saved = os.environ.get("OTEL_BSP_SCHEDULE_DELAY")
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    try:
        with (
            dask.config.set(config),
            LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=workers, threads_per_worker=2, host=LOOPBACK, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,  # type: ignore[no-untyped-call]
        ):
            client.wait_for_workers(workers)
            ran = run(client, provider.get_tracer("tests.caller"), spread=workers == 2)

            def tracking() -> int:
                stats = client.run_on_scheduler(
                    lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
                )
                return int(stats["open_spans"]) + int(stats["live_spans"])

            wait_until(
                lambda: tracking() == 0,
                timeout=timeout,
                interval=0.1,
                message="the scheduler still holds open or unsettled spans",
            )
    finally:
        if saved is None:
            os.environ.pop("OTEL_BSP_SCHEDULE_DELAY", None)
        else:
            os.environ["OTEL_BSP_SCHEDULE_DELAY"] = saved
        provider.shutdown()
    return ran
