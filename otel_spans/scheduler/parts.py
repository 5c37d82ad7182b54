"""Which parts a started copy of the scheduler plugin runs, and how they are wired.

The plugin owns the lifecycle (take over, start, watch, close:
:mod:`otel_spans.scheduler.plugin_lifecycle`) and dispatches hooks
(:mod:`otel_spans.scheduler.plugin`); what it starts depends on the settings: task groups
only when traces or erred-task logs read them, profiles only when logs go somewhere.
Those decisions, and which part hands what to which, are read here in one place rather
than between the plugin's lifecycle steps.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from otel_spans.config import Settings
from otel_spans.scheduler.dask_events import DaskEvents
from otel_spans.scheduler.metrics_tick import SpanMetricsTick
from otel_spans.scheduler.profile_fetch import WorkflowProfiles
from otel_spans.scheduler.slices import Resume
from otel_spans.scheduler.task_groups import TaskGroups
from otel_spans.scheduler.tracking import SpanTracker
from otel_spans.scheduler.worker_memory import WorkerMemory
from otel_spans.telemetry.signals import Signals

if TYPE_CHECKING:
    from distributed import Scheduler

logger = logging.getLogger("otel_spans")


class Parts(NamedTuple):
    """What a started copy runs on the event loop, besides its periodic callbacks."""

    tracker: SpanTracker
    metrics: SpanMetricsTick
    #: None unless ``otel-spans.profile`` is on and logs go somewhere.
    profiles: WorkflowProfiles | None
    dask_events: DaskEvents
    #: Worker pauses, losses and memory (scheduler/worker_memory.py).
    worker_memory: WorkerMemory


def build_parts(
    scheduler: Scheduler,
    settings: Settings,
    signals: Signals,
    *,
    resume_poll: Resume,
    resume_metrics: Resume,
    inherited: list[SpanTracker],
) -> Parts:
    """Build every part for ``settings``; the tracker goes on from the ``inherited``
    trackers of copies this one took over (each cleared, and the list emptied)."""
    task_groups = None
    erred_logs = settings.logs.erred_tasks and settings.logs.target.enabled
    if signals.traces_enabled or erred_logs:
        # Without traces and erred-task logs nothing would read the task groups.
        task_groups = TaskGroups(
            scheduler,
            submit=signals.submit_span,
            log=signals.submit_log if erred_logs else None,
            max_error_stories=settings.traces.max_error_stories,
            max_length=settings.max_attribute_length,
            exception_messages=settings.capture.exceptions == "message",
            exemplar=lambda span, prefix, seconds, span_id: signals.task_exemplar(
                span.tags, span.labels, prefix, seconds, span.trace_id, span_id
            ),
        )
    profiles = None
    if settings.profile.enabled:
        if settings.logs.target.enabled:
            profiles = WorkflowProfiles(scheduler, settings.profile, signals)
        else:
            logger.warning("otel-spans: profile is on but logs go nowhere: no profiles")
    tracker = SpanTracker(scheduler, settings, signals, task_groups, resume_poll, profiles)
    for old in inherited:  # what earlier copies exported is not exported again
        tracker.inherit(old)
        old.clear()
    inherited.clear()
    worker_memory = WorkerMemory(
        scheduler,
        lambda uuid: tracker.track_uuid(uuid, reopen=False),
        signals.submit_log if settings.logs.target.enabled else None,
        settings.max_attribute_length,
    )
    metrics = SpanMetricsTick(scheduler, settings, signals, tracker, resume_metrics, worker_memory)
    dask_events = DaskEvents(scheduler, settings, signals.submit_log, tracker.identity, task_groups)
    return Parts(tracker, metrics, profiles, dask_events, worker_memory)
