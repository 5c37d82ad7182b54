"""The lifecycle of a copy of the scheduler plugin: take over, start, watch, close.

:class:`~otel_spans.scheduler.plugin.OtelSpansPlugin` is this class plus the hooks
Dask calls on every task (its hook dispatch, in :mod:`otel_spans.scheduler.plugin`).
Here is everything else a copy does on the scheduler's event loop: closing the copy it
takes over, starting the parts :mod:`~otel_spans.scheduler.parts` builds and their
periodic callbacks, noticing it was orphaned (:mod:`~otel_spans.scheduler.guard`),
flushing and stopping, serving ``stats()``, and counting its own errors until the
error budget switches the per-task hooks off. Nothing here runs per task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado.ioloop import PeriodicCallback

from otel_spans import config
from otel_spans.config import Settings
from otel_spans.error_budget import ErrorBudget
from otel_spans.scheduler import workflows_page
from otel_spans.scheduler.callers import watch_submitting_tasks
from otel_spans.scheduler.dask_events import DaskEvents
from otel_spans.scheduler.guard import WATCH_INTERVAL, orphaned
from otel_spans.scheduler.metrics_tick import SpanMetricsTick
from otel_spans.scheduler.parts import build_parts
from otel_spans.scheduler.plugin_stats import plugin_stats
from otel_spans.scheduler.profile_fetch import WorkflowProfiles
from otel_spans.scheduler.slices import Resume
from otel_spans.scheduler.tracking import SpanTracker
from otel_spans.scheduler.worker_memory import WorkerMemory
from otel_spans.telemetry.signals import Signals
from otel_spans.throttle import Throttle

if TYPE_CHECKING:
    from distributed import Scheduler

logger = logging.getLogger("otel_spans")

#: At most one "internal error" log line per this many seconds.
_ERROR_LOG_EVERY = 60.0
#: Seconds the exporters of a copy whose start failed get to stop (nothing is queued).
_ABORT_TIMEOUT = 0.5


class PluginLifecycle(SchedulerPlugin):
    """One copy's life on a scheduler, and its own errors: the base of
    :class:`~otel_spans.scheduler.plugin.OtelSpansPlugin`, which adds Dask's hooks."""

    def __init__(self, settings: Settings | None = None, **overrides: Any):
        # Catch typos on the client, before the plugin travels to the scheduler.
        config.check_keys(overrides)
        self._overrides = overrides
        self._given_settings = settings
        self.settings: Settings | None = None
        self.signals: Signals | None = None
        self._scheduler: Scheduler | None = None
        self._callbacks: list[PeriodicCallback] = []
        self._tracker: SpanTracker | None = None
        self._metrics: SpanMetricsTick | None = None
        self._profiles: WorkflowProfiles | None = None
        self._dask_events: DaskEvents | None = None
        self._worker_memory: WorkerMemory | None = None
        self._internal_errors = 0
        self._error_log = Throttle(_ERROR_LOG_EVERY)
        #: Self-protection: once exhausted, the per-task hooks return at once.
        self._budget = ErrorBudget()
        #: The one close() of this copy, however many callers ask for it.
        self._closing: asyncio.Future[None] | None = None
        #: Set by the copy taking over: close() then keeps the tracker for it.
        self._handing_over = False
        #: Trackers of the copies this one took over, until its own tracker inherits.
        self._inherited: list[SpanTracker] = []
        self._unwatch: Callable[[], None] = lambda: None
        #: The workflows page is routed once per scheduler (routes cannot be removed).
        self._page_served = False
        #: The pipelines after close(): their final counters stay readable in stats().
        self._closed_signals: Signals | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_overrides": self._overrides, "_given_settings": self._given_settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_given_settings"], **state["_overrides"])  # type: ignore[misc]

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self, scheduler: Scheduler) -> None:
        if self._scheduler is not None or self._closing is not None:
            return
        settings = self._given_settings or Settings.from_config(self._overrides)
        await self._take_over(scheduler)
        self.settings = settings
        self._scheduler = scheduler
        if not settings.enabled:
            logger.info("otel-spans: disabled by configuration")
            return
        try:
            # Signals stops its own threads if it fails halfway (a port in use).
            signals = Signals(
                settings,
                role="scheduler",
                instance_id=scheduler.id,
                scheduler_address=scheduler.address,
                loop_errors=lambda: self._internal_errors,
                hooks_disabled=lambda: int(self._budget.exhausted),
            )
        except BaseException:
            self._scheduler = None
            raise
        self.signals = signals
        try:
            self._start_parts(scheduler, settings, signals)
        except BaseException:
            # Whatever started before the failing step stops again: no thread, handler
            # or wrapper of a copy that never ran may outlive the failed start.
            self._stop_parts()
            self.signals = self._scheduler = None
            signals.close(_ABORT_TIMEOUT)
            self._release()
            raise
        logger.info("otel-spans: %s", signals.describe())

    async def _take_over(self, scheduler: Scheduler) -> None:
        """Close every other copy running on ``scheduler`` before this one starts.

        ``register_scheduler_plugin`` starts the new copy while the old one is still in
        ``scheduler.plugins``, and then replaces it without closing it: the old copy
        would keep its threads, callbacks and handlers, and export duplicates forever.
        Closing it first also frees what both need alone (the Prometheus port).
        """
        for name, other in list(scheduler.plugins.items()):
            if not isinstance(other, PluginLifecycle) or other is self:
                continue
            if other._scheduler is None:
                continue  # never started: it holds nothing
            if other.signals is not None:
                logger.info(
                    "otel-spans: a new copy was registered on this scheduler; closing the "
                    "running one (plugin %r) and flushing its queues first",
                    name,
                )
            other._handing_over = True
            await other.close()
            if other._tracker is not None:
                self._inherited.append(other._tracker)
                other._tracker = None

    def _start_parts(self, scheduler: Scheduler, settings: Settings, signals: Signals) -> None:
        parts = build_parts(
            scheduler,
            settings,
            signals,
            resume_poll=Resume(self._poll_safely),
            resume_metrics=Resume(self._metrics_safely),
            inherited=self._inherited,
        )
        self._tracker, self._metrics = parts.tracker, parts.metrics
        self._profiles, self._dask_events = parts.profiles, parts.dask_events
        self._worker_memory = parts.worker_memory
        signals.export_python_logs(self._dask_events.about)
        scheduler.handlers["otel_spans_stats"] = self.stats
        if not self._page_served:
            self._page_served = workflows_page.register(scheduler)
        self._unwatch = watch_submitting_tasks(scheduler)
        self._callbacks = [
            PeriodicCallback(self._poll_safely, settings.traces.poll_interval * 1000),
            PeriodicCallback(self._metrics_safely, settings.metrics.interval * 1000),
            PeriodicCallback(self._watch, WATCH_INTERVAL * 1000),
        ]
        for callback in self._callbacks:
            callback.start()

    def _stop_parts(self) -> None:
        for callback in self._callbacks:
            callback.stop()
        self._callbacks = []
        self._unwatch()
        self._unwatch = lambda: None

    def _watch(self) -> None:
        """Close this copy once the scheduler no longer runs it (see ``WATCH_INTERVAL``).

        Neither ``unregister_scheduler_plugin`` nor ``Scheduler.stop()`` calls a plugin's
        ``close()``: this is how a copy learns it is orphaned.
        """
        scheduler = self._scheduler
        if scheduler is None or self._closing is not None:
            return
        reason = orphaned(self, scheduler)
        if reason is None:
            return
        logger.info("otel-spans: closing, %s", reason)
        self._closing = asyncio.ensure_future(self._close())

    async def close(self) -> None:
        """Flush and stop everything ``start`` started; every later call awaits the same."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        self._stop_parts()
        if self.signals is None:
            return
        self._poll_safely(final=True)
        self._metrics_safely(final=True)
        if self._profiles is not None:
            self._profiles.close()
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
        for part in (self._metrics, self._dask_events, self._worker_memory):
            if part is not None:
                part.clear()
        self._metrics = self._dask_events = self._worker_memory = None
        if self._handing_over:
            return  # the copy taking over inherits the tracker, then clears it
        if self._tracker is not None:
            self._tracker.clear()
        self._tracker = None

    def stats(self) -> dict[str, Any]:
        """Pipeline counters; also served as the ``otel_spans_stats`` scheduler handler."""
        return plugin_stats(
            self._tracker,
            self._profiles,
            self.signals or self._closed_signals,
            internal_errors=self._internal_errors,
            hooks_disabled=int(self._budget.exhausted),
        )

    # -- periodic work --------------------------------------------------------------------
    def _poll_safely(self, final: bool = False) -> None:
        try:
            if self._tracker is not None and self.signals is not None:
                self._tracker.poll(final)
        except Exception:
            self._internal_error("poll")

    def _metrics_safely(self, final: bool = False) -> None:
        try:
            if self._metrics is not None and self.signals is not None:
                self._metrics.tick(final)
        except Exception:
            self._internal_error("metrics")

    # -- failures -----------------------------------------------------------------------
    def _internal_error(self, where: str) -> None:
        """Count and (rate-limited) log a bug of ours; Dask must never see it.

        A bug that repeats would cost an exception on every transition for the
        scheduler's life: once the :class:`ErrorBudget` is spent, the per-task hooks
        switch off for good (re-register the plugin to retry).
        """
        self._internal_errors += 1
        self._error_log.log(
            logging.ERROR, "otel-spans: internal error in %s (ignored)", where, exc_info=True
        )
        if not self._budget.spend():
            return
        logger.error(
            "otel-spans: %d internal errors within %.0fs (the latest in %s): stopped "
            "following tasks (transition, update_graph and log_event hooks) to protect "
            "the scheduler; no new spans, task records or Dask event logs from this copy. "
            "Metrics and exports of what was already tracked go on; register the plugin "
            "again to retry",
            self._budget.budget,
            self._budget.window,
            where,
        )
