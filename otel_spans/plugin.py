"""The scheduler plugin: the only module that reads distributed's internals.

Hooks run on the scheduler's event loop, so they do O(1) work and never raise:

* ``transition`` notices a task of an already exported Dask span starting again (a
  recomputation, or new work landing in a live task group) and marks the span reopened;
* a periodic callback (``traces.poll-interval``) discovers new Dask spans and checks the
  *open* ones (not yet exported, or reopened) for ``Span.done``. A span that stayed
  done for ``traces.linger`` is snapshotted into a :class:`SpanRecord` and handed to the
  exporter thread. The cost per poll is O(open spans × their task groups), never
  O(history).

A Dask span can become not-done after it was exported (a new sub-span, or a worker
died holding its only results). Its later work is exported as a *continuation*: a new
OTel span, child of the first export, linked to the previous export, with its own id
``ids.dask_span_id(uuid, n)``. No two exports ever share a span id.
"""

from __future__ import annotations

import asyncio
import logging
import time as _time
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, ClassVar

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.metrics import time
from tornado.ioloop import PeriodicCallback

from otel_spans import config, ids
from otel_spans.config import Settings
from otel_spans.records import CodeSnippet, SpanRecord, ns
from otel_spans.signals import Signals

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.spans import Span, SpansSchedulerExtension

logger = logging.getLogger("otel_spans")

#: A task entering one of these states means its span has work to do again.
_ACTIVE_STATES = frozenset({"waiting", "queued", "processing", "no-worker"})
#: Final states counted per span and prefix as tasks reach them. Dask's own per-group
#: state counts forget an erred task as soon as the client releases it; these do not.
_FINAL_STATES = frozenset({"memory", "erred"})
#: States reported as a snapshot for spans exported unfinished (at shutdown).
_PENDING_STATES = ("processing", "waiting", "queued", "no-worker")
#: At most one "internal error" log line per this many seconds.
_ERROR_LOG_EVERY = 60.0


@dataclass(slots=True)
class _Track:
    """What the plugin remembers of one Dask span (one small object per span)."""

    #: How many times the span was exported so far.
    exports: int = 0
    #: OTel span id of the latest export.
    last_span_id: int = 0
    #: When the latest export ended (epoch seconds).
    last_end: float = 0.0
    #: When new work arrived after the latest export; None while not reopened.
    reopened_at: float | None = None
    #: When the poll first saw the span done; None while not done.
    done_since: float | None = None


class OtelSpansPlugin(SchedulerPlugin):
    """Export the scheduler's Dask spans as OpenTelemetry signals.

    Parameters
    ----------
    **overrides
        ``otel-spans`` configuration keys (``endpoint="http://collector:4317"``,
        ``traces={"linger": "1s"}``); they win over the scheduler's dask.config. Use
        them with ``client.register_plugin(OtelSpansPlugin(...))`` on a running cluster.
    settings
        Fully resolved settings (used by the preload); overrides are then ignored.
    """

    name: ClassVar[str] = "otel-spans"

    def __init__(self, settings: Settings | None = None, **overrides: Any):
        # Catch typos on the client, before the plugin travels to the scheduler.
        config.check_keys(overrides)
        self._overrides = overrides
        self._given_settings = settings
        self.settings: Settings | None = None
        self.signals: Signals | None = None
        self._scheduler: Scheduler | None = None
        self._pc: PeriodicCallback | None = None
        self._tracks: dict[str, _Track] = {}
        self._open: dict[str, Span] = {}
        self._reopened: dict[str, float] = {}
        #: Dask span id -> (prefix, final state) -> tasks that reached it.
        self._finished: dict[str, dict[tuple[str, str], int]] = {}
        self._seen = 0
        self._internal_errors = 0
        self._last_error_log = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {"_overrides": self._overrides, "_given_settings": self._given_settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_given_settings"], **state["_overrides"])  # type: ignore[misc]

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self, scheduler: Scheduler) -> None:
        if self._scheduler is not None:
            return
        settings = self._given_settings or Settings.from_config(self._overrides)
        self.settings = settings
        self._scheduler = scheduler
        if not settings.enabled:
            logger.info("otel-spans: disabled by configuration")
            return
        self.signals = Signals(
            settings,
            role="scheduler",
            instance_id=scheduler.id,
            scheduler_address=scheduler.address,
        )
        scheduler.handlers["otel_spans_stats"] = self.stats
        self._pc = PeriodicCallback(self._poll_safely, settings.traces.poll_interval * 1000)
        self._pc.start()
        logger.info("otel-spans: %s", self.signals.describe())

    async def close(self) -> None:
        if self._pc is not None:
            self._pc.stop()
            self._pc = None
        if self.signals is None:
            return
        self._poll_safely(final=True)
        signals, self.signals = self.signals, None
        assert self.settings is not None
        timeout = self.settings.shutdown_timeout
        # close() blocks on the exporter threads; keep it off the event loop, and never
        # wait longer than the deadline plus a margin, whatever the exporters do.
        try:
            await asyncio.wait_for(asyncio.to_thread(signals.close, timeout), timeout + 1.0)
        except asyncio.TimeoutError:
            logger.warning("otel-spans: exporters did not stop within %.1fs", timeout)

    def stats(self) -> dict[str, Any]:
        """Pipeline counters; also served as the ``otel_spans_stats`` scheduler handler."""
        out: dict[str, Any] = {
            "internal_errors": self._internal_errors,
            "open_spans": len(self._open),
            "tracked_spans": len(self._tracks),
        }
        if self.signals is not None:
            out.update(self.signals.stats())
        return out

    # -- hooks (event loop) -------------------------------------------------------------
    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        active = finish in _ACTIVE_STATES
        if not active and finish not in _FINAL_STATES:
            return
        try:
            assert self._scheduler is not None
            ts = self._scheduler.tasks.get(key)
            if ts is None or ts.group is None:
                return
            span_id = ts.group.span_id
            if not span_id:
                return
            if active:
                track = self._tracks.get(span_id)
                if track is not None and track.exports and span_id not in self._reopened:
                    self._reopened[span_id] = time()
            elif finish == "erred" or start == "processing":
                counts = self._finished.get(span_id)
                if counts is None:
                    counts = self._finished[span_id] = {}
                counter = (ts.group.prefix.name, finish)
                counts[counter] = counts.get(counter, 0) + 1
        except Exception:
            self._internal_error("transition")

    # -- the poll -----------------------------------------------------------------------
    def _poll_safely(self, final: bool = False) -> None:
        try:
            self._poll(final)
        except Exception:
            self._internal_error("poll")

    def _extension(self) -> SpansSchedulerExtension | None:
        assert self._scheduler is not None
        return self._scheduler.extensions.get("spans")

    def _poll(self, final: bool) -> None:
        ext = self._extension()
        if ext is None or self.signals is None:
            return
        now = time()
        for span in islice(ext.spans.values(), self._seen, None):
            self._seen += 1
            self._tracks[span.id] = _Track()
            self._open[span.id] = span
            self._reopen_ancestors(span, span.enqueued)

        reopened, self._reopened = self._reopened, {}
        for span_id, when in reopened.items():
            reopened_span = ext.spans.get(span_id)
            if reopened_span is not None:
                self._reopen(reopened_span, when)
                self._reopen_ancestors(reopened_span, when)

        assert self.settings is not None
        linger = self.settings.traces.linger
        for span_id, span in list(self._open.items()):
            track = self._tracks[span_id]
            if span.done:
                if track.done_since is None:
                    track.done_since = now
                if final or now - track.done_since >= linger:
                    self._export(span, track, done=True)
            else:
                track.done_since = None
                if final:
                    self._export(span, track, done=False)

    def _reopen(self, span: Span, when: float) -> None:
        track = self._tracks.get(span.id)
        if track is None or not track.exports:
            return
        if track.reopened_at is None:
            track.reopened_at = max(when, track.last_end)
        self._open[span.id] = span

    def _reopen_ancestors(self, span: Span, when: float) -> None:
        node = span.parent
        while node is not None:
            self._reopen(node, when)
            node = node.parent

    def _export(self, span: Span, track: _Track, *, done: bool) -> None:
        record = self._record(span, track, done=done)
        assert self.signals is not None
        self.signals.submit_span(record)
        track.exports += 1
        track.last_span_id = record.span_id
        track.last_end = span.stop
        track.reopened_at = None
        track.done_since = None
        self._open.pop(span.id, None)

    # -- snapshot -----------------------------------------------------------------------
    def _record(self, span: Span, track: _Track, *, done: bool) -> SpanRecord:
        """Snapshot a Dask span; O(task groups in its subtree)."""
        root = span
        while root.parent is not None:
            root = root.parent
        trace_id = ids.trace_id_for(root.id)
        first_id = ids.dask_span_id(span.id)
        continuation = track.exports
        if continuation:
            span_id = ids.dask_span_id(span.id, continuation)
            parent_span_id = first_id
            start = track.reopened_at if track.reopened_at is not None else track.last_end
        else:
            span_id = first_id
            parent = span.parent
            parent_span_id = ids.dask_span_id(parent.id) if parent is not None else 0
            start = span.enqueued
        stop = span.stop
        groups = list(span.traverse_groups())
        states: dict[str, int] = {}
        for node in span.traverse_spans():
            for (_, state), count in self._finished.get(node.id, {}).items():
                states[state] = states.get(state, 0) + count
        if not done:
            for tg in groups:
                for state, count in tg.states.items():
                    if count and state in _PENDING_STATES:
                        states[state] = states.get(state, 0) + count
        return SpanRecord(
            uuid=span.id,
            tags=tuple(str(tag) for tag in span.name),
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent_span_id,
            continuation=continuation,
            previous_span_id=track.last_span_id if continuation else 0,
            start_ns=ns(start),
            end_ns=ns(max(stop, start)),
            enqueued_ns=ns(span.enqueued),
            compute_start_ns=ns(span.start),
            done=done,
            states=tuple(sorted(states.items())),
            tasks=sum(len(tg) for tg in groups),
            task_groups=len(groups),
            nbytes=sum(tg.nbytes_total for tg in groups),
            task_duration=sum(tg.duration for tg in groups),
            active_cpu_seconds=span.active_cpu_seconds,
            code=self._code(span),
        )

    def _code(self, span: Span) -> tuple[CodeSnippet, ...]:
        assert self.settings is not None
        if not self.settings.traces.code_max_length:
            return ()
        out = []
        for frames in span._code:
            if frames:
                frame = frames[-1]
                out.append(CodeSnippet(frame.code, frame.filename, frame.lineno_frame))
        return tuple(out)

    # -- failures -----------------------------------------------------------------------
    def _internal_error(self, where: str) -> None:
        """Count and (rate-limited) log a bug of ours; Dask must never see it."""
        self._internal_errors += 1
        now = _time.monotonic()
        if now - self._last_error_log >= _ERROR_LOG_EVERY:
            self._last_error_log = now
            logger.exception("otel-spans: internal error in %s (ignored)", where)
