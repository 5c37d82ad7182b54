"""A running workflow is visible while it runs: progress gauges of its open spans, and
its finished stages in the trace before its root ends.

The test holds every state it asserts on: the stage's tasks wait for an ``Event`` the
test sets only after its assertions, and "a reading made after the root's export" is
one that shows a workflow the test started only after it saw that export. A metrics
export is one OTLP request (one collection of the SDK's reader), so "the newest
reading" is the newest request, not points within some window of time.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from distributed import Event
from distributed import span as dask_span

import otel_spans
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedMetricPoint, flatten_metrics
from tests.support.cluster import FAST, await_until, cluster_test, traced_cluster
from tests.support.tasks import inc, wait_for

OPEN_TASKS, OPEN_ELAPSED = "dask.span.open.tasks", "dask.span.open.elapsed"


pytestmark = pytest.mark.usefixtures("default_otel_config")


def total(parts: list[int]) -> int:
    return sum(parts)


def readings(receiver: OtlpReceiver) -> list[list[ReceivedMetricPoint]]:
    """Every metrics export received, in order: one request per collection."""
    return [flatten_metrics(r) for r in receiver.records("metrics")]


def newest_export(receiver: OtlpReceiver) -> list[ReceivedMetricPoint]:
    got = readings(receiver)
    return got[-1] if got else []


def progress_in(points: list[ReceivedMetricPoint], span_name: str) -> dict[str, float]:
    """The gauge values of one span in one export: {state or "elapsed": value}."""
    out: dict[str, float] = {}
    for p in points:
        if p.attributes.get("dask.span.name") != span_name:
            continue
        if p.name == OPEN_TASKS:
            out[str(p.attributes["dask.task.state"])] = float(p.value)
        elif p.name == OPEN_ELAPSED:
            out["elapsed"] = float(p.value)
    return out


def progress(receiver: OtlpReceiver, span_name: str) -> dict[str, float]:
    """The newest gauge values of one span."""
    return progress_in(newest_export(receiver), span_name)


@cluster_test(90)
async def test_a_running_workflow_shows_its_progress_and_its_finished_stages(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Catches: gauges counting the tasks of the whole tree on a stage or on the root
    (the root would show states); an elapsed gauge frozen at its first reading; finished
    stages held back until the root ends; gauge series of exported spans kept (the SDK
    keeps reporting a series until the reader's callback stops returning it)."""
    config: dict[str, Any] = {
        **FAST,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.interval": "200ms",
    }
    gate, sentinel = f"gate-{uuid.uuid4()}", f"sentinel-{uuid.uuid4()}"
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
        # A sentinel workflow, started only now and held open: a reading that shows it
        # was made after the root's export, and must show nothing of "nightly".
        with otel_spans.span("sentinel"):
            held = client.submit(wait_for, sentinel, key="sentinel-0", pure=False)

        def after_the_export() -> list[list[ReceivedMetricPoint]]:
            got = readings(otlp_receiver)
            first = next((i for i, r in enumerate(got) if progress_in(r, "sentinel")), None)
            return [] if first is None else got[first:]

        later_readings = await await_until(after_the_export, 30, "no reading of the sentinel")
        await Event(sentinel, client=client).set()
        assert await held == 1
    stale = [
        (p.name, p.attributes)
        for reading in later_readings
        for p in reading
        if p.name in (OPEN_TASKS, OPEN_ELAPSED)
        and str(p.attributes.get("dask.span.root")) == "nightly"
    ]
    assert not stale
    tasks = [p for p in otlp_receiver.metrics() if p.name == OPEN_TASKS]
    assert tasks[0].kind == "gauge" and tasks[0].unit == "{task}"
