"""``benchmarks.per_task`` times what it says: otel-spans' transition hook in each of its
variants, Dask's ``TaskStreamPlugin`` alone in the reference, on the scheduler-bound
shape; the ``floor`` variant follows no task, and leaves the tracker as it found it."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import per_task
from otel_spans.scheduler.tracking import SpanTracker

WORKFLOWS = 2
TASKS = 40


def test_each_variant_times_its_own_hook_on_every_task(otlp_endpoint: str) -> None:
    follow = SpanTracker.transition
    runs = {
        variant: asyncio.run(per_task.run_child(variant, otlp_endpoint, WORKFLOWS, TASKS))
        for variant in per_task.VARIANTS
    }
    assert SpanTracker.transition is follow  # the floor's no-op is gone again
    reference = runs.pop("taskstream")
    # The reference runs without otel-spans and times Dask's plugin alone.
    assert "own" not in reference
    assert reference["taskstream"] > 0
    # Dask calls a plugin at least three times per task (released → waiting →
    # processing → memory, then released or forgotten): each wrapper saw every task.
    assert reference["taskstream_calls"] >= 3 * WORKFLOWS * TASKS
    for variant, run in runs.items():
        assert "taskstream" not in run, variant
        assert run["own"]["loop: per-task hooks"] > 0, variant
        assert run["own_calls"]["loop: per-task hooks"] >= 3 * WORKFLOWS * TASKS, variant
    # Each variant does what its name says: the default mode exports every workflow,
    # the warm-up's too (its span and its task group's, at least); metrics alone
    # export no span and no log record; the floor is not waited for (what it exports
    # in the window depends on when the poll first meets each span).
    assert runs["default"]["settled"] is True
    assert runs["default"]["stats"]["traces"] >= 2 * (per_task.WARMUP + WORKFLOWS)
    assert runs["metrics"]["settled"] is True
    assert runs["metrics"]["stats"] == {"traces": 0, "logs": 0}
    assert runs["floor"]["settled"] is None
    results = {variant: [run] for variant, run in runs.items()} | {"taskstream": [reference]}
    table = per_task.report(results, WORKFLOWS, TASKS)
    assert f"of {WORKFLOWS} workflows of {TASKS} tiny tasks" in table
    for variant in runs:
        assert f"| otel-spans, {variant} |" in table
    assert "| Dask's TaskStreamPlugin in place |" in table
    assert "WARNING" not in table


def test_the_floor_replaces_the_trackers_per_task_work_and_only_while_it_runs() -> None:
    follow = SpanTracker.transition
    with per_task._following_nothing(False):
        assert SpanTracker.transition is follow
    with per_task._following_nothing(True):
        assert SpanTracker.transition is not follow
        # a no-op: it runs on no tracker and no task, and touches nothing
        SpanTracker.transition(None, None, "processing", "memory", {})  # type: ignore[arg-type]
    assert SpanTracker.transition is follow


def test_an_unknown_variant_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        per_task.main(["--variants", "default,metric"])
    assert exited.value.code == 2
    assert "unknown ['metric']" in capsys.readouterr().err
