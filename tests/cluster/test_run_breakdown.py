"""Each export of a Dask span carries its own run's worker time by activity.

The workload's design gives the expected values: a task that sleeps spends its time in
``thread-noncpu``, one that spins in ``thread-cpu``; a span reopened by a second
compute carries only the second run's time on its continuation. And the attributes are
the per-span view of the ``dask.span.execute.*`` metrics: over a span's exports they
sum to what the metrics say for that span.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import pytest
from distributed import span

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import FAST_METRICS, await_until, cluster_test, traced_cluster
from tests.support.received import latest
from tests.support.tasks import nap

pytestmark = pytest.mark.usefixtures("default_otel_config")

RUN = "dask.span.run.time."


def spin(seconds: float) -> float:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return seconds


def run_time(s: ReceivedSpan) -> dict[str, float]:
    return {k.removeprefix(RUN): float(v) for k, v in s.attributes.items() if k.startswith(RUN)}


async def heartbeats(workers: list[Any]) -> None:
    """Worker metrics travel with heartbeats: force one before the span is exported."""
    await asyncio.gather(*(w.heartbeat() for w in workers))


@cluster_test(90)
async def test_each_export_carries_its_own_runs_time_and_the_metrics_agree(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        **FAST_METRICS,
        # long enough for the forced heartbeats to land before the export
        "otel-spans.traces.linger": "1s",
    }
    async with traced_cluster(config) as (client, _scheduler, workers):
        with span("billing"):
            with span("sleepy") as sleepy:
                assert await client.gather(client.map(nap, [0.3, 0.3], key=["nap-a", "nap-b"]))
                await heartbeats(workers)
                # exported, then reopened by a second compute: a continuation
                await await_until(lambda: [s for s in otlp_receiver.spans() if s.name == "sleepy"])
                assert await client.submit(nap, 0.5, key="nap-c") == 0.5
                await heartbeats(workers)
            with span("busy"):
                # one spinning task: two would share the GIL of this process's workers
                assert await client.submit(spin, 0.4, key="spin-a") == 0.4
                await heartbeats(workers)

        def sleepy_exports() -> list[ReceivedSpan]:
            return [s for s in otlp_receiver.spans() if s.attributes.get("dask.span.id") == sleepy]

        # the first export and the continuation of "sleepy", "busy" and the root
        await await_until(
            lambda: (
                len(sleepy_exports()) == 2
                and {"billing", "busy"} <= {s.name for s in otlp_receiver.spans()}
            ),
            20,
        )
        exports = sleepy_exports()
        exports.sort(key=lambda s: int(s.attributes.get("dask.span.continuation", 0)))
        spans = {s.name: s for s in otlp_receiver.spans() if "dask.span.id" in s.attributes}

        # The metrics: dask.span.execute.time by span name and activity, once settled.
        def metric_seconds() -> dict[tuple[str, str], float]:
            out: dict[tuple[str, str], float] = defaultdict(float)
            for (name, attrs), value in latest(otlp_receiver.metrics()).items():
                if name == "dask.span.execute.time":
                    a = dict(attrs)
                    activity = a["dask.activity"].replace("-", "_").replace(" ", "_")
                    out[(a["dask.span.name"], activity)] += value
            return out

        # the root's idle share is reported once the tree's values are final
        await await_until(lambda: metric_seconds().get(("billing", "idle_or_other_spans")), 20)
        metrics = metric_seconds()

    assert len(exports) == 2, [(s.name, s.attributes) for s in exports]
    first, continuation = (run_time(s) for s in exports)
    # from the design: 2 × 0.3 s asleep, then 0.5 s asleep (the continuation's alone)
    assert first["thread_noncpu"] == pytest.approx(0.6, abs=0.1)
    assert continuation["thread_noncpu"] == pytest.approx(0.5, abs=0.1)
    busy = run_time(spans["busy"])
    assert busy["thread_cpu"] == pytest.approx(0.4, abs=0.1)
    assert busy.get("thread_noncpu", 0.0) < 0.15
    # the root ran no task of its own; its idle share is the tree's unused thread time
    root = run_time(spans["billing"])
    assert set(root) == {"idle_or_other_spans"} and root["idle_or_other_spans"] > 0
    # over a span's exports, the attributes sum to the metrics of that span
    sums: dict[tuple[str, str], float] = defaultdict(float)
    for name, times in (
        ("billing/sleepy", first),
        ("billing/sleepy", continuation),
        ("billing/busy", busy),
        ("billing", root),
    ):
        for activity, seconds in times.items():
            sums[(name, activity)] += seconds
    idle = ("billing", "idle_or_other_spans")
    expected = {k: v for k, v in metrics.items() if v > 0}
    # the root's idle share is computed at its export; the metric's once the tree's
    # values settled (worker reports that arrive after the export move it slightly)
    assert sums.pop(idle) == pytest.approx(expected.pop(idle), rel=0.01)
    assert dict(sums) == pytest.approx(expected, rel=1e-9)
