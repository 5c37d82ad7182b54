"""The bounds of ``otel-spans.profile``'s fetches (docs/telemetry.md, *Hot code*): each
prefix's fetch takes at most 10 s, at most 16 finished workflows wait, and every
workflow or prefix not profiled is counted in the ``profiles`` stats.

A real cluster; the scheduler's ``get_profile`` (what the fetcher calls, one prefix at a
time) is replaced on the instance by one that fails, hangs or answers as the test says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from distributed import Scheduler, span, wait

from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster

pytestmark = pytest.mark.usefixtures("default_otel_config")

#: The documented bounds.
FETCH_LIMIT = 10.0
MAX_WAITING = 16


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def profile_config(receiver: OtlpReceiver) -> dict[str, Any]:
    return {
        "otel-spans.endpoint": receiver.grpc_endpoint,
        "otel-spans.profile": True,
        # fetches start one profile cycle after the workflow's end: keep that short
        "distributed.worker.profile.cycle": "100ms",
    }


async def two_prefix_workflow(client: Any, name: str) -> None:
    """A workflow with two prefixes that computed (``<name>a``, ``<name>b``), so two
    prefix profiles to fetch."""
    with span(name):
        futures = [client.submit(nap, 0.01, key=f"{name}{p}-0") for p in "ab"]
        await wait(futures)


class FakeProfiles:
    """Stands in for ``Scheduler.get_profile``: the n-th call does ``plan[n]``
    ("fail", "hang" or "real"; the last entry repeats), and its start time is kept."""

    def __init__(self, scheduler: Scheduler, plan: list[str]):
        self._real: Callable[..., Awaitable[Any]] = scheduler.get_profile
        self._plan = plan
        self.calls: list[float] = []

    async def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(time.monotonic())
        action = self._plan[min(len(self.calls), len(self._plan)) - 1]
        if action == "fail":
            raise OSError("worker gone")
        if action == "hang":
            await asyncio.Event().wait()
        return await self._real(**kwargs)


@cluster_test(120)
async def test_a_failed_and_a_hanging_fetch_are_counted_and_the_rest_still_fetched(
    otlp_receiver: OtlpReceiver,
) -> None:
    """One workflow, two prefixes: the first fetch fails, the second hangs. Both are
    counted as failed; the hanging one is given up after 10 s, not earlier, and the
    next workflow's fetches still run. An implementation without the time limit never
    gets past the hang; one with a shorter limit gives up too early; one that counts a
    failure per workflow instead of per prefix says 1."""
    async with traced_cluster(profile_config(otlp_receiver)) as (client, scheduler, _):
        fake = FakeProfiles(scheduler, ["fail", "hang", "real"])
        scheduler.get_profile = fake  # type: ignore[method-assign]
        await two_prefix_workflow(client, "first")
        await await_until(lambda: len(fake.calls) == 2, 30, "the second prefix was not asked")
        await two_prefix_workflow(client, "second")

        async def settled() -> dict[str, int] | None:
            counts: dict[str, int] = (await stats(client))["profiles"]
            return counts if counts["waiting"] == 0 and counts["exported"] == 2 else None

        counts = await await_until(
            settled, 3 * FETCH_LIMIT, lambda: f"profiles never settled: {fake.calls}"
        )
    assert counts == {"exported": 2, "failed": 2, "dropped": 0, "waiting": 0}
    # the hanging fetch (call 2) was given up after the limit, then call 3 started
    assert len(fake.calls) == 4
    assert fake.calls[2] - fake.calls[1] >= FETCH_LIMIT - 0.01
    assert fake.calls[2] - fake.calls[1] < 2 * FETCH_LIMIT


@cluster_test(120)
async def test_at_most_16_workflows_wait_and_shutdown_counts_every_unfetched_prefix(
    otlp_receiver: OtlpReceiver,
) -> None:
    """A fetch in flight that hangs, 16 workflows waiting: three more are dropped. At
    the scheduler's close every prefix not fetched is failed: both of the workflow in
    flight (the one asked and the one not asked yet) and both of each waiting one. A
    close that only counted the request in flight and the waiting workflows says 33."""
    async with traced_cluster(profile_config(otlp_receiver)) as (client, scheduler, _):
        plugin = scheduler.plugins["otel-spans"]
        fake = FakeProfiles(scheduler, ["hang"])
        scheduler.get_profile = fake  # type: ignore[method-assign]
        await two_prefix_workflow(client, "inflight")
        await await_until(lambda: fake.calls, 30, "the first workflow's fetch did not start")
        extra = 3
        for i in range(MAX_WAITING + extra):
            await two_prefix_workflow(client, f"queued{i}")

        async def all_seen() -> dict[str, int] | None:
            counts: dict[str, int] = (await stats(client))["profiles"]
            return (
                counts if counts["waiting"] + counts["dropped"] == 1 + MAX_WAITING + extra else None
            )

        # well within the 2 x 10 s the hanging workflow takes before the queue moves
        seen = await await_until(all_seen, FETCH_LIMIT, "not every workflow reached the queue")
        await scheduler.close()
        final = plugin.stats()["profiles"]
    # one in flight + 16 waiting; the rest dropped
    assert seen == {"exported": 0, "failed": 0, "dropped": extra, "waiting": 1 + MAX_WAITING}
    assert len(fake.calls) == 1  # one request at a time
    assert final == {
        "exported": 0,
        "failed": 2 * (1 + MAX_WAITING),
        "dropped": extra,
        "waiting": 0,
    }
