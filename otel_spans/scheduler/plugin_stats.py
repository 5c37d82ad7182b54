"""The counters a copy of the plugin serves as the ``otel_spans_stats`` handler.

One dict from every part that keeps counters: the tracker (spans), the task groups
(the DAG state), the profile fetches and the pipelines. Assembled here so that the
plugin's modules hold its lifecycle and hook dispatch alone; the keys are what
``stats()`` callers, the tests and the soak read, so none is renamed here.
"""

from __future__ import annotations

from typing import Any

from otel_spans.scheduler.profile_fetch import WorkflowProfiles
from otel_spans.scheduler.tracking import SpanTracker
from otel_spans.telemetry.signals import Signals


def plugin_stats(
    tracker: SpanTracker | None,
    profiles: WorkflowProfiles | None,
    signals: Signals | None,
    *,
    internal_errors: int,
    hooks_disabled: int,
) -> dict[str, Any]:
    """Every counter of one copy; ``signals`` are its pipelines, running or closed
    (their final counters stay readable), None when it never started them."""
    out: dict[str, Any] = (
        tracker.stats()
        if tracker
        else dict.fromkeys(("open_spans", "live_spans", "tracked_spans"), 0)
    )
    if tracker is not None:
        # not exported because the caller's trace is not sampled (parent-based)
        groups = tracker.task_groups
        out["unsampled_spans"] = tracker.exporter.unsampled + (groups.unsampled if groups else 0)
    if tracker is not None and tracker.task_groups is not None:
        out["dag"] = tracker.task_groups.stats()
    if profiles is not None:
        out["profiles"] = profiles.stats()
    if signals is not None:
        out.update(signals.stats())  # internal errors of the loop and the exporters
    else:
        out["internal_errors"] = internal_errors
        out["hooks_disabled"] = hooks_disabled
    return out
