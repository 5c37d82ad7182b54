"""A bug of ours that repeats switches otel-spans' per-task work off; Dask goes on.

docs/telemetry.md ("Self-protection") documents the budget: ``ERROR_BUDGET`` internal
errors within ``ERROR_WINDOW`` seconds.
"""

from __future__ import annotations

import logging

import pytest
from distributed import span

from otel_spans.error_budget import ERROR_BUDGET
from otel_spans.scheduler.tracking import SpanTracker
from otel_spans.worker import plugin as worker_plugin
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import FAST_METRICS, await_until, cluster_test, stats, traced_cluster
from tests.support.tasks import worker_stats

#: Each task enters two active states (waiting, processing): twice the budget's errors.
TASKS = ERROR_BUDGET


def inc(x: int) -> int:
    return x + 1


def broken(*args: object, **kwargs: object) -> None:
    raise RuntimeError("injected: a tracking step that always fails")


@cluster_test(90)
async def test_repeating_internal_error_disables_per_task_work_once(
    otlp_receiver: OtlpReceiver,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(SpanTracker, "transition", broken)
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint, **FAST_METRICS}
    with caplog.at_level(logging.ERROR, logger="otel_spans"):
        async with traced_cluster(config) as (client, _scheduler, _workers):
            with span("protected"):
                futures = client.map(inc, range(TASKS), key=[f"inc-{i}" for i in range(TASKS)])
                assert await client.gather(futures) == [i + 1 for i in range(TASKS)]
            # ... and later work, after the hooks are off, too.
            assert await client.submit(sum, [1, 2, 3], key="after") == 6
            counters = await stats(client)
            assert counters["hooks_disabled"] == 1
            # Not one error more once the hooks are off.
            assert counters["internal_errors"] == ERROR_BUDGET

            def disabled_metric() -> bool:
                return any(
                    m.name == "otel_spans.hooks.disabled" and m.value == 1
                    for m in otlp_receiver.metrics()
                )

            await await_until(disabled_metric, message="otel_spans.hooks.disabled never 1")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    tripped = [m for m in errors if "stopped following tasks" in m]
    assert len(tripped) == 1, errors
    assert f"{ERROR_BUDGET} internal errors within 60s" in tripped[0]
    # The throttled per-error line: once, the first time (the rest held back).
    assert [m for m in errors if "internal error in transition" in m] == [
        "otel-spans: internal error in transition (ignored)"
    ]


@cluster_test(90)
async def test_repeating_worker_error_stops_wrapping_task_execution_once(
    otlp_receiver: OtlpReceiver,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker plugin's wrapper around ``execute`` has the same budget: each task
    whose context cannot be prepared is one error, and the budget's last one switches
    the wrapper to a pass-through. Wrong code caught: a wrapper that keeps failing (the
    count would be every task, ``ERROR_BUDGET + 10``), or that never stops."""
    monkeypatch.setattr(worker_plugin.task_trace, "task_span_context", broken)
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "distributed.worker.preload": ["otel_spans"],
    }
    n = ERROR_BUDGET + 10
    with caplog.at_level(logging.ERROR, logger="otel_spans"):
        async with traced_cluster(config, n_workers=1) as (client, _scheduler, workers):
            with span("protected"):
                futures = client.map(inc, range(n), key=[f"inc-{i}" for i in range(n)])
                assert await client.gather(futures) == [i + 1 for i in range(n)]
            counters = worker_stats(workers[0])
            assert (counters["internal_errors"], counters["hooks_disabled"]) == (ERROR_BUDGET, 1)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    tripped = [m for m in errors if "stopped wrapping task execution" in m]
    assert len(tripped) == 1, errors
    assert f"{ERROR_BUDGET} internal errors within 60s on worker tasks" in tripped[0]
