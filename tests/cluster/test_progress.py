"""A running workflow is visible while it runs: progress gauges of its open spans, and
its finished stages in the trace before its root ends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from distributed import Event
from distributed import span as dask_span

import otel_spans
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedMetricPoint
from tests.support.cluster import FAST, await_until, cluster_test, traced_cluster
from tests.support.tasks import inc, wait_for

OPEN_TASKS, OPEN_ELAPSED = "dask.span.open.tasks", "dask.span.open.elapsed"


pytestmark = pytest.mark.usefixtures("default_otel_config")


def total(parts: list[int]) -> int:
    return sum(parts)


def newest_export(points: list[ReceivedMetricPoint]) -> list[ReceivedMetricPoint]:
    """The points of the most recent metrics export: collected within moments of each
    other (instrument by instrument), 200 ms after the export before."""
    if not points:
        return []
    last = max(p.time_ns for p in points)
    return [p for p in points if p.time_ns > last - 100e6]


def progress(receiver: OtlpReceiver, span_name: str) -> dict[str, float]:
    """The newest gauge values of one span: {state or "elapsed": value}."""
    out: dict[str, float] = {}
    for p in newest_export(receiver.metrics()):
        if p.attributes.get("dask.span.name") != span_name:
            continue
        if p.name == OPEN_TASKS:
            out[str(p.attributes["dask.task.state"])] = float(p.value)
        elif p.name == OPEN_ELAPSED:
            out["elapsed"] = float(p.value)
    return out


@cluster_test(90)
async def test_a_running_workflow_shows_its_progress_and_its_finished_stages(
    otlp_receiver: OtlpReceiver,
) -> None:
    config: dict[str, Any] = {
        **FAST,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.interval": "200ms",
    }
    gate = f"gate-{uuid.uuid4()}"
    async with traced_cluster(config, n_workers=2, nthreads=1) as (client, _, _):
        with otel_spans.span("nightly"):
            with dask_span("load"):
                loaded = client.map(inc, range(3), key=[f"load-{i}" for i in range(3)])
                assert await client.gather(loaded) == [1, 2, 3]
            with dask_span("train"):
                # two tasks hold both threads; a third waits for them
                blocked = client.map(wait_for, [gate, gate], key=["fit-0", "fit-1"], pure=False)
                summed = client.submit(total, blocked, key="combine-0")
            # mid-run: the train stage's tasks by state, from the design above
            running = await await_until(
                lambda: (
                    (p := progress(otlp_receiver, "nightly/train"))
                    and p.get("processing") == 2
                    and p.get("waiting") == 1
                    and p
                ),
                30,
                lambda: str(progress(otlp_receiver, "nightly/train")),
            )
            assert "memory" not in running and running["elapsed"] > 0
            later = await await_until(
                lambda: (
                    (p := progress(otlp_receiver, "nightly/train")).get("elapsed", 0)
                    > running["elapsed"]
                    and p
                ),
                30,
            )
            assert later["processing"] == 2
            # the finished stage is in the trace already, its workflow's root is not
            load = await await_until(
                lambda: next((s for s in otlp_receiver.spans() if s.name == "load"), None), 30
            )
            assert load.attributes["dask.span.task_states.memory"] == 3
            assert not [s for s in otlp_receiver.spans() if s.name in ("nightly", "train")]
            # the root's own gauge: elapsed only (its tasks are in its stages)
            assert set(progress(otlp_receiver, "nightly")) == {"elapsed"}
            await Event(gate, client=client).set()
            assert await summed == 2
        await await_until(lambda: any(s.name == "nightly" for s in otlp_receiver.spans()), 30)
        exported_at = max(p.time_ns for p in otlp_receiver.metrics())
        # a reading made after the export has no series of the exported spans
        await await_until(
            lambda: max(p.time_ns for p in otlp_receiver.metrics()) > exported_at + 300e6, 30
        )
        newest = newest_export(otlp_receiver.metrics())
    assert newest
    assert not [p for p in newest if p.name in (OPEN_TASKS, OPEN_ELAPSED)]
    tasks = [p for p in otlp_receiver.metrics() if p.name == OPEN_TASKS]
    assert tasks[0].kind == "gauge" and tasks[0].unit == "{task}"
