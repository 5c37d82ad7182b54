"""Span tracking: which Dask spans exist, which are done, and when each is exported.

On the scheduler's event loop (driven by :mod:`otel_spans.scheduler.plugin`):

* :meth:`SpanTracker.transition` follows a task's transition (its span changed, maybe
  reopened; its result's bytes held or freed); :meth:`SpanTracker.task_finished`
  counts tasks reaching a final state and their output bytes per span and prefix, and
  hands the run to the task groups;
* the trace poll (``traces.poll-interval``, :meth:`SpanTracker.poll`) discovers new
  Dask spans and checks the *open* ones (not yet exported, or reopened) for being
  done. A span that stayed done for ``traces.linger`` is exported: the tracker
  freezes what it knows into an :class:`~otel_spans.scheduler.span_records.ExportSnapshot`
  (:mod:`otel_spans.scheduler.export_inputs`),
  :mod:`otel_spans.scheduler.span_records` builds the record from it, and
  :mod:`otel_spans.scheduler.span_export` hands the record, with everything exported
  alongside, to the exporter threads; cost per poll O(spans that had transitions × their
  task groups), never O(history), in time slices (:mod:`otel_spans.scheduler.slices`).

A Dask span can become not-done after it was exported (a new sub-span, or a worker
died holding its only results). Its later work is exported as a *continuation*: a new
OTel span, child of the first export, linked to the previous export, with its own id
(:func:`otel_spans.ids.continuation_span_id`). No two exports ever share a span id.
"""

from __future__ import annotations

import time as _time
from collections.abc import Hashable
from itertools import islice
from typing import TYPE_CHECKING, Any

from distributed.metrics import time

from otel_spans.config import Settings
from otel_spans.names import LABEL_LENGTH
from otel_spans.scheduler import export_inputs, snapshots
from otel_spans.scheduler.callers import CallerContexts
from otel_spans.scheduler.done_check import is_done
from otel_spans.scheduler.erred_tasks import exception_type
from otel_spans.scheduler.memory import held_changed
from otel_spans.scheduler.profile_fetch import WorkflowProfiles
from otel_spans.scheduler.slices import LOOP_BUDGET, Resume
from otel_spans.scheduler.span_export import SpanExporter
from otel_spans.scheduler.span_state import (
    KnownSpans,
    ReleasedSpans,
    SpanIdentity,
    TrackedSpan,
    finished_key,
)
from otel_spans.scheduler.task_groups import TaskGroups
from otel_spans.scheduler.task_runs import compute_seconds
from otel_spans.scheduler.task_states import ACTIVE_STATES, FINAL_STATES, RUN_ENDED_STATES
from otel_spans.telemetry.signals import Signals

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import TaskState
    from distributed.spans import Span, SpansSchedulerExtension


class SpanTracker:
    """The lifecycle of every Dask span on one scheduler, from discovery to export."""

    def __init__(
        self,
        scheduler: Scheduler,
        settings: Settings,
        signals: Signals,
        task_groups: TaskGroups | None,
        resume_poll: Resume,
        profiles: WorkflowProfiles | None = None,
    ):
        self._scheduler = scheduler
        self._settings = settings
        self._signals = signals
        self.task_groups = task_groups
        self._resume_poll = resume_poll
        #: Dask span uuid -> what is remembered of it, until its tree's last export
        #: settled (then in ``released``, bounded): O(running work), not O(history).
        self.tracks: dict[str, TrackedSpan] = {}
        #: Settled spans, so that late work in one is a continuation (bounded LRU).
        self.released = ReleasedSpans(self._evicted)
        #: Spans not exported yet, or reopened since.
        self.open: dict[str, Span] = {}
        #: Spans whose metrics are still read (open, or not settled yet).
        self.live: dict[str, Span] = {}
        #: Tracked or released: the spans whose ids are settled (a view of both).
        self.known = KnownSpans(self.tracks, self.released)
        self.callers = CallerContexts(self.known, self._trace_of, self._keep_task)
        #: Does each export; fetches the hot code of finished workflows with
        #: ``profiles`` (``otel-spans.profile``).
        self.exporter = SpanExporter(
            scheduler, settings, signals, self.callers, self.known, profiles
        )
        #: Spans with new work after their last export, and since when.
        self._reopened: dict[str, float] = {}
        #: Spans with task transitions since the last poll: only these (and their
        #: ancestors) can have changed their done-ness.
        self._changed: set[str] = set()
        #: Open spans seen done, waiting out the linger: uuid -> its track (done since
        #: ``done_since``), in that order (a span done again goes to the end), so that
        #: a poll reads only the spans whose linger ended, not every span still waiting.
        self._lingering: dict[str, TrackedSpan] = {}
        #: How many of the extension's spans (an insertion-ordered dict) were discovered.
        self._discovered = 0
        #: The spans the last poll had no time for, in order.
        self._deferred: list[str] = []

    def _trace_of(self, uuid: str) -> int | None:
        track = self.track_uuid(uuid, reopen=False)
        return track.trace_id if track is not None else None

    def _keep_task(self, key: Hashable) -> None:
        if self.task_groups is not None:
            self.task_groups.keep_as_parent(key)

    def identity(self, uuid: str) -> SpanIdentity | None:
        track = self.known.get(uuid)
        return track.identity if track is not None else None

    def stats(self) -> dict[str, int]:
        return {
            "open_spans": len(self.open),
            "live_spans": len(self.live),
            "tracked_spans": len(self.tracks),
            "released_spans": len(self.released),
            "released_evicted": self.released.evicted,
            "late_after_eviction": self.released.late,
            "callers_evicted": self.callers.evicted,
        }

    # -- release ----------------------------------------------------------------------------
    def release_settled(self, span: Span) -> None:
        """``span``'s last export settled (the metrics tick read it a last time).

        A root takes its tree with it; a sub-span settled before its root stays tracked
        until then, since the root's export counts its tree's tasks.
        """
        uuid = span.id
        if uuid in self.open or (uuid not in self.tracks and uuid not in self.released):
            return
        parent = span.parent
        if parent is not None and snapshots.root_of(parent).id in self.tracks:
            return
        for node in snapshots.tree_spans(span):
            if node.id not in self.live and node.id not in self.open:
                track = self.tracks.pop(node.id, None)
                if track is not None:
                    self.released.put(node.id, track)

    def _evicted(self, uuid: str, track: TrackedSpan) -> None:
        """A released span left the bounded cache: forget the rest of it."""
        self.callers.forget(uuid)
        if self.task_groups is not None:
            ext = self.extension()
            span = ext.spans.get(uuid) if ext is not None else None
            trace = track.trace_id if track.is_root else None
            self.task_groups.forget_span(uuid, span.groups if span is not None else (), trace)

    def _known(self, uuid: str) -> TrackedSpan | None:
        """The track of ``uuid``, tracked again if it was released."""
        track = self.tracks.get(uuid)
        if track is None:
            track = self.released.take(uuid)
            if track is not None:
                self.tracks[uuid] = track
        return track

    def inherit(self, old: SpanTracker) -> None:
        """Go on where ``old``, the tracker of a copy closed to make way for this one,
        stopped: its final poll exported every span it knew, so none is exported again
        by this copy, and new work in one of them goes out as a continuation."""
        self.tracks.update(old.tracks)  # in place: the callers hold this dict
        for track in self.tracks.values():
            track.forget_series()  # the old copy's histogram: this one has its own
        self.released.update(old.released)
        self._discovered = max(self._discovered, old._discovered)
        self.callers.inherit(old.callers)
        self.exporter.finished_roots.extend(old.exporter.finished_roots)

    def clear(self) -> None:
        """Forget every span (after close: see ``Signals._release_metrics`` for why)."""
        for state in (
            self.tracks,
            self.open,
            self.live,
            self._reopened,
            self._changed,
            self._lingering,
            self._deferred,
            self.exporter.finished_roots,
            self.released,
        ):
            state.clear()
        self.callers.clear()
        self.task_groups = None

    # -- discovery ------------------------------------------------------------------------
    def extension(self) -> SpansSchedulerExtension | None:
        return self._scheduler.extensions.get("spans")

    def track_uuid(self, uuid: str, *, reopen: bool = True) -> TrackedSpan | None:
        """The tracked span of ``uuid``, tracked now if it is new (seen in a transition
        before any poll). A released span is tracked again only for new work
        (``reopen``): a task of it released later changes nothing."""
        track = self.tracks.get(uuid)  # nearly always: the span is tracked
        if track is not None:
            return track
        track = self._known(uuid) if reopen else self.released.get(uuid)
        if track is not None:
            return track
        ext = self.extension()
        span = ext.spans.get(uuid) if ext is not None else None
        if span is None:
            return None
        undiscovered = len(ext.spans) - self._discovered  # type: ignore[union-attr]
        if undiscovered <= 0 or uuid not in islice(reversed(ext.spans), undiscovered):  # type: ignore[union-attr]
            self.released.late += reopen  # discovered, released and evicted since
            return None
        return self._track(span, known=False)

    def _track(self, span: Span, *, known: bool = True) -> TrackedSpan:
        """``span``'s track, made if new (``known``: it may be tracked or released)."""
        track = self._known(span.id) if known else None
        if track is None:
            root = snapshots.root_of(span)
            track = export_inputs.track_of(span, root, self._settings, self.callers)
            track.computation = snapshots.first_computation(self._scheduler, span)
            self.tracks[span.id] = track
            self.open[span.id] = self.live[span.id] = span
            if track.is_root:
                self.exporter.started(span, track)
        return track

    # -- transitions (hot path) -------------------------------------------------------------
    def transition(self, ts: TaskState, start: str, finish: str, kwargs: dict[str, Any]) -> None:
        """A followed transition of ``ts`` (see :data:`WATCHED_STATES`).

        One call per transition, its steps written out: every task passes here three or
        four times, and in place a Python call costs several times its tight-loop figure.
        """
        uuid = ts.group.span_id
        if not uuid:
            return
        active = finish in ACTIVE_STATES
        track = self.tracks.get(uuid)  # nearly always: the span is tracked
        if track is None:
            track = self.track_uuid(uuid, reopen=active)
            if track is None:
                return
        # A result entering or leaving memory changes its span's held bytes.
        if finish == "memory" or start == "memory":
            memory = track.memory
            if memory.root is None:
                self._find_root(track)
            nbytes = ts.nbytes if ts.nbytes > 0 else 0
            held_changed(memory, ts.group.name, nbytes if finish == "memory" else -nbytes)
        # Only spans with transitions since the last poll can have changed done-ness.
        self._changed.add(uuid)
        if active:
            if track.exports and uuid not in self._reopened:
                self._reopened[uuid] = time()  # new work after an export: reopened
            return
        if finish == "released":
            if start in RUN_ENDED_STATES and self.task_groups is not None:
                self.task_groups.abandoned(ts.key)  # a next run is a rerun
            return
        if finish not in FINAL_STATES or (finish == "memory" and start != "processing"):
            return
        compute = compute_seconds(kwargs.get("startstops"))
        self.task_finished(ts, start, finish, kwargs, track, compute)

    def task_finished(
        self,
        ts: TaskState,
        start: str,
        finish: str,
        kwargs: dict[str, Any],
        track: TrackedSpan,
        compute: float,
    ) -> None:
        """A task of ``track`` reached memory (having computed) or erred."""
        identity: SpanIdentity = track  # what its task groups and runs keep of it
        task_span_id = 0
        if self.task_groups is not None:
            task_span_id = self.task_groups.task_finished(
                ts, start, finish, kwargs, identity, compute
            )
        prefix = ts.group.prefix.name
        counter = finished_key(prefix, finish)
        track.finished[counter] = track.finished.get(counter, 0) + 1
        if finish == "memory":
            track.output[prefix] = track.output.get(prefix, 0) + (kwargs.get("nbytes") or 0)
        if not kwargs.get("startstops"):
            return
        # The compute time into the duration histogram (a task that raised too, under
        # its error.type); an exemplar when the task has a span.
        if finish == "memory":
            series = track.series_of(prefix)
            if series is None:
                series = self._signals.task_series(identity.tags, identity.labels, prefix)
                track.keep_series(prefix, series)
            self._signals.task_durations.record_in(series, compute, identity.trace_id, task_span_id)
        elif start == "processing":
            self._signals.record_task_duration(
                identity.tags,
                identity.labels,
                prefix,
                compute,
                identity.trace_id,
                task_span_id,
                exception_type(kwargs, LABEL_LENGTH),
            )

    def _find_root(self, track: TrackedSpan) -> None:
        """Point ``track``'s memory ledger at its root's, once per span (O(depth)): the
        root's ledger sums its tree's held bytes."""
        memory = track.memory
        if track.is_root:
            memory.root = memory
            return
        ext = self.extension()
        span = ext.spans.get(track.uuid) if ext is not None else None
        root = self.track_uuid(snapshots.root_of(span).id, reopen=False) if span else None
        memory.root = root.memory if root is not None else None

    # -- the trace poll -------------------------------------------------------------------
    def poll(self, final: bool) -> None:
        ext = self.extension()
        if ext is None:
            return
        now = time()
        deadline = _time.perf_counter() + LOOP_BUDGET
        if len(ext.spans) > self._discovered:
            for index, span in enumerate(islice(ext.spans.values(), self._discovered, None)):
                if index and not final and _time.perf_counter() > deadline:
                    # Thousands of new spans at once: the rest in a moment. Done-ness
                    # waits until every span is known, since a child not yet tracked
                    # would count as exported.
                    self._resume_poll.soon()
                    return
                self._discovered += 1
                self._track(span)  # or tracked at its first task already
                self._changed.add(span.id)
                self._reopen_ancestors(span, span.enqueued)

        reopened, self._reopened = self._reopened, {}
        for uuid, when in reopened.items():
            reopened_span = ext.spans.get(uuid)
            if reopened_span is not None:
                self._reopen(reopened_span, when)
                self._reopen_ancestors(reopened_span, when)

        # Done-ness only changes through task transitions of a span's tree: re-check
        # the spans that had some, and their ancestors, not every open span.
        dirty, self._changed = self._changed, set()
        changed: set[str] = set()
        for uuid in dirty:
            node = self.open.get(uuid) or ext.spans.get(uuid)
            while node is not None and node.id not in changed:
                changed.add(node.id)
                node = node.parent
        if final:  # shutdown looks at every open span once more
            changed |= set(self.open)
        linger = self._settings.traces.linger
        if final:
            candidates = changed.union(self._lingering)
        else:
            candidates = set(changed)
            for uuid, lingering in self._lingering.items():
                since = lingering.done_since
                if since is not None and now - since < linger:
                    break  # the rest came later (a clock stepped back: by the step)
                candidates.add(uuid)
        done: dict[str, bool] = {}

        # What the last poll had no time for goes first, so that every span gets its
        # turn however many others keep changing.
        pending = [s for s in self._deferred if s in candidates]
        pending += candidates.difference(pending)
        self._deferred = []
        roots: list[tuple[Span, TrackedSpan]] = []
        for index, uuid in enumerate(pending):
            if index and not final and _time.perf_counter() > deadline:
                # Out of budget: the rest is looked at again in a moment.
                self._changed.update(s for s in pending[index:] if s in changed)
                self._deferred = pending[index:]
                self._resume_poll.soon()
                break
            open_span = self.open.get(uuid)
            if open_span is None:
                continue
            track = self.tracks[uuid]
            if uuid in changed:
                if is_done(open_span, changed, done, self.open, self.tracks):
                    if track.done_since is None:
                        track.done_since = now
                        self._lingering[uuid] = track
                else:
                    track.done_since = None
                    self._lingering.pop(uuid, None)
            if track.done_since is not None and (final or now - track.done_since >= linger):
                if track.is_root and open_span.children:
                    roots.append((open_span, track))
                else:
                    self._export(open_span, track, done=True)
            elif final:
                self._export(open_span, track, done=False)
        # A root's analysis reads when its tree's groups were submitted, which its
        # sub-spans' exports remember: exported after theirs, it need not look again.
        # Within the budget too, at least one per poll; the rest first in a moment.
        for index, (open_span, track) in enumerate(roots):
            if index and not final and _time.perf_counter() > deadline:
                self._deferred[:0] = [span.id for span, _ in roots[index:]]
                self._resume_poll.soon()
                break
            self._export(open_span, track, done=True)

    def _reopen(self, span: Span, when: float) -> None:
        track = self._known(span.id)
        if track is None or not track.exports:
            return
        if track.reopened_at is None:
            track.reopened_at = max(when, track.last_end)
        track.exported_at = None
        self.open[span.id] = span
        self.live[span.id] = span

    def _reopen_ancestors(self, span: Span, when: float) -> None:
        node = span.parent
        while node is not None:
            self._reopen(node, when)
            node = node.parent

    # -- export ---------------------------------------------------------------------------
    def _export(self, span: Span, track: TrackedSpan, *, done: bool) -> None:
        record, end = self.exporter.export(span, track, self.task_groups, done=done)
        track.exports += 1
        track.last_span_id = record.span_id
        track.last_end = end
        track.reopened_at = None
        track.done_since = None
        track.exported_at = time() if done else None
        self.open.pop(span.id, None)
        self._lingering.pop(span.id, None)
        # The CPU made available stops growing once the span is done: hand over its
        # final growth now rather than re-reading it on every metrics tick.
        self._signals.submit_deltas(
            snapshots.cpu_delta(track.tags, track.reported, record.active_cpu_seconds)
        )
