"""Each export of a Dask span carries its own run's worker time by activity.

The workload's design gives the expected values: a task that sleeps spends its time in
``thread-noncpu``, one that spins in ``thread-cpu``; a span reopened by a second
compute carries only the second run's time on its continuation. And the attributes are
the per-span view of the ``dask.span.execute.*`` metrics: over a span's exports they
sum to what the metrics say for that span.

The workers run in processes of their own: a task in an in-process worker waits for the
GIL behind this process's scheduler, receiver and exporter threads, and Dask rightly
counts that wait as ``thread-noncpu`` (a large share of a spin on a loaded machine).
Each task also measures itself (its wall and thread time, with the clocks Dask uses): a
machine under load still preempts a spinning task, and that time is ``thread-noncpu``
too, so the split is compared with what the task saw, not with a bound that needs a
quiet machine.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import NamedTuple

import pytest
from distributed import span

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import FAST_METRICS, await_until, cluster_test, traced_nanny_cluster
from tests.support.received import latest
from tests.support.tasks import heartbeat

pytestmark = pytest.mark.usefixtures("default_otel_config")

RUN = "dask.span.run.time."
#: What Dask's meters, wrapped around the task's call, may see beyond the task's own
#: clocks, per task: the call itself, ``sizeof`` of the result, and one preemption by the
#: OS between Dask's clock and the task's on a loaded machine (a few ms each on Linux).
MARGIN = 0.05
NAP, NAP_C, SPIN = 0.3, 0.5, 0.4


class Run(NamedTuple):
    """What a task saw of itself: wall seconds and its thread's CPU seconds."""

    wall: float
    cpu: float

    @property
    def noncpu(self) -> float:
        return self.wall - self.cpu


def nap(seconds: float) -> Run:
    wall, cpu = time.time(), time.thread_time()
    time.sleep(seconds)
    return Run(time.time() - wall, time.thread_time() - cpu)


def spin(seconds: float) -> Run:
    wall, start = time.time(), time.thread_time()
    while time.thread_time() < start + seconds:
        pass
    return Run(time.time() - wall, time.thread_time() - start)


def run_time(s: ReceivedSpan) -> dict[str, float]:
    return {k.removeprefix(RUN): float(v) for k, v in s.attributes.items() if k.startswith(RUN)}


@cluster_test(120)
async def test_each_export_carries_its_own_runs_time_and_the_metrics_agree(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Catches: thread-cpu and thread-noncpu swapped or merged; a continuation carrying
    the span's cumulative time instead of its own run's; one span's time put on another
    (the sleepy span's on the busy one); the root's idle share taken over a wrong window
    (until its export, or from the cluster's start) or left out; attributes that
    disagree with the metrics of the same span."""
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        **FAST_METRICS,
        # long enough for the forced heartbeats to land before the export
        "otel-spans.traces.linger": "1s",
    }
    async with traced_nanny_cluster(config) as (client, _scheduler):
        began = time.time()
        with span("billing") as billing:
            with span("sleepy") as sleepy:
                naps = await client.gather(client.map(nap, [NAP, NAP], key=["nap-a", "nap-b"]))
                first_done = time.time()
                await client.run(heartbeat)
                # exported, then reopened by a second compute: a continuation
                await await_until(lambda: [s for s in otlp_receiver.spans() if s.name == "sleepy"])
                second_submitted = time.time()
                nap_c = await client.submit(nap, NAP_C, key="nap-c")
                await client.run(heartbeat)
            with span("busy"):
                spun = await client.submit(spin, SPIN, key="spin-a")
                await client.run(heartbeat)
        ended = time.time()

        def exports_of(dask_span_id: str) -> list[ReceivedSpan]:
            got = [
                s for s in otlp_receiver.spans() if s.attributes.get("dask.span.id") == dask_span_id
            ]
            return sorted(got, key=lambda s: int(s.attributes.get("dask.span.continuation", 0)))

        def busy_span() -> ReceivedSpan | None:
            return next((s for s in otlp_receiver.spans() if s.name == "busy"), None)

        # The first export and the continuation of "sleepy", "busy", and the root's
        # export that covers "busy" (the root was done, and may have been exported,
        # between the two computes of "sleepy" too).
        await await_until(
            lambda: (
                len(exports_of(sleepy)) == 2
                and (b := busy_span()) is not None
                and any(r.end_ns >= b.end_ns for r in exports_of(billing))
            ),
            20,
        )
        exports = exports_of(sleepy)
        busy_export = busy_span()
        assert busy_export is not None
        root: dict[str, float] = defaultdict(float)
        for export in exports_of(billing):  # each export carries its own share
            for activity, seconds in run_time(export).items():
                root[activity] += seconds

        # The metrics: dask.span.execute.time by span name and activity, once settled.
        def metric_seconds() -> dict[tuple[str, str], float]:
            out: dict[tuple[str, str], float] = defaultdict(float)
            for (name, attrs), value in latest(otlp_receiver.metrics()).items():
                if name == "dask.span.execute.time":
                    a = dict(attrs)
                    activity = a["dask.activity"].replace("-", "_").replace(" ", "_")
                    out[(a["dask.span.name"], activity)] += value
            return out

        # The root's idle share is reported once the tree's values are final, in a
        # metrics reading that may come after the root's last export.
        def idle_reported() -> bool:
            reported = metric_seconds().get(("billing", "idle_or_other_spans"), 0.0)
            return reported == pytest.approx(root["idle_or_other_spans"], rel=0.01)

        await await_until(idle_reported, 20, lambda: f"{metric_seconds()} vs {dict(root)}")
        metrics = metric_seconds()

    assert len(exports) == 2, [(s.name, s.attributes) for s in exports]
    first, continuation = (run_time(s) for s in exports)
    # From the design: the sleeps are off-CPU (at least their designed seconds), the
    # spin on it (at least its designed CPU seconds); each split is the one the tasks
    # measured themselves, within MARGIN per task.
    assert all(n.wall >= NAP for n in naps) and nap_c.wall >= NAP_C and spun.cpu >= SPIN
    assert first["thread_noncpu"] == pytest.approx(sum(n.noncpu for n in naps), abs=2 * MARGIN)
    assert first.get("thread_cpu", 0.0) == pytest.approx(sum(n.cpu for n in naps), abs=2 * MARGIN)
    # the continuation: the second run alone (0.5 s), not the span's 1.1 s so far
    assert continuation["thread_noncpu"] == pytest.approx(nap_c.noncpu, abs=MARGIN)
    busy = run_time(busy_export)
    assert busy["thread_cpu"] == pytest.approx(spun.cpu, abs=MARGIN)
    assert busy.get("thread_noncpu", 0.0) == pytest.approx(spun.noncpu, abs=MARGIN)
    # The root ran no task of its own; its idle share is the tree's unused thread time:
    # at least both threads' time between the two computes of "sleepy" (no task ran),
    # at most both threads' time from the first submission to the last result, less
    # the time the tasks ran.
    assert set(root) == {"idle_or_other_spans"}
    ran = sum(n.wall for n in naps) + nap_c.wall + spun.wall
    assert 2 * (second_submitted - first_done) <= root["idle_or_other_spans"]
    assert root["idle_or_other_spans"] <= 2 * (ended - began) - ran
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
