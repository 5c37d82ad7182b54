"""The worker process's TracerProvider, its bounded export, and the count of task children.

OpenTelemetry has one global TracerProvider per process and it can be set only once,
so this state is per process, shared by every Worker in it (``LocalCluster(processes=
False)`` runs several) and reference-counted by :func:`acquire` / :meth:`Lease.release`.

**Precedence.** otel-spans sets the global provider only when none is set yet when the
first worker of the process starts. A provider the user set earlier (an earlier
preload, ``OTEL_PYTHON_TRACER_PROVIDER``, ``opentelemetry-instrument``) always wins:
otel-spans then only adds its child-counting processor to it (when it is an SDK
provider) and never exports the user's spans itself; parenting spans under tasks
works either way, because it lives in the context, not in the provider.

Our provider is never replaced once global (OTel forbids it): when the last worker of
the process closes, its exporter is flushed for at most ``shutdown-timeout`` and
detached, and the next worker started in the same process attaches a fresh one (with
its own settings) to the same provider. The resource therefore names the first worker
of the process, which is the worker itself in the usual one-worker-per-process setup.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_spans.config import Settings
from otel_spans.export.pipeline import call_with_deadline
from otel_spans.export.sdk import CountingSpanExporter, make_span_exporter
from otel_spans.settings import bounded

logger = logging.getLogger("otel_spans")


# -- children of running tasks ----------------------------------------------------------------
@dataclass(slots=True)
class RunningTask:
    """One run of a task whose span is the parent of spans user code starts in it."""

    trace_id: int
    span_id: int
    #: Spans started with this task's span as parent. Incremented without a lock: two
    #: threads starting children at the same instant may lose one increment, never
    #: both, so it is exact in the usual case and never 0 when there were children.
    children: int = 0


#: Task span id -> its running task. One process-wide registry: a span processor cannot
#: tell which Worker a span came from, and a task span id is unique to its task.
_running: dict[int, RunningTask] = {}


def begin_run(trace_id: int, span_id: int) -> RunningTask:
    run = _running[span_id] = RunningTask(trace_id, span_id)
    return run


def end_run(run: RunningTask) -> None:
    if _running.get(run.span_id) is run:
        del _running[run.span_id]


# -- export ---------------------------------------------------------------------------------
class _Export:
    """The SDK's BatchSpanProcessor with a bounded queue, and its losses counted.

    The SDK drops the *oldest* queued span when the queue is full and only logs a
    rate-limited warning; the queue length is looked at before each hand-off so that
    every such drop is counted.

    The processor (and its thread) starts with the first span to export: a worker that
    runs no task starting a span (a cluster started and closed again) costs no thread
    and no flush at close.
    """

    def __init__(self, settings: Settings):
        self.exporter = CountingSpanExporter(
            make_span_exporter(settings.traces.target, role="worker")
        )
        self.queue_size = settings.queue_size
        self.shutdown_timeout = settings.shutdown_timeout
        self._batch_size = min(settings.batch_size, settings.queue_size)
        self._export_timeout = bounded(settings.traces.target.timeout)
        self._batch_wait = settings.traces.batch_wait
        self.processor: BatchSpanProcessor | None = None
        self._queue: Sequence[Any] | None = None
        #: Orders the first span's start of the processor against close().
        self._start_lock = threading.Lock()
        self._drop_lock = threading.Lock()
        self.dropped = 0
        self.closed = False

    def _start(self) -> BatchSpanProcessor | None:
        """The processor, started once; None once closed (or if it cannot start)."""
        with self._start_lock:
            if self.processor is None and not self.closed:
                try:
                    # Every option explicit: the SDK reads no OTEL_BSP_* variable, so
                    # worker spans are batched as the scheduler's are, by otel-spans'
                    # settings (OTEL_BSP_SCHEDULE_DELAY is read through
                    # traces.batch-wait; docs/configuration.md).
                    processor = BatchSpanProcessor(
                        self.exporter,
                        max_queue_size=self.queue_size,
                        max_export_batch_size=self._batch_size,
                        schedule_delay_millis=self._batch_wait * 1000,
                        export_timeout_millis=self._export_timeout * 1000,
                    )
                except Exception:  # never into the task's code: its spans are dropped
                    logger.exception("otel-spans: the worker span processor did not start")
                    # once: not tried (and logged) again for every span that follows
                    self.closed = True
                    return None
                # Private in the SDK; without it drops go uncounted, nothing else changes.
                batch = getattr(processor, "_batch_processor", None)
                self._queue = getattr(batch, "_queue", None)
                self.processor = processor
            return self.processor

    def on_end(self, span: ReadableSpan) -> None:
        if not (span.context and span.context.trace_flags.sampled):
            return
        processor = self.processor or self._start()
        if processor is None or self.closed:
            self._dropped()
            return
        queue = self._queue
        if queue is not None and len(queue) >= self.queue_size:
            self._dropped()  # the SDK drops the oldest queued span for this one
        processor.on_end(span)

    def _dropped(self) -> None:
        with self._drop_lock:
            self.dropped += 1

    def queued(self) -> int:
        return len(self._queue) if self._queue is not None else 0

    def force_flush(self, timeout_millis: int) -> bool:
        processor = self.processor
        return processor.force_flush(timeout_millis) if processor is not None else True

    def close(self) -> None:
        """Flush for at most ``shutdown-timeout``, whatever the collector does; with no
        span ever exported, only the exporter is shut down (nothing is in flight)."""
        with self._start_lock:
            self.closed = True
            processor = self.processor
        if processor is not None:
            call_with_deadline(processor.shutdown, self.shutdown_timeout)
        else:
            try:
                self.exporter.shutdown()
            except Exception:
                logger.exception("otel-spans: stopping the worker span exporter failed")
        stats = self.stats()
        lost = stats["dropped"] + stats["failed"] + stats["unsent"]
        if lost:
            logger.warning(
                "otel-spans: %d spans started in tasks never reached the backend "
                "(%d dropped on a full queue or after close, %d failed to export, "
                "%d unsent at shutdown)",
                lost,
                stats["dropped"],
                stats["failed"],
                stats["unsent"],
            )

    def stats(self) -> dict[str, int]:
        queued = self.queued()
        return {
            "exported": self.exporter.counts.exported,
            "failed": self.exporter.counts.failed,
            "dropped": self.dropped,
            "queued": 0 if self.closed else queued,
            "unsent": queued if self.closed else 0,
        }


class WorkerSpanProcessor(SpanProcessor):
    """Counts the children of running tasks; exports when the provider is ours.

    ``on_start`` costs one dict lookup per span; ``on_end`` is the SDK's batch hand-off.
    """

    def __init__(self) -> None:
        self.export: _Export | None = None

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        parent = span.parent
        if parent is not None:
            run = _running.get(parent.span_id)
            if run is not None and run.trace_id == parent.trace_id:
                run.children += 1

    def on_end(self, span: ReadableSpan) -> None:
        export = self.export
        if export is not None:
            export.on_end(span)

    def shutdown(self) -> None:
        # The process is exiting (the provider's atexit hook): same bounded flush.
        export = self.export
        if export is not None and not export.closed:
            export.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        export = self.export
        return export.force_flush(timeout_millis) if export is not None else True


# -- the process-wide provider ------------------------------------------------------------------
class _Process:
    """What otel-spans installed in this process; guarded by ``_lock``."""

    def __init__(self) -> None:
        self.processor = WorkerSpanProcessor()
        #: The global provider when otel-spans set it, else None.
        self.provider: TracerProvider | None = None
        #: The user's SDK provider the processor was added to (only ever added once).
        self.adopted: object | None = None
        self.leases = 0


_lock = threading.Lock()
_process = _Process()


@dataclass
class Lease:
    """A worker's use of the process's tracing; :meth:`release` exactly once."""

    #: "otel-spans" (our provider exports), "user" (the user's provider does), or
    #: "none" (no provider: spans started in tasks are not recorded at all).
    provider: str
    _released: bool = False

    def stats(self) -> dict[str, int | str]:
        export = _process.processor.export
        counts: dict[str, int | str] = {"provider": self.provider}
        if export is not None and self.provider == "otel-spans":
            counts.update(export.stats())
        return counts

    def release(self) -> None:
        """Blocking (bounded by ``shutdown-timeout``): call it off the event loop."""
        with _lock:
            if self._released:
                return
            self._released = True
            _process.leases -= 1
            export = _process.processor.export if _process.leases == 0 else None
            if export is not None:
                _process.processor.export = None
        if export is not None:
            export.close()


def acquire(settings: Settings, resource: Callable[[], Resource]) -> Lease:
    """Make spans started in this process's tasks exported, and their parents counted."""
    with _lock:
        _process.leases += 1
        current = trace.get_tracer_provider()
        if isinstance(current, trace.ProxyTracerProvider) and settings.traces.target.enabled:
            current = _install(settings, resource)
        if current is _process.provider:
            if _process.processor.export is None:
                _process.processor.export = _Export(settings)
            return Lease("otel-spans")
        if isinstance(current, TracerProvider):
            if _process.adopted is not current:
                current.add_span_processor(_process.processor)
                _process.adopted = current
                logger.info("otel-spans: spans started in tasks go to the process's own provider")
            return Lease("user")
        return Lease("none" if isinstance(current, trace.ProxyTracerProvider) else "user")


def _install(settings: Settings, resource: Callable[[], Resource]) -> trace.TracerProvider:
    """Set our provider as the global one; what is global afterwards (another thread may win)."""
    limits = settings.record_limits
    provider = TracerProvider(
        # The scheduler's decision for the trace, made again alike (otel_spans.sampler):
        # never the SDK's own reading of OTEL_TRACES_SAMPLER.
        sampler=settings.traces.sampler.sdk_sampler(),
        resource=resource(),
        span_limits=SpanLimits(
            max_span_attribute_length=limits.attribute_length,
            max_attribute_length=limits.attribute_length,
            max_span_attributes=limits.attribute_count,
            max_event_attributes=limits.event_attribute_count,
            max_link_attributes=limits.link_attribute_count,
            max_events=limits.events,
            max_links=limits.links,
        ),
    )
    provider.add_span_processor(_process.processor)
    trace.set_tracer_provider(provider)
    current = trace.get_tracer_provider()
    if current is provider:
        _process.provider = provider
        logger.info("otel-spans: worker spans go to %s", settings.traces.target.describe())
    return current
