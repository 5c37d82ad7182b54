"""One export of a Dask span: its record built, and everything handed on with it.

:class:`~otel_spans.scheduler.tracking.SpanTracker` decides *when* a span is exported
(done for ``traces.linger``, or at shutdown) and keeps the lifecycle's state;
:class:`SpanExporter` does the export: the record from the tracker's snapshot
(:mod:`otel_spans.scheduler.export_inputs`, :mod:`otel_spans.scheduler.span_records`),
the span to the traces pipeline unless its caller's trace is not sampled, its task
groups, its exemplars' samples and, for a finished workflow, its diagnosis log and
its profiles. It also announces a workflow when it starts. On the scheduler's event
loop, once per export (never per task).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

from distributed.metrics import time

from otel_spans import ids
from otel_spans.config import Settings, format_trace_url
from otel_spans.records import SpanRecord
from otel_spans.scheduler import export_inputs, snapshots, span_records
from otel_spans.scheduler.callers import CallerContexts
from otel_spans.scheduler.memory import SpanMemory, group_footprint
from otel_spans.scheduler.profile_fetch import WorkflowProfiles
from otel_spans.scheduler.span_state import (
    MAX_FINISHED_ROOTS,
    FinishedRoot,
    KnownSpans,
    SpanIdentity,
    TrackedSpan,
)
from otel_spans.scheduler.task_groups import TaskGroups
from otel_spans.telemetry.signals import Signals

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.spans import Span


logger = logging.getLogger("otel_spans")


class SpanExporter:
    """Exports the Dask spans of one scheduler, each when its tracker says so."""

    def __init__(
        self,
        scheduler: Scheduler,
        settings: Settings,
        signals: Signals,
        callers: CallerContexts,
        known: KnownSpans,
        profiles: WorkflowProfiles | None = None,
    ):
        self._scheduler = scheduler
        self._settings = settings
        self._signals = signals
        self._callers = callers
        #: The tracker's tracked and released spans (a view of the objects the
        #: tracker changes in place): a root's export reads its tree's counts there.
        self._known = known
        #: Fetches the hot code of finished workflows (``otel-spans.profile``).
        self.profiles = profiles
        #: Dask spans not exported because their caller's trace is not sampled.
        self.unsampled = 0
        #: The last finished workflows (root exports that were done), newest last.
        self.finished_roots: deque[FinishedRoot] = deque(maxlen=MAX_FINISHED_ROOTS)
        #: Whether logs go anywhere (read once: every workflow's start asks).
        self._logs_enabled = settings.logs.target.enabled

    def started(self, root: Span, identity: SpanIdentity) -> None:
        """A workflow starts: its trace id leaves at once (a log record, and the link
        in the scheduler's log), hours before its root span is exported."""
        template = self._settings.trace_url
        url = None
        if template is not None:
            url = format_trace_url(template, identity.trace_id, identity.otel_span_id)
            logger.info("otel-spans: workflow %r started: %s", "/".join(identity.tags), url)
        if self._logs_enabled:
            self._signals.submit_log(span_records.started_log(root, identity, url))

    def export(
        self, span: Span, track: TrackedSpan, task_groups: TaskGroups | None, *, done: bool
    ) -> tuple[SpanRecord, float]:
        """Export ``span`` now (with its ``task_groups``' groups); the record and when
        this export ends."""
        signals = self._signals
        # The computations that fed the span, read once for its computation events
        # and its groups' submission times, on the export that carries both.
        fed = None
        if signals.traces_enabled and not track.exports:
            fed = snapshots.fed_by(self._scheduler, span.groups, track.computation)
        track.computation = None  # read by the first export alone
        record, run_totals, end = span_records.span_record(
            span,
            export_inputs.export_snapshot(
                span,
                track,
                self._settings,
                self._callers,
                done=done,
                traces_enabled=signals.traces_enabled,
                span_id_of=self._span_id_of,
            ),
            scheduler=self._scheduler,
            settings=self._settings,
            full=signals.traces_enabled,
            finished_of=self._finished_of,
            group_bounds=task_groups.bounds if task_groups is not None else None,
            tally_of=task_groups.tally if task_groups is not None else None,
            # read by a finished root's analysis alone
            submitted_of=task_groups.submitted_in(span)
            if task_groups is not None and done and track.is_root
            else None,
            memory_of=self._memory_of,
            fed=fed,
        )
        track.run_exported.update(run_totals)
        track.memory.lost_events = ()
        sampled = track.sampled
        if sampled:
            signals.submit_span(record)
        else:  # parent-based sampling: the caller's trace is not sampled
            self.unsampled += 1
        if task_groups is not None:
            own, ledger, now = span._cumulative_worker_metrics, track.memory, time()
            task_groups.export_groups(
                list(span.groups),
                track,
                span.enqueued,
                lambda tg: group_footprint(ledger, tg.name, tg.prefix.name, own, now),
                fed,
            )
        # Exemplars point at this span only when it is exported.
        signals.record_samples(span_records.export_samples(record, track, sampled=sampled))
        if done and track.is_root:
            self.finished_roots.append(FinishedRoot.of(record, track, sampled=sampled))
            if record.analysis is not None and record.analysis.diagnosed:
                signals.submit_log(span_records.diagnosis_log_of(record))
            if sampled and self.profiles is not None:
                self.profiles.workflow_finished(
                    span, track.trace_id, record.span_id, record.start_ns / 1e9, record.end_ns / 1e9
                )
        return record, end

    def _span_id_of(self, uuid: str) -> int:
        """The OTel span id of the first export of the Dask span ``uuid``: its track's
        (a parent is tracked or released while its children export), else hashed."""
        track = self._known.get(uuid)
        return track.otel_span_id if track is not None else ids.dask_span_id(uuid)

    def _finished_of(self, uuid: str) -> dict[tuple[str, str], int] | None:
        track = self._known.get(uuid)
        return track.finished if track is not None else None

    def _memory_of(self, uuid: str) -> SpanMemory | None:
        """The memory ledger of a tracked (or released) span, for a root's diagnosis."""
        track = self._known.get(uuid)
        return track.memory if track is not None else None
