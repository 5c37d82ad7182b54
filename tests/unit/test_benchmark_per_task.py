"""``benchmarks.per_task`` times what it says: otel-spans' transition hook in its
variant, Dask's ``TaskStreamPlugin`` alone in the other, on the scheduler-bound shape."""

from __future__ import annotations

import asyncio

from benchmarks import per_task

WORKFLOWS = 2
TASKS = 40


def test_each_variant_times_its_own_hook_on_every_task(otlp_endpoint: str) -> None:
    ours = asyncio.run(per_task.run_child("default", otlp_endpoint, WORKFLOWS, TASKS))
    reference = asyncio.run(per_task.run_child("taskstream", otlp_endpoint, WORKFLOWS, TASKS))
    # otel-spans' variant times its hooks and exports every workflow; the reference
    # runs without otel-spans and times Dask's plugin alone.
    assert ours["own"]["loop: per-task hooks"] > 0
    assert ours["settled"]
    assert "taskstream" not in ours
    assert "own" not in reference
    assert reference["taskstream"] > 0
    # Dask calls a plugin at least three times per task (released → waiting →
    # processing → memory, then released or forgotten): each wrapper saw every task.
    assert ours["own_calls"]["loop: per-task hooks"] >= 3 * WORKFLOWS * TASKS
    assert reference["taskstream_calls"] >= 3 * WORKFLOWS * TASKS
    table = per_task.report({"default": [ours], "taskstream": [reference]}, WORKFLOWS, TASKS)
    assert f"of {WORKFLOWS} workflows of {TASKS} tiny tasks" in table
    assert "| Dask's TaskStreamPlugin in place |" in table
