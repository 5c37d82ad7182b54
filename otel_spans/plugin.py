"""The scheduler plugin: hooks and the periodic readers, on the scheduler's event loop.

With :mod:`otel_spans.snapshots` this is the only code that reads distributed's
internals. Everything here runs on the event loop, so it does bounded work and never
raises into Dask:

* ``transition`` counts tasks reaching a final state and their output bytes per span
  and prefix, queues each finished task's compute time for the duration histogram,
  and notices a task of an already exported Dask span starting again;
* the trace poll (``traces.poll-interval``) discovers new Dask spans and checks the
  *open* ones (not yet exported, or reopened) for ``Span.done``. A span that stayed
  done for ``traces.linger`` is snapshotted into a :class:`SpanRecord` and handed to
  the exporter thread; cost per poll O(open spans × their task groups), never
  O(history);
* the metrics tick (``metrics.interval``) reads the cumulative values of the spans
  still *live* for metrics (open, or finished less than ``metrics.settle`` ago) and
  hands over their growth as counter deltas, in slices of bounded time.

A Dask span can become not-done after it was exported (a new sub-span, or a worker
died holding its only results). Its later work is exported as a *continuation*: a new
OTel span, child of the first export, linked to the previous export, with its own id
``ids.dask_span_id(uuid, n)``. No two exports ever share a span id.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time as _time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, ClassVar

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.metrics import time
from tornado.ioloop import IOLoop, PeriodicCallback

from otel_spans import config, ids, semconv, snapshots, workflow_analysis
from otel_spans.config import Settings
from otel_spans.context import parse_traceparent
from otel_spans.dag import DagTracker, SpanContextInfo, compute_seconds
from otel_spans.records import (
    CounterDelta,
    EventRecord,
    LinkRecord,
    LogEntry,
    Observation,
    SpanRecord,
    ns,
)
from otel_spans.sampling import Policy
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
#: Transitions after which a span may have become done: the poll re-checks it.
_SETTLING_STATES = _FINAL_STATES | {"released"}
#: At most one "internal error" log line per this many seconds.
_ERROR_LOG_EVERY = 60.0
#: Seconds one poll may spend on the event loop. When thousands of spans finish at
#: once, the poll stops there and continues in a fresh loop iteration, so that other
#: scheduler work runs in between; shutdown's final poll has no budget.
_POLL_BUDGET = 0.005

#: Most event topics whose log decision is remembered.
_MAX_TOPICS = 1000

_PREFIX = semconv.ATTR_TASK_PREFIX
_STATE = semconv.ATTR_TASK_STATE


@dataclass(slots=True)
class _Track:
    """What the plugin remembers of one Dask span (one small object per span)."""

    #: Tags, trace id, OTel span id of the first export, sampling policy.
    info: SpanContextInfo
    is_root: bool
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
    #: When the span was last exported as done; metrics settle from there.
    exported_at: float | None = None
    #: (prefix, final state) -> tasks that reached it.
    finished: dict[tuple[str, str], int] = field(default_factory=dict)
    #: prefix -> bytes of outputs produced.
    output: dict[str, int] = field(default_factory=dict)
    #: Cumulative values already handed over as deltas, by metric key.
    seen: dict[tuple[Hashable, ...], float] = field(default_factory=dict)

    @property
    def tags(self) -> tuple[str, ...]:
        return self.info.tags

    @property
    def trace_id(self) -> int:
        return self.info.trace_id

    @property
    def otel_span_id(self) -> int:
        """OTel span id of the first export (tasks and exemplars point here)."""
        return self.info.otel_span_id


class OtelSpansPlugin(SchedulerPlugin):
    """Export the scheduler's Dask spans as OpenTelemetry signals.

    Parameters
    ----------
    settings
        Fully resolved settings; when omitted they are read on the scheduler, in
        ``start``, from its dask.config and environment plus ``overrides``.
    **overrides
        ``otel-spans`` configuration keys (``endpoint="http://collector:4317"``,
        ``traces={"linger": "1s"}``); they win over the scheduler's dask.config. Use
        them with ``client.register_plugin(OtelSpansPlugin(...))`` on a running cluster.
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
        self._callbacks: list[PeriodicCallback] = []
        self._tracks: dict[str, _Track] = {}
        #: Spans not exported yet, or reopened since.
        self._open: dict[str, Span] = {}
        #: Spans whose metrics are still read (open, or not settled yet).
        self._live: dict[str, Span] = {}
        self._reopened: dict[str, float] = {}
        #: Spans with task transitions since the last poll: only these (and their
        #: ancestors) can have changed their done-ness.
        self._dirty: set[str] = set()
        #: Open spans seen done, waiting out the linger.
        self._lingering: set[str] = set()
        self._cluster_seen: dict[tuple[Hashable, ...], float] = {}
        self._seen = 0
        self._dag: DagTracker | None = None
        #: Root Dask span uuid -> the caller context its tasks were annotated with.
        self._upstream: dict[str, tuple[int, int, bool]] = {}
        #: Event topic -> whether its events become log records (bounded).
        self._topics: dict[Any, bool] = {}
        #: Recent worker removals already handled (insertion-ordered, bounded).
        self._removals: dict[tuple[Any, Any], None] = {}
        #: The last event message that became a log record (see :meth:`log_event`).
        self._last_logged: object = None
        self._internal_errors = 0
        #: The pipelines after close(): their final counters stay readable in stats().
        self._closed_signals: Signals | None = None
        #: A poll that ran out of budget goes on from here in the next loop iteration.
        self._resume_poll = _Resume(self._poll_safely)
        #: The spans that poll had no time for, in order.
        self._deferred: list[str] = []
        #: Live spans the current metrics pass has still to read (read from the end).
        self._tick_pending: list[str] = []
        #: A metrics pass that ran out of budget goes on from here likewise.
        self._resume_tick = _Resume(self._metrics_safely)
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
            loop_errors=lambda: self._internal_errors,
        )
        erred_logs = settings.logs.erred_tasks and settings.logs.target.kind != "none"
        if self.signals.traces_enabled or erred_logs:
            # Without traces and erred-task logs nothing would read the DAG.
            self._dag = DagTracker(
                scheduler,
                submit=self.signals.submit_span,
                log=self.signals.submit_log if erred_logs else None,
                max_error_stories=settings.traces.max_error_stories,
                max_length=settings.max_attribute_length,
                exception_messages=settings.capture.exceptions == "message",
            )
        scheduler.handlers["otel_spans_stats"] = self.stats
        self._callbacks = [
            PeriodicCallback(self._poll_safely, settings.traces.poll_interval * 1000),
            PeriodicCallback(self._metrics_safely, settings.metrics.interval * 1000),
        ]
        for callback in self._callbacks:
            callback.start()
        logger.info("otel-spans: %s", self.signals.describe())

    async def close(self) -> None:
        for callback in self._callbacks:
            callback.stop()
        self._callbacks = []
        if self.signals is None:
            return
        self._poll_safely(final=True)
        self._metrics_safely(final=True)
        # Hooks see no pipelines from here on; stats() still reads their counters.
        signals, self.signals = self.signals, None
        self._closed_signals = signals
        assert self.settings is not None
        timeout = self.settings.shutdown_timeout
        # close() blocks on the exporter threads; keep it off the event loop, and never
        # wait longer than the deadline plus a margin, whatever the exporters do.
        try:
            await asyncio.wait_for(asyncio.to_thread(signals.close, timeout), timeout + 1.0)
        except asyncio.TimeoutError:
            logger.warning("otel-spans: exporters did not stop within %.1fs", timeout)
        self._release()

    def _release(self) -> None:
        """Forget every span once closed (see ``Signals._release_metrics`` for why)."""
        self._dag = None
        for state in (
            self._tracks,
            self._open,
            self._live,
            self._reopened,
            self._dirty,
            self._lingering,
            self._cluster_seen,
            self._upstream,
            self._topics,
            self._removals,
            self._deferred,
            self._tick_pending,
        ):
            state.clear()
        self._last_logged = None

    def stats(self) -> dict[str, Any]:
        """Pipeline counters; also served as the ``otel_spans_stats`` scheduler handler."""
        out: dict[str, Any] = {
            "open_spans": len(self._open),
            "live_spans": len(self._live),
            "tracked_spans": len(self._tracks),
        }
        if self._dag is not None:
            out["dag"] = self._dag.stats()
        signals = self.signals or self._closed_signals
        if signals is not None:
            out.update(signals.stats())  # internal errors of the loop and the exporters
        else:
            out["internal_errors"] = self._internal_errors
        return out

    # -- hooks (event loop) -------------------------------------------------------------
    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        active = finish in _ACTIVE_STATES
        if not active and finish not in _SETTLING_STATES:
            return
        try:
            assert self._scheduler is not None
            ts = self._scheduler.tasks.get(key)
            if ts is None or ts.group is None:
                return
            span_id = ts.group.span_id
            if not span_id:
                return
            track = self._tracks.get(span_id) or self._discover(span_id)
            if track is None:
                return
            self._dirty.add(span_id)
            if active:
                if track.exports and span_id not in self._reopened:
                    self._reopened[span_id] = time()
                return
            if finish == "released" or (finish == "memory" and start != "processing"):
                return
            startstops = kwargs.get("startstops")
            compute = compute_seconds(startstops)
            task_span_id = 0
            if self._dag is not None:
                task_span_id = self._dag.task_finished(
                    ts, start, finish, kwargs, track.info, compute
                )
            prefix = ts.group.prefix.name
            counter = (prefix, finish)
            track.finished[counter] = track.finished.get(counter, 0) + 1
            if finish == "memory":
                track.output[prefix] = track.output.get(prefix, 0) + (kwargs.get("nbytes") or 0)
                if startstops and self.signals is not None:
                    # The compute time into the duration histogram; an exemplar when the
                    # task has a span.
                    self.signals.record_task_duration(
                        track.tags, prefix, compute, track.trace_id, task_span_id
                    )
        except Exception:
            self._internal_error("transition")

    def update_graph(self, scheduler: Scheduler, *, annotations: Any = None, **kwargs: Any) -> None:
        """Adopt the caller's trace context that ``otel_spans.span`` annotated tasks with.

        Runs before the new tasks transition, so ids are settled before any of the new
        spans is tracked; the first graph of a Dask span decides for it.

        * a new *root* Dask span joins the caller's trace as its child (or, with
          ``link``, keeps its own trace and links to the caller);
        * a new *nested* Dask span whose tasks name another parent in the same trace
          was opened by code running inside a task: it hangs under that task's span
          (with ``link``, it keeps its Dask parent and links to the task).

        A root never adopts a context from its own trace (a task of the tree submitting
        more work): that would make it a child of its own descendant.
        """
        try:
            by_key = (annotations or {}).get(semconv.ANNOTATION)
            if not by_key:
                return
            ext = self._extension()
            if ext is None:
                return
            decided: set[str] = set()
            for key, value in by_key.items():
                ts = scheduler.tasks.get(key)
                if ts is None or ts.group is None or not ts.group.span_id:
                    continue
                span_id = ts.group.span_id
                if span_id in decided:
                    continue
                decided.add(span_id)
                span = ext.spans.get(span_id)
                parsed = _caller(value)
                if span is None or parsed is None:
                    continue
                self._adopt(span, parsed, decided)
        except Exception:
            self._internal_error("update_graph")

    def _adopt(self, span: Span, caller: tuple[int, int, bool], decided: set[str]) -> None:
        root = snapshots.root_of(span)
        if root.id not in self._tracks and root.id not in self._upstream:
            # A new tree: its root adopts the caller; spans new in the same graph as
            # their root follow the Dask tree.
            if caller[0] != ids.trace_id_for(root.id):
                self._upstream[root.id] = caller
            decided.add(root.id)
            return
        if span is root or root.id in decided or span.id in self._tracks:
            return
        if span.id in self._upstream:
            return
        root_caller = self._upstream.get(root.id)
        if root_caller is not None and caller[:2] == root_caller[:2]:
            return  # the tree's own caller, opening another span of the tree
        parent = span.parent
        if parent is not None and caller[1] == ids.dask_span_id(parent.id):
            return
        # Opened by code running in a task of the tree (or elsewhere): hang under it.
        self._upstream[span.id] = caller

    def log_event(self, topic: str, msg: Any) -> None:
        """Dask structured events: worker losses feed the DAG, topics become logs."""
        try:
            if self.signals is None or self.settings is None:
                return
            action = msg.get("action") if isinstance(msg, dict) else None
            if action == "remove-worker" and self._dag is not None:
                # Logged under the worker's topic and under "all": count each removal once.
                removal = (msg.get("stimulus_id"), msg.get("worker", topic))
                if removal not in self._removals:
                    self._removals[removal] = None
                    if len(self._removals) > 1000:
                        del self._removals[next(iter(self._removals))]
                    self._dag.lost(msg.get("processing-tasks") or ())
                    self._dag.lost(msg.get("lost-computed-tasks") or ())
            if not self._topic_logged(topic):
                return
            if isinstance(msg, dict):
                # Dask publishes one message under several topics at once (update-graph
                # under "scheduler" and the client's id): one record, under the first.
                if msg is self._last_logged:
                    return
                self._last_logged = msg
            attributes: tuple[tuple[str, str], ...] = ((semconv.DASK_EVENT_TOPIC, str(topic)),)
            if action is not None:
                attributes += ((semconv.DASK_EVENT_ACTION, str(action)),)
            self.signals.submit_log(
                LogEntry(
                    time_ns=ns(time()),
                    severity_number=9,  # INFO
                    severity_text="INFO",
                    body=self._event_body(msg),
                    attributes=attributes,
                    event_name=semconv.LOG_EVENT_NAME,
                    **self._event_context(msg),
                )
            )
        except Exception:
            self._internal_error("log_event")

    def _topic_logged(self, topic: Any) -> bool:
        """Whether events of ``topic`` become log records; remembered per topic, since a
        busy scheduler logs an event per client call and the globs cost µs each."""
        known = self._topics.get(topic)
        if known is None:
            assert self.settings is not None
            logs = self.settings.logs
            known = (
                logs.target.kind != "none"
                and _matches(topic, logs.topics)
                and not _matches(topic, logs.exclude_topics)
            )
            if len(self._topics) >= _MAX_TOPICS:  # per-worker topics come and go
                self._topics.clear()
            self._topics[topic] = known
        return known

    def _event_body(self, msg: Any) -> Any:
        """A copy of the event; without its exception texts unless they may be captured."""
        if not isinstance(msg, dict):
            return msg
        if self.settings is not None and self.settings.capture.exceptions == "type":
            return {k: v for k, v in msg.items() if k not in snapshots.EXCEPTION_FIELDS}
        return dict(msg)

    def _event_context(self, msg: Any) -> dict[str, int]:
        """Trace and span ids for an event that names a task key or a Dask span."""
        if not isinstance(msg, dict) or self._scheduler is None:
            return {}
        track = None
        key = msg.get("key")
        if key is not None:
            try:
                ts = self._scheduler.tasks.get(key)
            except TypeError:  # an unhashable "key"
                ts = None
            if ts is not None and ts.group is not None and ts.group.span_id:
                track = self._tracks.get(ts.group.span_id)
        span_id = msg.get("span_id")
        if track is None and isinstance(span_id, str):
            track = self._tracks.get(span_id)
        if track is None:
            return {}
        return {"trace_id": track.trace_id, "span_id": track.otel_span_id}

    # -- discovery ------------------------------------------------------------------------
    def _extension(self) -> SpansSchedulerExtension | None:
        assert self._scheduler is not None
        return self._scheduler.extensions.get("spans")

    def _discover(self, span_id: str) -> _Track | None:
        """Track a span seen for the first time (in a transition, before any poll)."""
        if self.signals is None:
            return None  # closed, or never started: nothing may be tracked again
        ext = self._extension()
        span = ext.spans.get(span_id) if ext is not None else None
        return self._track(span) if span is not None else None

    def _track(self, span: Span) -> _Track:
        track = self._tracks.get(span.id)
        if track is None:
            root = snapshots.root_of(span)
            tags = tuple(str(tag) for tag in span.name)
            upstream = self._upstream.get(root.id)
            if upstream is not None and not upstream[2]:
                trace_id = upstream[0]  # the caller's trace: we are part of it
            else:
                trace_id = ids.trace_id_for(root.id)
            otel_span_id = ids.dask_span_id(span.id)
            track = self._tracks[span.id] = _Track(
                info=SpanContextInfo(span.id, tags, trace_id, otel_span_id, self._policy(tags)),
                is_root=root is span,
            )
            self._open[span.id] = span
            self._live[span.id] = span
        return track

    def _policy(self, tags: tuple[str, ...]) -> Policy:
        assert self.settings is not None
        tasks = self.settings.traces.tasks
        mode = tasks.mode
        name = "/".join(tags)
        for rule in tasks.rules:
            if fnmatch.fnmatchcase(name, rule.match):
                mode = rule.mode
                break
        return Policy(mode, tasks.slowest, tasks.ratio, tasks.max_per_trace, tasks.min_duration)

    # -- the trace poll -----------------------------------------------------------------
    def _poll_safely(self, final: bool = False) -> None:
        try:
            self._poll(final)
        except Exception:
            self._internal_error("poll")

    def _poll(self, final: bool) -> None:
        ext = self._extension()
        if ext is None or self.signals is None:
            return
        now = time()
        if len(ext.spans) > self._seen:
            for span in islice(ext.spans.values(), self._seen, None):
                self._seen += 1
                self._track(span)
                self._dirty.add(span.id)
                self._reopen_ancestors(span, span.enqueued)

        reopened, self._reopened = self._reopened, {}
        for span_id, when in reopened.items():
            reopened_span = ext.spans.get(span_id)
            if reopened_span is not None:
                self._reopen(reopened_span, when)
                self._reopen_ancestors(reopened_span, when)

        # Done-ness only changes through task transitions of a span's tree: re-check
        # the spans that had some, and their ancestors, not every open span.
        dirty, self._dirty = self._dirty, set()
        changed: set[str] = set()
        for span_id in dirty:
            node = self._open.get(span_id) or ext.spans.get(span_id)
            while node is not None and node.id not in changed:
                changed.add(node.id)
                node = node.parent
        if final:  # shutdown looks at every open span once more
            changed |= set(self._open)
        candidates = changed | self._lingering
        done: dict[str, bool] = {}

        assert self.settings is not None
        linger = self.settings.traces.linger
        deadline = _time.perf_counter() + _POLL_BUDGET
        # What the last poll had no time for goes first, so that every span gets its
        # turn however many others keep changing.
        pending = [s for s in self._deferred if s in candidates]
        pending += candidates.difference(pending)
        self._deferred = []
        for index, span_id in enumerate(pending):
            if index and not final and _time.perf_counter() > deadline:
                # Out of budget: the rest is looked at again in a moment.
                self._dirty.update(s for s in pending[index:] if s in changed)
                self._deferred = pending[index:]
                self._resume_poll.soon()
                break
            open_span = self._open.get(span_id)
            if open_span is None:
                continue
            track = self._tracks[span_id]
            if span_id in changed:
                if self._done(open_span, changed, done):
                    if track.done_since is None:
                        track.done_since = now
                        self._lingering.add(span_id)
                else:
                    track.done_since = None
                    self._lingering.discard(span_id)
            if track.done_since is not None and (final or now - track.done_since >= linger):
                self._export(open_span, track, done=True)
            elif final:
                self._export(open_span, track, done=False)

    def _done(self, span: Span, changed: set[str], memo: dict[str, bool]) -> bool:
        """``Span.done``, without walking the whole subtree on every poll.

        Dask's ``Span.done`` visits every task group below the span, and a root is
        re-checked whenever any of its descendants had a transition: with 1,000
        sub-spans that is 1,000 groups per check. Here a span is done when its own
        groups are, and each child is: a child that is no longer open was exported
        done (any later transition would have reopened it), a child outside
        ``changed`` had no transition since it was last checked, and only the other
        children are looked at again, once per poll (``memo``).
        """
        known = memo.get(span.id)
        if known is not None:
            return known
        result = all(group.done for group in span.groups)
        for child in span.children:
            if not result:
                break
            if child.id not in self._open:
                continue
            if child.id in changed:
                result = self._done(child, changed, memo)
            else:
                track = self._tracks.get(child.id)
                result = track is not None and track.done_since is not None
        memo[span.id] = result
        return result

    def _reopen(self, span: Span, when: float) -> None:
        track = self._tracks.get(span.id)
        if track is None or not track.exports:
            return
        if track.reopened_at is None:
            track.reopened_at = max(when, track.last_end)
        track.exported_at = None
        self._open[span.id] = span
        self._live[span.id] = span

    def _reopen_ancestors(self, span: Span, when: float) -> None:
        node = span.parent
        while node is not None:
            self._reopen(node, when)
            node = node.parent

    def _export(self, span: Span, track: _Track, *, done: bool) -> None:
        assert self.signals is not None
        record = self._record(span, track, done=done)
        self.signals.submit_span(record)
        if self._dag is not None:
            self._dag.export_groups(list(span.groups), track.info, span.enqueued)
        for key, value in record.extra:
            if key == semconv.WORKFLOW_EFFICIENCY and isinstance(value, float):
                self.signals.submit_observation(
                    Observation(
                        semconv.M_WORKFLOW_EFFICIENCY,
                        track.tags,
                        (),
                        value,
                        track.trace_id,
                        record.span_id,
                    )
                )
        if done:
            self.signals.submit_observation(
                Observation(
                    semconv.M_SPAN_DURATION,
                    track.tags,
                    (),
                    (record.end_ns - record.start_ns) / 1e9,
                    track.trace_id,
                    record.span_id,
                )
            )
        track.exports += 1
        track.last_span_id = record.span_id
        track.last_end = span.stop
        track.reopened_at = None
        track.done_since = None
        track.exported_at = time() if done else None
        self._open.pop(span.id, None)
        self._lingering.discard(span.id)
        # The CPU made available stops growing once the span is done: hand over its
        # final growth now rather than re-reading it on every metrics tick.
        self.signals.submit_deltas(self._cpu_delta(span, track, record.active_cpu_seconds))

    def _record(self, span: Span, track: _Track, *, done: bool) -> SpanRecord:
        """Snapshot a Dask span; O(task groups in its subtree).

        Without traces only what the metrics read is filled in (ids, times, CPU, the
        workflow analysis): the subtree walks feed span attributes alone.
        """
        assert self.signals is not None
        full = self.signals.traces_enabled
        continuation = track.exports
        if continuation:
            span_id = ids.dask_span_id(span.id, continuation)
            parent_span_id = track.otel_span_id
            start = track.reopened_at if track.reopened_at is not None else track.last_end
        else:
            span_id = track.otel_span_id
            parent = span.parent
            parent_span_id = ids.dask_span_id(parent.id) if parent is not None else 0
            start = span.enqueued
        links: tuple[LinkRecord, ...] = ()
        upstream = self._upstream.get(span.id) if not continuation else None
        if upstream is not None:
            caller_trace, caller_span, as_link = upstream
            if as_link or (not track.is_root and caller_trace != track.trace_id):
                # a link: asked for, or the task that opened a nested span is in another
                # trace (a tree keeps one trace id: its ids are derived from it)
                kind = ((semconv.DASK_LINK_KIND, semconv.LINK_KIND_CALLER),)
                links = (LinkRecord(caller_trace, caller_span, kind),)
            else:
                parent_span_id = caller_span
        stop = span.stop
        groups = list(span.traverse_groups()) if full else []
        states: dict[str, int] = {}
        for node in span.traverse_spans() if full else ():
            node_track = self._tracks.get(node.id)
            if node_track is not None:
                for (_, state), count in node_track.finished.items():
                    states[state] = states.get(state, 0) + count
        if full and not done:
            for state, count in snapshots.pending_states(span).items():
                states[state] = states.get(state, 0) + count
        assert self.settings is not None
        events = self._computations(span) if full and not continuation else ()
        extra: tuple[tuple[str, Any], ...] = ()
        if track.is_root and done:
            extra = workflow_analysis.analysis_attributes(span)
            if full:
                events += workflow_analysis.nthreads_events(span)
        return SpanRecord(
            uuid=span.id,
            tags=track.tags,
            trace_id=track.trace_id,
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
            code=snapshots.code_snippets(
                span, self.settings.capture.code, self.settings.code_snippet_length
            )
            if full
            else (),
            events=events,
            links=links,
            extra=extra,
        )

    def _computations(self, span: Span) -> tuple[EventRecord, ...]:
        """One event per compute/persist/submit whose task groups fed this span."""
        assert self._scheduler is not None and self.settings is not None
        own = span.groups
        limit = self.settings.code_snippet_length
        events = []
        for computation in list(self._scheduler.computations):
            shared = len(computation.groups & own)
            if not shared:
                continue
            attrs: tuple[tuple[str, str | int], ...] = (
                (semconv.DASK_COMPUTATION_ID, str(computation.id)),
                (semconv.DASK_COMPUTATION_GROUPS, shared),
            )
            for frames in list(computation.code)[:1]:
                if frames and limit:
                    attrs += ((semconv.DASK_SPAN_CODE, frames[-1].code[:limit]),)
            events.append(EventRecord(semconv.EVENT_COMPUTATION, ns(computation.start), attrs))
        return tuple(events)

    # -- the metrics tick -----------------------------------------------------------------
    def _metrics_safely(self, final: bool = False) -> None:
        try:
            self._metrics_tick(final)
        except Exception:
            self._internal_error("metrics")

    def _metrics_tick(self, final: bool) -> None:
        """Hand over the growth of every live span's cumulative values since last time.

        Reading a span's values costs tens of µs, and a workflow of 1,000 sub-spans
        keeps them all live until they settle: one pass over them is split into slices
        of ``_POLL_BUDGET``, each in its own loop iteration. A tick that finds a pass
        still under way continues it rather than starting over; shutdown's final tick
        finishes it at once.
        """
        if self.signals is None or self._scheduler is None:
            return
        assert self.settings is not None
        if not self._tick_pending:
            # A new pass: first discover the spans that appeared since the last poll.
            self._poll(final=False)
            self._tick_pending = list(self._live)
        settle = self.settings.metrics.settle
        now = time()
        deadline = _time.perf_counter() + _POLL_BUDGET
        deltas: list[CounterDelta] = []
        pending = self._tick_pending
        while pending:
            span_id = pending.pop()
            span = self._live.get(span_id)
            if span is not None:
                track = self._tracks[span_id]
                deltas.extend(self._span_deltas(span, track))
                settled = track.exported_at is not None and now - track.exported_at >= settle
                if settled or final:
                    if track.is_root:
                        deltas.extend(self._idle_delta(span, track))
                    if settled:
                        del self._live[span_id]
            if pending and not final and _time.perf_counter() > deadline:
                # Out of budget (after at least one span: every slice makes progress).
                self._resume_tick.soon()
                break
        if not pending:
            for key, value in snapshots.growth(
                self._scheduler.cumulative_worker_metrics, self._cluster_seen
            ):
                delta = snapshots.worker_metric(None, key, value)
                if delta is not None:
                    deltas.append(delta)
        self.signals.submit_deltas(deltas)

    def _span_deltas(self, span: Span, track: _Track) -> list[CounterDelta]:
        out = []
        tags, seen = track.tags, track.seen
        for key, value in snapshots.growth(span._cumulative_worker_metrics, seen):
            delta = snapshots.worker_metric(tags, key, value)
            if delta is not None:
                out.append(delta)
        finished = {("tasks", p, s): float(n) for (p, s), n in track.finished.items()}
        for (_, prefix, state), value in snapshots.growth(finished, seen):
            attrs = ((_PREFIX, str(prefix)), (_STATE, str(state)))
            out.append(CounterDelta(semconv.M_SPAN_TASKS, tags, attrs, value))
        output = {("output", p): float(n) for p, n in track.output.items()}
        for (_, prefix), value in snapshots.growth(output, seen):
            out.append(CounterDelta(semconv.M_SPAN_OUTPUT, tags, ((_PREFIX, str(prefix)),), value))
        if track.is_root and span.id in self._open:
            # Dask computes active_cpu_seconds by walking the span's whole subtree
            # (O(subtree x depth)): live growth for running workflows (roots) only;
            # every span's value is completed when it is exported.
            out.extend(self._cpu_delta(span, track, span.active_cpu_seconds))
        return out

    @staticmethod
    def _cpu_delta(span: Span, track: _Track, active_cpu_seconds: float) -> list[CounterDelta]:
        return [
            CounterDelta(semconv.M_SPAN_CPU_AVAILABLE, track.tags, (), value)
            for _, value in snapshots.growth({("cpu",): active_cpu_seconds}, track.seen)
        ]

    def _idle_delta(self, root: Span, track: _Track) -> list[CounterDelta]:
        """The root's "idle or other spans" share, once its tree's values are final.

        It is active CPU minus all known task time of the whole tree, so it can only be
        computed once late heartbeats have landed; reported on the root only, so that
        summing a workflow's series by root counts it once.
        """
        idle = root.cumulative_worker_metrics.get(snapshots.IDLE_KEY, 0.0)
        out = []
        for key, value in snapshots.growth({snapshots.IDLE_KEY: idle}, track.seen):
            delta = snapshots.worker_metric(track.tags, key, value)
            if delta is not None:
                out.append(delta)
        return out

    # -- failures -----------------------------------------------------------------------
    def _internal_error(self, where: str) -> None:
        """Count and (rate-limited) log a bug of ours; Dask must never see it."""
        self._internal_errors += 1
        now = _time.monotonic()
        if now - self._last_error_log >= _ERROR_LOG_EVERY:
            self._last_error_log = now
            logger.exception("otel-spans: internal error in %s (ignored)", where)


class _Resume:
    """Calls ``callback`` in the next loop iteration, once however often it is asked.

    How the poll and the metrics pass go on after running out of time budget.
    """

    def __init__(self, callback: Callable[[], None]):
        self.callback = callback
        self._pending = False

    def soon(self) -> None:
        if not self._pending:
            self._pending = True
            IOLoop.current().add_callback(self._run)

    def _run(self) -> None:
        self._pending = False
        self.callback()


def _matches(topic: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(str(topic), pattern) for pattern in patterns)


def _caller(value: Any) -> tuple[int, int, bool] | None:
    """(trace id, span id, link mode) from an ``otel_spans`` task annotation.

    Parsed exactly as workers parse it (:func:`otel_spans.context.parse_traceparent`),
    so that every process derives the same ids from the same annotation.
    """
    if not isinstance(value, dict):
        return None
    text = value.get("traceparent")
    parsed = parse_traceparent(text) if isinstance(text, str) else None
    if parsed is None:
        return None
    trace_id, span_id, _ = parsed
    return trace_id, span_id, bool(value.get("link", False))
