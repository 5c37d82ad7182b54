"""The planted-pathology suite: each workload is designed so that one pathology
dominates its wall time, and the scheduler's diagnosis must rank that finding first,
about the designed task group or span. A clean workload gets no critical finding.

Every workload is small (seconds on two busy cores) and its pathology is planted with
a margin over the rule's threshold that a loaded machine does not erase: a loaded
machine makes tasks and scheduling slower, which every workload here tolerates because
the planted time (a sleep, a CPU budget in thread time, a file written) dwarfs the rest
or grows with it. What each plants and why is in its docstring.

``memory-pressure`` is planted as a worker pause: its subject is the group that held
the most bytes, not the one that paused the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from dask.delayed import delayed
from distributed import span, wait

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import (
    await_until,
    cluster_test,
    traced_cluster,
    traced_nanny_cluster,
)
from tests.support.tasks import (
    blob,
    fail,
    heartbeat,
    hold_memory,
    inc,
    spin,
    step,
    total_size,
)

Found = list[tuple[str, str, str]]


#: The root is exported a second after its last task, so that the worker metrics a
#: forced heartbeat sends (``tests.support.tasks.heartbeat``) are in it.
_LATE_METRICS = {"otel-spans.traces.linger": "1s"}


def _config(receiver: OtlpReceiver, **more: Any) -> dict[str, Any]:
    """Every workflow diagnosed, however short: the planted workloads take seconds on a
    busy machine, but on a quiet one some finish under ``diagnosis.min-duration``."""
    return {
        "otel-spans.endpoint": receiver.grpc_endpoint,
        "otel-spans.diagnosis.min-duration": 0,
        **more,
    }


async def _root_span(receiver: OtlpReceiver, root_id: str) -> ReceivedSpan:
    """The root span of the Dask span ``root_id``, once exported."""
    (root,) = await await_until(
        lambda: [s for s in receiver.spans() if s.attributes.get("dask.span.id") == root_id],
        30,
        "the root span was not exported",
    )
    return root


async def _findings(receiver: OtlpReceiver, root_id: str) -> tuple[Found, Mapping[str, Any]]:
    """(id, severity, subject) of each finding event of the root span, in rank order,
    and the root's attributes; waits for the root's export."""
    root = await _root_span(receiver, root_id)
    found = [
        (
            e.attributes["dask.diagnosis.finding.id"],
            e.attributes["dask.diagnosis.finding.severity"],
            e.attributes["dask.diagnosis.finding.subject"],
        )
        for e in root.events
        if e.name == "dask.diagnosis.finding"
    ]
    assert [f[0] for f in found] == list(root.attributes["dask.diagnosis.findings"])
    return found, root.attributes


@cluster_test(90)
async def test_clean_workflow_has_no_critical_finding(otlp_receiver: OtlpReceiver) -> None:
    """Two 1.5 s sleeps on two single-thread workers: one wave, every thread busy,
    nothing to move. Scheduling a handful of tasks costs milliseconds, far under a
    quarter of 1.5 s even on a loaded machine."""
    async with traced_cluster(_config(otlp_receiver)) as (client, _, _):
        with span("clean") as root_id:
            work = [delayed(step)(1.5, dask_key_name=("clean-work", i)) for i in range(2)]
            assert await client.gather(client.compute(work)) == [1.5, 1.5]
        found, _ = await _findings(otlp_receiver, root_id)
    assert not [f for f in found if f[1] == "critical"], found


@cluster_test(90)
async def test_straggler(otlp_receiver: OtlpReceiver) -> None:
    """Nine 0.05 s tasks and one of 3 s in one group on two threads: the slow one
    holds the workflow about 3 s past its group's typical task (ratio ~60, threshold 3)."""
    async with traced_cluster(_config(otlp_receiver)) as (client, _, _):
        with span("straggling") as root_id:
            work = [
                delayed(step)(3.0 if i == 7 else 0.05, dask_key_name=("load-part", i))
                for i in range(10)
            ]
            await client.gather(client.compute(work))
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:2] == ("straggler", "critical") and found[0][2] == "load-part", found


@cluster_test(120)
async def test_tiny_tasks(otlp_receiver: OtlpReceiver) -> None:
    """2,000 ``inc`` tasks (microseconds each): the scheduler's ~1.7 ms per task
    (3.3 s in all) is the wall time; a loaded machine slows the scheduler too."""
    async with traced_cluster(_config(otlp_receiver)) as (client, _, _):
        with span("tiny") as root_id:
            futures = client.map(inc, range(2000))
            await client.gather(futures)
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:3] == ("tiny-tasks", "critical", "inc"), found


@cluster_test(120)
async def test_data_transfer(otlp_receiver: OtlpReceiver) -> None:
    """Four 64 MiB blobs made on one worker (a memory copy each), then one task on the
    other worker that needs them all: 256 MiB cross the wire before a task that sums
    four lengths."""
    async with traced_cluster(_config(otlp_receiver)) as (client, _, workers):
        a, b = (w.address for w in workers)
        with span("moving") as root_id:
            blobs = [
                client.submit(blob, 64, i, key=("make-blob", i), workers=[a]) for i in range(4)
            ]
            use = client.submit(total_size, *blobs, key="use-blobs", workers=[b])
            assert await use == 4 * 64 << 20
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][0] == "data-transfer" and found[0][2] == "use-blobs", found


@cluster_test(120)
async def test_spilling(otlp_receiver: OtlpReceiver) -> None:
    """One single-thread worker whose spill target is a few MiB: each of eight 64 MiB
    blobs is written to disk as it is stored, and read back by the task that needs
    them all (512 MiB each way, against a memory copy of compute per blob). The blobs
    (group ``spill-blob``) are what filled the memory: the finding names them."""
    config = _config(
        otlp_receiver,
        **_LATE_METRICS,
        **{
            "distributed.worker.memory.target": 0.0005,
            "distributed.worker.memory.spill": False,
            "distributed.worker.memory.pause": False,
            "distributed.worker.memory.terminate": False,
        },
    )
    async with traced_cluster(config, n_workers=1) as (client, _, _):
        with span("spilling") as root_id:
            blobs = [client.submit(blob, 64, i, key=("spill-blob", i)) for i in range(8)]
            assert await client.submit(total_size, *blobs, key="read-blobs") == 8 * 64 << 20
            await client.run(heartbeat)  # the worker's metrics, before the export
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:3] == ("spilling", "critical", "spill-blob"), found


@cluster_test(120)
async def test_gil_contention(otlp_receiver: OtlpReceiver) -> None:
    """Eight tasks of 0.25 s of pure-Python CPU on one worker process with four
    threads: the GIL lets one run at a time, so each thread is off the CPU ~3/4 of its
    time while the four together use about one core (the rule asks 1/4 of one). The
    worker has a process of its own, so that the scheduler's loop does not compete for
    that GIL (it would wait too, and its waits are queueing)."""
    config = _config(otlp_receiver, **_LATE_METRICS)
    async with traced_nanny_cluster(config, n_workers=1, nthreads=4) as (client, _):
        with span("pure-python") as root_id:
            work = [delayed(spin)(0.25, dask_key_name=("spin-py", i)) for i in range(8)]
            await client.gather(client.compute(work))
            await client.run(heartbeat)  # the worker's metrics, before the export
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:3] == ("gil-contention", "critical", "pure-python"), found


@cluster_test(90)
async def test_underutilised(otlp_receiver: OtlpReceiver) -> None:
    """A chain of eight 0.25 s steps, each needing the one before, on four threads:
    one thread works at a time (efficiency ~1/4, threshold 1/2)."""
    async with traced_cluster(_config(otlp_receiver), nthreads=2) as (client, _, _):
        with span("narrow") as root_id:
            x = delayed(step)(0.25, dask_key_name="chain-0")
            for i in range(1, 8):
                x = delayed(step)(0.25, x, dask_key_name=f"chain-{i}")
            assert await client.compute(x) == 0.25
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:3] == ("underutilised", "warning", "narrow"), found


@cluster_test(90)
async def test_client_bound(otlp_receiver: OtlpReceiver) -> None:
    """Two stages of two 0.2 s tasks, the client thinking 2 s between them (the
    workflow kept open by a 4 s linger): the cluster waits for the client most of
    the time."""
    config = _config(otlp_receiver, **{"otel-spans.traces.linger": "4s"})
    async with traced_cluster(config) as (client, _, _):
        with span("chatty") as root_id:
            first = [delayed(step)(0.2, dask_key_name=f"stage_a-{i}") for i in range(2)]
            await client.gather(client.compute(first))
            await asyncio.sleep(2.0)  # the client's own work between two stages
            second = [delayed(step)(0.2, dask_key_name=f"stage_b-{i}") for i in range(2)]
            await client.gather(client.compute(second))
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:3] == ("client-bound", "critical", "stage_b"), found


@cluster_test(90)
async def test_queueing(otlp_receiver: OtlpReceiver) -> None:
    """Twelve independent 0.15 s tasks on one thread: every task but the first waits
    for the thread, which is never idle (efficiency ~1, threshold 0.6)."""
    async with traced_cluster(_config(otlp_receiver), n_workers=1) as (client, _, _):
        with span("crowded") as root_id:
            work = [delayed(step)(0.15, dask_key_name=("queued-step", i)) for i in range(12)]
            await client.gather(client.compute(work))
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:3] == ("queueing", "critical", "crowded"), found


@cluster_test(90)
async def test_short_workflows_are_diagnosed_when_they_erred(otlp_receiver: OtlpReceiver) -> None:
    """``diagnosis.min-duration`` at its default, 1 s: two workflows of two tiny tasks
    (milliseconds, a hundred times under it on a busy machine), one of them with a
    failing task, and a workflow whose one task sleeps 1.2 s. Each root gets its
    sequential time, efficiency and speedup; the quick clean one no critical path,
    finding or diagnosis log record; the failing one is diagnosed whatever its time,
    the sleeping one by its length."""
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint}
    async with traced_cluster(config) as (client, _, _):
        with span("quick") as quick_id:
            assert await client.gather(client.map(inc, [1, 2], key=["q-1", "q-2"])) == [2, 3]
        with span("quick-failing") as failing_id:
            futures = client.map(fail, [3], key=["parse-3"])
            futures += client.map(inc, [1], key=["ok-1"])
            await asyncio.wait([asyncio.ensure_future(f.exception()) for f in futures])  # type: ignore[arg-type]
        with span("long") as long_id:
            assert await client.submit(step, 1.2, key="long-step") == 1.2
        quick = await _root_span(otlp_receiver, quick_id)
        failing, _ = await _findings(otlp_receiver, failing_id)
        _, long = await _findings(otlp_receiver, long_id)

        def diagnosed() -> list[str]:
            return [str(r.body) for r in otlp_receiver.logs() if r.event_name == "dask.diagnosis"]

        # One log exporter, first in first out: the quick root's record, had it one,
        # would arrive before that of the workflow that finished last.
        logs = await await_until(
            lambda: (got := diagnosed()) and any("'long'" in body for body in got) and got,
            30,
            "the long workflow's diagnosis was not logged",
        )
    assert failing[0][:3] == ("erred", "critical", "parse"), failing
    assert list(long["dask.workflow.critical_path.groups"]) == ["long-step"], long
    assert [str(body).split(" ")[1] for body in logs] == ["'quick-failing'", "'long'"], logs
    attributes = quick.attributes
    assert attributes["dask.workflow.sequential_time"] > 0
    assert 0 < attributes["dask.workflow.efficiency"] <= 1
    assert attributes["dask.workflow.speedup"] > 0
    left_out = {
        "dask.workflow.critical_path.groups",
        "dask.workflow.critical_path.length",
        "dask.workflow.bottlenecks",
        "dask.diagnosis.findings",
        "dask.workflow.worker_threads",
    }
    assert left_out.isdisjoint(attributes), sorted(attributes)
    analysed = ("dask.diagnosis", "dask.cluster.nthreads")
    assert [e.name for e in quick.events if e.name.startswith(analysed)] == []


@cluster_test(90)
async def test_erred(otlp_receiver: OtlpReceiver) -> None:
    """Three quick records, one of which raises: a failure is critical whatever time
    it took."""
    async with traced_cluster(_config(otlp_receiver)) as (client, _, _):
        with span("failing") as root_id:
            futures = client.map(fail, [3], key=["parse-3"])
            futures += client.map(inc, [1, 2], key=["ok-1", "ok-2"])
            await asyncio.wait([asyncio.ensure_future(f.exception()) for f in futures])  # type: ignore[arg-type]
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][:3] == ("erred", "critical", "parse"), found


@cluster_test(120)
async def test_recomputation(otlp_receiver: OtlpReceiver) -> None:
    """A 3 s result held by one worker, which then leaves: it runs again on the
    other worker before its consumer can start, doubling the workflow. The client's
    wait for the worker to close is a gap ``client-bound`` claims; 3 s keeps the rerun
    the larger share even when a loaded machine makes that close take a second or two."""
    async with traced_cluster(_config(otlp_receiver)) as (client, _, workers):
        victim = workers[0]
        with span("fragile") as root_id:
            held = client.submit(
                step, 3.0, key=("held-part", 0), workers=[victim.address], allow_other_workers=True
            )
            await held
            await victim.close()  # its result is lost: the scheduler recomputes it
            assert await client.submit(step, 0.01, held, key="after-held") == 0.01
        found, _ = await _findings(otlp_receiver, root_id)
    assert found[0][0] == "recomputation" and found[0][2] == "held-part", found


_MIB = 2**20


@cluster_test(180)
async def test_memory_pressure(otlp_receiver: OtlpReceiver) -> None:
    """Stage ``held`` keeps four results of 4 MiB (group ``keep``: 16 MiB, the most any
    group holds), then stage ``pressing`` allocates 500 MiB inside one task (its result
    a small int) on a worker with a 1 GiB limit that pauses above 40 % of it: the worker
    pauses once, and ``memory-pressure`` names ``keep``, not the group that paused it."""
    config = _config(
        otlp_receiver,
        **{
            "distributed.worker.memory.target": False,
            "distributed.worker.memory.spill": False,
            "distributed.worker.memory.pause": 0.4,
            "distributed.worker.memory.terminate": False,
        },
    )
    async with traced_nanny_cluster(config, n_workers=1, memory_limit=1024 * _MIB) as (
        client,
        _,
    ):
        with span("memory-pressure") as root_id:
            with span("held"):
                kept = [client.submit(blob, 4, i, key=f"keep-{i}") for i in range(4)]
                await wait(kept)
            with span("pressing"):
                size = 500 * _MIB
                assert await client.submit(hold_memory, size, 2.0, key="press-0") == size
        found, _ = await _findings(otlp_receiver, root_id)
        (root,) = [s for s in otlp_receiver.spans() if s.attributes.get("dask.span.id") == root_id]
        del kept
    assert [f[2] for f in found if f[0] == "memory-pressure"] == ["keep"], found
    (event,) = [
        e.attributes
        for e in root.events
        if e.attributes.get("dask.diagnosis.finding.id") == "memory-pressure"
    ]
    # the stage that held them, four results of 4 MiB (each a little more by sizeof)
    assert event["dask.diagnosis.evidence.span"] == "memory-pressure/held"
    assert 16 * _MIB <= event["dask.diagnosis.evidence.group_peak_bytes"] <= 16 * _MIB * 1.01
    assert event["dask.diagnosis.evidence.pauses"] == 1
