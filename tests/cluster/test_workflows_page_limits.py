"""``/otel-spans/workflows`` stays bounded: at most 100 running workflows (the oldest)
and the last 100 finished ones (newest first), however many the scheduler saw."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from typing import Any

import pytest
from distributed import Event, span, wait

from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster
from tests.support.tasks import inc, wait_for

pytestmark = pytest.mark.usefixtures("default_otel_config")

#: What the page promises (README: "the running and the last 100 finished workflows").
LISTED = 100
#: Workflows finished before the last LISTED: the page must forget them.
EARLY = 10
#: Running workflows beyond LISTED: too new to be listed.
EXTRA_RUNNING = 10


def fetch_rows(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}?format=json", timeout=30) as response:
        rows: list[dict[str, Any]] = json.loads(response.read())["workflows"]
    return rows


async def finish(client: Any, names: list[str]) -> None:
    """One workflow per name, one task each (a task group per workflow: a live group
    keeps the first span it was in)."""
    futures = []
    for i, name in enumerate(names):
        with span(name):
            futures.append(client.submit(inc, i, key=f"{name}-0"))
    await wait(futures)


@cluster_test(240)
async def test_the_page_keeps_the_oldest_100_running_and_the_newest_100_finished(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint}
    gate = f"gate-{uuid.uuid4()}"
    early = [f"early{i}" for i in range(EARLY)]
    late = [f"late{i}" for i in range(LISTED)]
    running = [f"run{i}" for i in range(LISTED + EXTRA_RUNNING)]
    async with traced_cluster(config) as (client, scheduler, _):
        url = f"http://127.0.0.1:{scheduler.http_server.port}/otel-spans/workflows"

        async def finished_names() -> list[str]:
            rows = await asyncio.to_thread(fetch_rows, url)
            return [r["name"] for r in rows if r["status"] == "finished"]

        # Two waves, each exported before the next starts: which workflows are "the
        # last 100" is then fixed by the design, not by the order of exports in a wave.
        await finish(client, early)
        await await_until(
            lambda: _has(finished_names(), set(early)), 60, "the first wave was not listed"
        )
        await finish(client, late)
        await await_until(lambda: _has(finished_names(), set(late)), 90, "late not listed")
        newest = ["newest"]
        await finish(client, newest)
        await await_until(lambda: _has(finished_names(), set(newest)), 60, "newest not listed")

        # Running: every one of them waits on the gate task (its own workflow, the
        # oldest running one); submitted one after another, so enqueued in this order.
        with span("gate"):
            blocked = client.submit(wait_for, gate, key="gate-0", pure=False)
        dependents = []
        for name in running:
            with span(name):
                dependents.append(client.submit(inc, blocked, key=f"{name}-0"))

        async def all_open() -> bool:
            # the tracker sees every running workflow (gate + run*) as open
            return int((await stats(client))["open_spans"]) >= 1 + len(running)

        await await_until(all_open, 60, "not every running workflow was discovered")
        rows = await asyncio.to_thread(fetch_rows, url)
        await Event(gate, client=client).set()
        assert await client.gather(dependents) == [2] * len(running)

    running_rows = [r["name"] for r in rows if r["status"] == "running"]
    finished_rows = [r["name"] for r in rows if r["status"] == "finished"]
    # Running: exactly 100, the oldest first (the gate, then run0..run98); a page that
    # kept the newest, or listed all 111, fails here.
    assert running_rows == ["gate", *running[: LISTED - 1]]
    # Finished: exactly the last 100 (the newest first): "newest", then 99 of the wave
    # of 100; none of the early wave. A list that kept the first 100, or grew without
    # bound, fails here.
    assert len(finished_rows) == LISTED
    assert finished_rows[0] == "newest"
    assert set(finished_rows[1:]) < set(late) and len(set(finished_rows[1:])) == LISTED - 1
    assert not set(finished_rows) & set(early)
    # running first, then finished
    assert [r["status"] for r in rows] == ["running"] * LISTED + ["finished"] * LISTED


async def _has(names: Any, wanted: set[str]) -> bool:
    return wanted <= set(await names)
