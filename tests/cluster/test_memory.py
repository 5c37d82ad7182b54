"""Memory attributed to spans and task groups (docs/telemetry.md, Memory): results held,
spilled, worker pauses and killed workers, each from a workload designed to cause it.

* **Spilling** — one in-process worker whose ``SpillBuffer`` spills managed memory above
  ``LIMIT * TARGET`` = 20 MiB (the memory monitor off, so nothing but stored results
  spills). Stage ``small`` keeps 4 results of 64 KiB, then stage ``big`` keeps 8 of 4 MiB
  (32 MiB in all): storing ``big``'s results pushes the least recently used ones to disk,
  charged to ``big``; ``small`` stored its own below the threshold and spilled nothing.
  Peaks: every result of a stage is held at the end, so each stage's peak is its
  results' ``sizeof`` summed, and the workflow's tree peak both stages' together.
* **Kill** — a nanny worker with a 512 MiB limit runs a task that allocates 600 MiB: its
  nanny kills it (``terminate`` 0.95), and with ``allowed-failures`` 0 the task ends in
  ``KilledWorker``.
* **Pause** — a nanny worker with a 1 GiB limit pauses above 40 % of it (410 MiB): a
  task that allocates 500 MiB for ``HOLD`` seconds pauses it once, for about that long;
  the span that ran before it never overlapped a pause.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import dask.config
import pytest
from dask.sizeof import sizeof
from distributed import Scheduler, Worker, span, wait
from distributed.client import Client

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import (
    FAST,
    FAST_METRICS,
    await_until,
    cluster_test,
    traced_nanny_cluster,
)
from tests.support.received import dask_spans, latest
from tests.support.tasks import hold_memory

pytestmark = pytest.mark.usefixtures("default_otel_config")

MIB = 2**20
LIMIT, TARGET = 40 * MIB, 0.5
SMALL, SMALL_N = 64 * 1024, 4
BIG, BIG_N = 4 * MIB, 8
SPILLING = {
    "distributed.worker.memory.target": TARGET,
    "distributed.worker.memory.spill": False,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": False,
    "distributed.worker.memory.spill-compression": False,
}
#: ``sizeof`` is deterministic: the tolerance only covers a Dask release that changes
#: the per-object overhead it adds to a ``bytes`` (33 bytes today).
PEAK_TOLERANCE = 0.01


def make(i: int, size: int) -> bytes:
    return bytes([i % 256]) * size


def by_name(spans: list[ReceivedSpan]) -> dict[str, dict[str, Any]]:
    """Span name -> its attributes, the latest export's values winning."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for s in sorted(spans, key=lambda s: s.end_ns):
        out[s.name].update(s.attributes)
    return out


@cluster_test(120)
async def test_spilling_stage_is_charged_and_peaks_follow_the_design(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        **FAST,
        **FAST_METRICS,
        **SPILLING,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        # long enough for the forced heartbeats to land before the export
        "otel-spans.traces.linger": "1s",
    }
    with dask.config.set(config):
        async with (
            Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler,
            Worker(scheduler.address, host="127.0.0.1", nthreads=1, memory_limit=LIMIT) as worker,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            with span("memory"):
                with span("small"):
                    small = [
                        client.submit(make, i, SMALL, key=f"small-{i}") for i in range(SMALL_N)
                    ]
                    await wait(small)
                    await worker.heartbeat()
                with span("big"):
                    big = []
                    for i in range(BIG_N):  # one after another: the oldest spill first
                        big.append(client.submit(make, i, BIG, key=f"big-{i}"))
                        await wait(big[-1])
                    await worker.heartbeat()
            names = {"memory", "small", "big"}
            await await_until(lambda: names <= {s.name for s in dask_spans(otlp_receiver)}, 30)

            def spilled_metric() -> float:
                for (metric, labels), value in latest(otlp_receiver.metrics()).items():
                    big_series = ("dask.span.name", "memory/big") in labels
                    if metric == "dask.span.memory.spilled" and big_series and value:
                        return float(value)
                return 0.0

            await await_until(spilled_metric, 30, "no dask.span.memory.spilled for big")
            metrics = latest(otlp_receiver.metrics())
            spans = dask_spans(otlp_receiver)
            groups = [s for s in otlp_receiver.spans() if "dask.task_group.name" in s.attributes]
            del small, big

    small_peak = SMALL_N * sizeof(make(0, SMALL))
    big_peak = BIG_N * sizeof(make(0, BIG))
    attrs = by_name(spans)
    assert attrs["small"]["dask.span.memory.peak"] == pytest.approx(small_peak, PEAK_TOLERANCE)
    assert attrs["big"]["dask.span.memory.peak"] == pytest.approx(big_peak, PEAK_TOLERANCE)
    # every result is still held (the futures were kept) when the spans are exported
    assert attrs["big"]["dask.span.memory.held"] == attrs["big"]["dask.span.memory.peak"]
    # the root's own tasks are none; its tree held both stages at once
    assert attrs["memory"]["dask.span.memory.peak"] == 0
    assert attrs["memory"]["dask.span.memory.tree_peak"] == pytest.approx(
        small_peak + big_peak, PEAK_TOLERANCE
    )
    assert attrs["small"]["dask.span.memory.spilled"] == 0
    # at least what had to leave memory for 20 MiB to hold the rest; at most all of it
    must_leave = small_peak + big_peak - LIMIT * TARGET
    assert 0.99 * must_leave <= attrs["big"]["dask.span.memory.spilled"] <= big_peak + small_peak
    assert "dask.span.memory.pauses" not in attrs["big"]
    # the groups (named by the keys' prefix) carry the same
    by_group = by_name(groups)
    for stage in ("small", "big"):
        peak = attrs[stage]["dask.span.memory.peak"]
        assert by_group[stage]["dask.task_group.memory.peak"] == peak
    assert by_group["small"]["dask.task_group.memory.spilled"] == 0
    assert (
        by_group["big"]["dask.task_group.memory.spilled"]
        == attrs["big"]["dask.span.memory.spilled"]
    )
    # the same as metrics, by span name
    spilled = {
        dict(labels).get("dask.span.name"): value
        for (metric, labels), value in metrics.items()
        if metric == "dask.span.memory.spilled"
    }
    assert spilled["memory/small"] == 0
    assert spilled["memory/big"] == attrs["big"]["dask.span.memory.spilled"]


@cluster_test(180)
async def test_a_worker_killed_for_memory_names_its_task_group_and_span(
    otlp_receiver: OtlpReceiver,
) -> None:
    limit = 512 * MIB
    config = {
        **FAST_METRICS,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "distributed.scheduler.allowed-failures": 0,
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.terminate": 0.95,
    }
    async with traced_nanny_cluster(config, n_workers=1, memory_limit=limit) as (
        client,
        scheduler,
    ):
        with span("memory-kill"), span("hog"):
            future = client.submit(hold_memory, 600 * MIB, 60, key="hog-0", pure=False)
            await await_until(lambda: "hog-0" in scheduler.tasks, 30)
            group = scheduler.tasks["hog-0"].group.name
            with pytest.raises(Exception) as raised:
                await future
        assert type(raised.value).__name__ == "KilledWorker"
        lost = await await_until(
            lambda: [r for r in otlp_receiver.logs() if r.event_name == "dask.worker.lost"],
            60,
            "no dask.worker.lost log record",
        )
        hog = await await_until(
            lambda: [s for s in dask_spans(otlp_receiver) if s.name == "hog"], 60
        )

    # the restarted worker's orderly close at the end lost nothing: one record
    lost = [r for r in otlp_receiver.logs() if r.event_name == "dask.worker.lost"]
    assert len(lost) == 1, [r.body for r in lost]
    record = lost[0]
    assert list(record.attributes["dask.worker.lost.tasks"]) == ["hog-0"]
    assert list(record.attributes["dask.worker.lost.killed_tasks"]) == ["hog-0"]
    assert list(record.attributes["dask.worker.lost.groups"]) == [group]
    assert list(record.attributes["dask.worker.lost.spans"]) == ["memory-kill/hog"]
    assert record.attributes["dask.worker.lost.memory_limit"] == limit
    assert "dask.worker.lost.process_memory" in record.attributes
    assert "hog-0" in str(record.body) and "KilledWorker" in str(record.body)
    # under the span that ran the task
    assert (record.trace_id, record.span_id) == (hog[0].trace_id, hog[0].span_id)
    events = [e for e in hog[0].events if e.name == "dask.worker.lost"]
    assert len(events) == 1
    assert list(events[0].attributes["dask.worker.lost.groups"]) == [group]
    assert hog[0].attributes["dask.span.memory.workers_lost"] == 1


HOLD = 2.0


@cluster_test(180)
async def test_a_pause_is_counted_against_the_span_whose_task_ran_during_it(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {
        **FAST_METRICS,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": 0.4,
        "distributed.worker.memory.terminate": False,
    }
    async with traced_nanny_cluster(config, n_workers=1, memory_limit=1024 * MIB) as (
        client,
        scheduler,
    ):
        with span("memory-pause"):
            with span("calm"):
                assert await client.submit(hold_memory, MIB, 0.0, key="calm-0") == MIB
            with span("pressing"):
                size = 500 * MIB
                assert await client.submit(hold_memory, size, HOLD, key="press-0") == size
        # the pause ends once the monitor sees the memory freed
        await await_until(
            lambda: all(ws.status.name == "running" for ws in scheduler.workers.values()), 30
        )
        names = {"memory-pause", "calm", "pressing"}
        await await_until(lambda: names <= {s.name for s in dask_spans(otlp_receiver)}, 30)
        groups = [s for s in otlp_receiver.spans() if "dask.task_group.name" in s.attributes]

        def pause_seconds() -> float:
            for (metric, attrs), value in latest(otlp_receiver.metrics()).items():
                if (
                    metric == "dask.span.memory.pause_duration"
                    and value
                    and (("dask.span.name", "memory-pause/pressing") in attrs)
                ):
                    return float(value)
            return 0.0

        metric_seconds = await await_until(pause_seconds, 30, "no pause_duration metric")
        attrs = by_name(dask_spans(otlp_receiver))

    pressing = attrs["pressing"]
    assert pressing["dask.span.memory.pauses"] == 1
    # it paused after the allocation and ran again after the free: about HOLD seconds
    # (the monitor looks every 100 ms; a loaded machine delays either message)
    assert HOLD * 0.5 <= pressing["dask.span.memory.pause_duration"] <= HOLD + 5
    assert HOLD * 0.5 <= metric_seconds <= HOLD + 5
    assert "dask.span.memory.pauses" not in attrs["calm"]
    assert "dask.task_group.memory.pauses" not in by_name(groups)["calm"]
    press_group = by_name(groups)["press"]
    assert press_group["dask.task_group.memory.pauses"] == 1
