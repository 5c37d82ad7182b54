"""Faults keep the trace whole: spans task code starts on any run of a task hang under
the task span the scheduler exports.

Worker processes (a Nanny's) with the worker preload, so that task code's spans are
exported by the workers, as in production; a killed worker is a real ``SIGKILL``.
"""

from __future__ import annotations

import os
import signal
from functools import partial
from pathlib import Path

import pytest
from distributed import Event, Scheduler, span

from otel_spans import ids
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import await_until, cluster_test, traced_nanny_cluster
from tests.support.tasks import user_span_rescheduled_once, user_span_then_wait


@pytest.fixture
def fast_worker_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes (which inherit the environment) export their spans 100 ms
    after they end, so a span ended before a kill reaches the receiver first."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")


def config(receiver: OtlpReceiver) -> dict[str, object]:
    return {
        "distributed.worker.preload": ["otel_spans"],
        "otel-spans.endpoint": receiver.grpc_endpoint,
    }


def user_spans(receiver: OtlpReceiver, label: str) -> list[ReceivedSpan]:
    return [
        s
        for s in receiver.spans()
        if s.name == "user/run" and str(s.attributes.get("test.label", "")).startswith(label)
    ]


def both_runs(receiver: OtlpReceiver, label: str) -> list[ReceivedSpan] | None:
    """The user spans of the two runs of a task, once both arrived."""
    found = user_spans(receiver, label)
    return found if len(found) == 2 else None


def task_spans(receiver: OtlpReceiver, key: str) -> list[ReceivedSpan]:
    return [s for s in receiver.spans() if s.attributes.get("dask.task.key") == key]


def whole_trace(receiver: OtlpReceiver, root_uuid: str) -> list[ReceivedSpan] | None:
    """Every span of the workflow rooted at ``root_uuid``, once its root was exported."""
    trace_id = f"{ids.workflow_trace_id(root_uuid):032x}"
    spans = [s for s in receiver.spans() if s.trace_id == trace_id]
    root = f"{ids.dask_span_id(root_uuid):016x}"
    return spans if any(s.span_id == root for s in spans) else None


def assert_every_parent_exported(spans: list[ReceivedSpan]) -> None:
    exported = {s.span_id for s in spans}
    orphans = [
        (s.name, s.parent_span_id)
        for s in spans
        if s.parent_span_id and s.parent_span_id not in exported
    ]
    assert orphans == [], orphans
    # the root Dask span alone has no parent (no caller here)
    assert len([s for s in spans if not s.parent_span_id]) == 1


def ran_on(scheduler: Scheduler, task: ReceivedSpan) -> str:
    """The id of the worker that ran the exported run (a user span's
    ``service.instance.id``): a task span's times are in the scheduler's clock (Dask
    shifts a worker's by its measured offset), so which run a user span belongs to is
    told by its worker, not by its times."""
    return scheduler.workers[task.attributes["dask.worker.address"]].server_id


@cluster_test(120)
async def test_user_spans_of_a_killed_workers_task_and_of_its_rerun_hang_under_one_task_span(
    otlp_receiver: OtlpReceiver, fast_worker_spans: None
) -> None:
    """Catches: workers deriving the task span id from attempt 1 while the scheduler
    exports the rerun under attempt 2 (every user span an orphan); the dead run's span
    left without an exported parent; the rerun not kept (no task span at all) or not
    counted as attempt 2."""
    key = "fragile-1"
    async with traced_nanny_cluster(config(otlp_receiver)) as (client, scheduler):
        with span("fragile") as root:
            future = client.submit(user_span_then_wait, "fragile", "fragile-go", key=key)
            first = await await_until(lambda: user_spans(otlp_receiver, "fragile"), 30)
            victim_pid = first[0].attributes["test.pid"]
            victim = scheduler.tasks[key].processing_on
            assert victim is not None
            os.kill(victim_pid, signal.SIGKILL)
            await await_until(lambda: victim.address not in scheduler.workers, 30)
            await Event("fragile-go", client=client).set()
            rerun_pid = await future
        users = await await_until(lambda: both_runs(otlp_receiver, "fragile"), 30)
        spans = await await_until(lambda: whole_trace(otlp_receiver, root), 30)
        [task] = task_spans(otlp_receiver, key)
        rerun_worker = ran_on(scheduler, task)
    assert rerun_pid != victim_pid
    assert_every_parent_exported(spans)
    assert task.attributes["dask.task.attempt"] == 2
    assert task.attributes["dask.task.sampled_because"] == "recomputed"
    assert task.attributes["dask.worker.address"] != victim.address
    assert {s.parent_span_id for s in users} == {task.span_id}
    assert {s.trace_id for s in users} == {task.trace_id}
    [rerun] = [s for s in users if s.attributes["test.pid"] == rerun_pid]
    assert rerun.resource["service.instance.id"] == rerun_worker


@cluster_test(120)
async def test_user_spans_of_a_rescheduled_task_hang_under_its_exported_task_span(
    otlp_receiver: OtlpReceiver, fast_worker_spans: None, tmp_path: Path
) -> None:
    """Catches: a ``Reschedule`` not counted as a rerun (attempt 1, and the final run's
    span not kept for the first run's children); a span id that differs between the
    run that raised and the one that finished."""
    key = "moved-1"
    marker = str(tmp_path / "rescheduled")
    async with traced_nanny_cluster(config(otlp_receiver)) as (client, scheduler):
        with span("moved") as root:
            await client.submit(user_span_rescheduled_once, "moved", marker, key=key)
        users = await await_until(lambda: both_runs(otlp_receiver, "moved"), 30)
        spans = await await_until(lambda: whole_trace(otlp_receiver, root), 30)
        [task] = task_spans(otlp_receiver, key)
        rerun_worker = ran_on(scheduler, task)
    assert_every_parent_exported(spans)
    assert task.attributes["dask.task.attempt"] == 2
    assert task.attributes["dask.task.sampled_because"] == "recomputed"
    assert sorted(s.attributes["test.label"] for s in users) == ["moved/first", "moved/rerun"]
    assert {s.parent_span_id for s in users} == {task.span_id}
    [rerun] = [s for s in users if s.attributes["test.label"] == "moved/rerun"]
    assert rerun.resource["service.instance.id"] == rerun_worker


@cluster_test(120)
async def test_a_key_released_and_submitted_again_gets_a_task_span_of_its_own(
    otlp_receiver: OtlpReceiver, fast_worker_spans: None
) -> None:
    """The second submission is attempt 1 again, and its user span hangs under its own
    task span, in its own trace. Catches: a released key's earlier run counted as an
    attempt of the new task; the second run's spans pointing at the first's task span."""
    key = "again-1"
    async with traced_nanny_cluster(config(otlp_receiver)) as (client, scheduler):
        roots = []
        for label in ("first", "second"):
            with span(label) as root:
                future = client.submit(user_span_then_wait, label, f"{label}-go", key=key)
                await Event(f"{label}-go", client=client).set()
                await future
            roots.append(root)
            del future
            await await_until(lambda: key not in scheduler.tasks, 30)
        await await_until(lambda: len(user_spans(otlp_receiver, "")) == 2, 30)
        traces = [await await_until(partial(whole_trace, otlp_receiver, r), 30) for r in roots]
        workers = {a: ws.server_id for a, ws in scheduler.workers.items()}
    for label, spans in zip(("first", "second"), traces, strict=True):
        assert_every_parent_exported(spans)
        [task] = [s for s in spans if s.attributes.get("dask.task.key") == key]
        [user] = [s for s in spans if s.name == "user/run"]
        assert user.attributes["test.label"] == label
        assert task.attributes["dask.task.attempt"] == 1
        assert task.attributes["dask.task.sampled_because"] == "children"
        assert user.parent_span_id == task.span_id
        assert (
            user.resource["service.instance.id"] == workers[task.attributes["dask.worker.address"]]
        )
