"""The scheduler plugin: hook dispatch, on the scheduler's event loop.

Everything the plugin does runs on the event loop, so each hook does bounded work and
never raises into Dask: an error of ours is counted and logged (rate-limited) instead.
:class:`OtelSpansPlugin` is the hooks Dask calls (per task, per graph, per event) on
top of :class:`~otel_spans.scheduler.plugin_lifecycle.PluginLifecycle`, a copy's
start, watch and close. The work itself is in one module per job:

* :mod:`~otel_spans.scheduler.tracking` — spans: discovery, the trace poll, linger,
  continuations, when to export (the records: :mod:`~otel_spans.scheduler.span_records`);
* :mod:`~otel_spans.scheduler.task_groups` — task groups and sampled task runs;
* :mod:`~otel_spans.scheduler.metrics_tick` — the metrics tick;
* :mod:`~otel_spans.scheduler.profile_fetch` — profiles of finished workflows;
* :mod:`~otel_spans.scheduler.dask_events` — Dask events as log entries (and what a key or
  span id named in a Python log record means);
* :mod:`~otel_spans.scheduler.callers` — the caller's context from ``update_graph``;
* :mod:`~otel_spans.scheduler.guard` — when a copy must close itself, and when it
  stops following tasks after repeated errors of its own;
* :mod:`~otel_spans.scheduler.parts` — which of these parts a started copy runs, and
  how they are wired to each other;
* :mod:`~otel_spans.scheduler.plugin_stats` — the counters of them all, as ``stats()``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from otel_spans import semconv
from otel_spans.scheduler.plugin_lifecycle import PluginLifecycle
from otel_spans.scheduler.task_states import WATCHED_STATES

if TYPE_CHECKING:
    from distributed import Scheduler

    from otel_spans.scheduler.task_groups import TaskGroups


class OtelSpansPlugin(PluginLifecycle):
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

    Notes
    -----
    A scheduler runs one copy at a time. A copy that starts where another one runs
    (the preload's, or an earlier registration, under any name) takes over: it closes
    the running copy, which flushes its queues within ``shutdown-timeout``, and only
    then starts its own exporters. A copy that is unregistered, or whose scheduler is
    stopped without ``close()``, notices within ``WATCH_INTERVAL`` and closes itself.
    """

    name: ClassVar[str] = "otel-spans"

    # -- hooks (event loop) -------------------------------------------------------------
    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        # Every task passes here four or five times: a transition otel-spans does not
        # follow returns before any lookup, a followed one is one call into the tracker.
        tracker = self._tracker
        if tracker is None:
            return
        if finish == "forgotten":
            groups = tracker.task_groups
            if groups is not None and groups.reruns:  # else no rerun of it to forget
                self._forgotten(groups, key)
            if start != "memory":
                return
        elif finish not in WATCHED_STATES and start != "memory":
            return
        if self._budget.exhausted:
            return
        try:
            if self.signals is None:
                return
            assert self._scheduler is not None
            ts = self._scheduler.tasks.get(key)
            if ts is not None and ts.group is not None:
                tracker.transition(ts, start, finish, kwargs)
        except Exception:
            self._internal_error("transition")

    def _forgotten(self, groups: TaskGroups, key: Any) -> None:
        """A key left the scheduler: a lost run of it that never reran is no rerun of
        a later graph's task of the same key."""
        try:
            groups.forget_key(key)
        except Exception:
            self._internal_error("transition")

    def update_graph(
        self,
        scheduler: Scheduler,
        *,
        annotations: Any = None,
        tasks: Iterable[Hashable] = (),
        **kwargs: Any,
    ) -> None:
        """Adopt the caller's trace context: ``otel_spans.span``'s annotation, or the task
        that submitted the graph.

        Runs before the new tasks transition, so ids are settled before any of the new
        spans is tracked (see :mod:`otel_spans.scheduler.callers`).
        """
        if self._budget.exhausted:
            return
        try:
            tracker = self._tracker
            ext = tracker.extension() if tracker is not None else None
            if tracker is not None and ext is not None:
                client = kwargs.get("client")
                tracker.callers.adopt(
                    scheduler, ext, annotations, tasks, client if isinstance(client, str) else None
                )
        except Exception:
            self._internal_error("update_graph")

    def log_event(self, topic: str, msg: Any) -> None:
        """Dask structured events: worker losses feed the task groups, topics become
        logs; a worker's clock offset goes to the task groups (and is not logged)."""
        if self._budget.exhausted:
            return
        try:
            if self._worker_memory is not None and self.signals is not None:
                self._worker_memory.log_event(topic, msg)
        except Exception:
            self._internal_error("log_event")
        try:
            if topic == semconv.CLOCK_EVENT_TOPIC:
                tracker = self._tracker
                if tracker is not None and tracker.task_groups is not None:
                    tracker.task_groups.clocks.reported(msg)
                return
            if self._dask_events is not None and self.signals is not None:
                self._dask_events.log_event(topic, msg)
        except Exception:
            self._internal_error("log_event")

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        """A worker joined: remembered, so that its last heartbeat can be read once it
        is lost (Dask no longer lists it by then)."""
        try:
            if self._worker_memory is not None:
                self._worker_memory.add_worker(worker)
        except Exception:
            self._internal_error("add_worker")
