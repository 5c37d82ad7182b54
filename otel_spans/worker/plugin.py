"""The worker side: spans started by code inside a task become children of the task's span.

Enabled by the worker preload (``distributed.worker.preload: [otel_spans]``, which
installs :class:`OtelSpansWorkerPlugin`), or on a running cluster with
``client.register_plugin(OtelSpansWorkerPlugin())``. A Nanny's preload only forwards
``otel_spans`` to the preloads of the worker process it starts, where the work is.

**Mechanism.** ``Worker.execute`` (the ``BaseWorker`` method the worker state machine
awaits once per task, in an asyncio task of its own) is wrapped. The wrapper makes
the task's span the current OTel span in that asyncio task's contextvars, then awaits
the original. distributed itself propagates contextvars from there into the task: it
runs the function through ``run_in_executor_with_context``, precisely so that its own
span annotation reaches code in the task. So the OTel context follows the path Dask's
span annotation takes: to thread-pool tasks (``submit``, ``map``, delayed,
``map_blocks``, ``map_partitions``), through ``secede``/``rejoin``, and to
``async def`` tasks, which run inside ``execute`` itself.

Nothing else changes for task code: ``dask.get_annotations()``, the worker's state,
logging and warnings are what they are without otel-spans (Dask's own tests check it).
Work a task submits needs no annotation of ours either: the client sends the key of
the submitting task with every graph, and the scheduler hangs Dask spans opened there
under that task's span (:mod:`otel_spans.scheduler.callers`).

The task's span id is derived from its Dask span (``ts.span_id``, which the scheduler
sends with each task) and the root of that span's tree, which the ``span`` annotation
lists; a task without one runs in Dask's default span, a root of its own.

Alternatives considered: a custom OTel runtime context keyed by ``thread_state.key``
costs nothing until a span starts, but replaces a process-global OTel singleton and
misses async tasks; wrapping the executor cannot see which task it runs. Executors
that are not thread pools get no contextvars from Dask, so tasks sent to them get no
context (pass :func:`otel_spans.current_traceparent` explicitly).

The count of spans started under the task goes back to the scheduler in the task's
metadata (:data:`METADATA_CHILDREN`), sent with the task-finished message, and only
when there were some.

**Clocks.** The worker reports a task's phases shifted by its ``scheduler_delay``,
while spans its code starts keep the worker's clock. Before a task runs with a
``scheduler_delay`` other than the last one announced, the wrapper logs it as a Dask
event (:data:`CLOCK_EVENT_TOPIC`); the scheduler undoes the shift, so that the task's
span is on the clock its code's spans use (:mod:`otel_spans.scheduler.worker_clocks`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin
from opentelemetry import context as otel_context

from otel_spans import semconv, task_trace
from otel_spans.config import Settings
from otel_spans.error_budget import ErrorBudget
from otel_spans.export.resource import build_resource
from otel_spans.sampler import TraceSampler
from otel_spans.throttle import Throttle
from otel_spans.worker import logs as worker_logs
from otel_spans.worker import tracing as worker_tracing

if TYPE_CHECKING:
    from distributed import Nanny, Worker
    from distributed.worker_state_machine import TaskState as WorkerTaskState
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource

logger = logging.getLogger("otel_spans")

#: Task metadata key: how many spans user code started with the task's span as parent.
METADATA_CHILDREN = semconv.METADATA_CHILDREN
#: Dask event topic of the worker's ``scheduler_delay`` (``{"delay": seconds}``).
CLOCK_EVENT_TOPIC = semconv.CLOCK_EVENT_TOPIC
#: Name of the plugin in ``Worker.plugins``.
PLUGIN_NAME = "otel-spans"
_PRELOAD = "otel_spans"
_ERROR_LOG_EVERY = 60.0

Execute = Callable[..., Awaitable[Any]]


class OtelSpansWorkerPlugin(WorkerPlugin):
    """Trace context into tasks, and export of the spans they start.

    ``setup`` and ``teardown`` mirror each other: the provider lease and the
    ``execute`` wrapper are taken and given back in reverse order.

    A worker runs one copy at a time. Registering it again under the same name makes
    distributed tear the old copy down first; a copy registered under another name
    takes over in ``setup``: the running copy is unhooked, its leases given back and
    it leaves ``Worker.plugins``. Unregistering, or closing the worker, tears it down.
    """

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self._lease: worker_tracing.Lease | None = None
        self._logs: worker_logs.LogLease | None = None
        self._wrapper: Execute | None = None
        #: What ``execute`` was before us, when it was already shadowed on the instance.
        self._shadowed: Execute | None = None
        self._internal_errors = 0
        self._sampler = TraceSampler()
        self._error_log = Throttle(_ERROR_LOG_EVERY)
        self._budget = ErrorBudget()
        #: Set once the budget is spent: ``execute`` passes every task straight through.
        self._hooks_off = False
        #: The ``scheduler_delay`` last announced to the scheduler (None: none yet).
        self._announced_delay: float | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def setup(self, worker: Worker) -> None:
        """Resolve the settings (ConfigError names a bad key) and hook the worker."""
        settings = Settings.from_config()
        replaced = self._take_over(worker)
        if not settings.enabled:
            _release_off_loop(replaced)
            logger.info("otel-spans: disabled on worker %s", worker.id)
            return

        def resource() -> Resource:
            return build_resource(
                settings, instance_id=worker.id, scheduler_address=worker.scheduler.address
            )

        self._lease = worker_tracing.acquire(settings, resource)
        self._logs = worker_logs.acquire(
            settings,
            lambda: resource().attributes,
            _task_span_of_key(worker, settings.traces.sampler),
        )
        # After this copy's leases are taken, the old ones are never the process's
        # last: giving them back releases nothing that blocks.
        _release_off_loop(replaced)
        # The trace's one sampling decision, as the scheduler makes it.
        self._sampler = settings.traces.sampler
        self._shadowed = worker.__dict__.get("execute")
        self._wrapper = self._wrap(worker, worker.execute)
        setattr(worker, "execute", self._wrapper)  # noqa: B010 (mypy forbids method-assign)

    def _take_over(self, worker: Worker) -> list[Callable[[], None]]:
        """Unhook every other copy on ``worker``; returns their releases, to call later."""
        releases: list[Callable[[], None]] = []
        for name, other in list(worker.plugins.items()):
            if isinstance(other, OtelSpansWorkerPlugin) and other is not self:
                logger.info(
                    "otel-spans: a new copy was registered on worker %s; tearing down the "
                    "running one (plugin %r)",
                    worker.id,
                    name,
                )
                del worker.plugins[name]
                releases.extend(other._unhook(worker))
        return releases

    def _unhook(self, worker: Worker) -> list[Callable[[], None]]:
        """Give ``execute`` back; returns the releases of the leases (blocking calls)."""
        lease, self._lease = self._lease, None  # a wrapper still in a chain now passes through
        if self._wrapper is not None and worker.__dict__.get("execute") is self._wrapper:
            if self._shadowed is not None:  # someone wrapped it before us: give theirs back
                setattr(worker, "execute", self._shadowed)  # noqa: B010
            else:  # the class's method shows through again
                del worker.execute
        self._wrapper = None
        logs, self._logs = self._logs, None
        return [part.release for part in (logs, lease) if part is not None]

    async def teardown(self, worker: Worker) -> None:
        """Unhook the worker, then flush (off the event loop, bounded)."""
        for release in self._unhook(worker):
            await asyncio.get_running_loop().run_in_executor(None, release)

    def stats(self) -> dict[str, object]:
        """Export counters of this process's worker spans and Python log records, and
        errors caught here."""
        counts: dict[str, object] = {"provider": "none"}
        if self._lease is not None:
            counts.update(self._lease.stats())
        counts["internal_errors"] = self._internal_errors
        counts["hooks_disabled"] = int(self._hooks_off)
        if self._logs is not None:
            counts["python_logs"] = self._logs.stats()
        return counts

    # -- per task -----------------------------------------------------------------------------
    def _wrap(self, worker: Worker, original: Execute) -> Execute:
        prepare = self._prepare
        tasks = worker.state.tasks

        async def execute(key: Any, *, stimulus_id: str) -> Any:
            if self._hooks_off:
                return await original(key, stimulus_id=stimulus_id)
            try:
                # Read as Worker.execute reads it, in the same loop iteration: the shift
                # of this run's compute phase.
                if worker.scheduler_delay != self._announced_delay:
                    self._announce_delay(worker)
                prepared = prepare(tasks.get(key), key)
            except Exception:
                self._internal_error()
                prepared = None
            if prepared is None:
                return await original(key, stimulus_id=stimulus_id)
            ts, task_context, run = prepared
            token = otel_context.attach(task_context)
            try:
                result = await original(key, stimulus_id=stimulus_id)
            finally:
                otel_context.detach(token)
                worker_tracing.end_run(run)
            try:
                # The state machine builds the task-finished message from ts.metadata
                # after this returns. (Erred tasks send no metadata; the scheduler keeps
                # their spans anyway.)
                if run.children:
                    ts.metadata[METADATA_CHILDREN] = run.children
                else:
                    ts.metadata.pop(METADATA_CHILDREN, None)
            except Exception:
                self._internal_error()
            return result

        return execute

    def _announce_delay(self, worker: Worker) -> None:
        """Tell the scheduler the ``scheduler_delay`` the worker now shifts phases by."""
        try:
            delay = worker.scheduler_delay
            self._announced_delay = delay
            worker.log_event(CLOCK_EVENT_TOPIC, {"delay": delay})
        except Exception:
            self._internal_error()

    def _prepare(
        self, ts: WorkerTaskState | None, key: Any
    ) -> tuple[WorkerTaskState, Context, worker_tracing.RunningTask] | None:
        """What a task runs with: its context and its children counter."""
        if ts is None or self._lease is None:
            return None
        annotations = ts.annotations or {}
        sc = task_trace.task_span_context(key, annotations, ts.span_id, self._sampler)
        if sc is None:
            return None
        run = worker_tracing.begin_run(sc.trace_id, sc.span_id)
        return ts, task_trace.task_context(sc, annotations), run

    def _internal_error(self) -> None:
        """Count and (rate-limited) log a bug of ours; once the :class:`ErrorBudget` is
        spent, tasks run without otel-spans on this copy (re-register it to retry)."""
        self._internal_errors += 1
        self._error_log.log(
            logging.ERROR,
            "otel-spans: internal error around a task's execution (ignored)",
            exc_info=True,
        )
        if not self._budget.spend():
            return
        self._hooks_off = True
        logger.error(
            "otel-spans: %d internal errors within %.0fs on worker tasks: stopped wrapping "
            "task execution to protect the worker; tasks run without a span context from "
            "this copy. Register the plugin again to retry",
            self._budget.budget,
            self._budget.window,
        )


def _release_off_loop(releases: list[Callable[[], None]]) -> None:
    """Run blocking releases in the event loop's executor (inline when there is none)."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    for release in releases:
        if loop is None:
            release()
        else:
            loop.run_in_executor(None, release)


def _task_span_of_key(
    worker: Worker, sampler: TraceSampler
) -> Callable[[object], tuple[int, int, bool] | None]:
    """What a Python log record naming a task key of ``worker`` is about: its task span,
    and whether its trace is sampled."""
    tasks = worker.state.tasks

    def about(value: Any) -> tuple[int, int, bool] | None:
        try:
            ts = tasks.get(value)
        except TypeError:  # a tuple holding something unhashable
            return None
        if ts is None:
            return None
        sc = task_trace.task_span_context(value, ts.annotations or {}, ts.span_id, sampler)
        return None if sc is None else (sc.trace_id, sc.span_id, sc.trace_flags.sampled)

    return about


# -- the preload ------------------------------------------------------------------------------
def setup_server(server: Any) -> Awaitable[Any] | None:
    """``dask_setup`` for a Worker (install the plugin) or a Nanny (forward the preload)."""
    from distributed import Nanny, Worker

    if isinstance(server, Worker):
        return server.plugin_add(OtelSpansWorkerPlugin(), name=PLUGIN_NAME)
    if isinstance(server, Nanny):
        forward_preload(server)
        return None
    logger.debug("otel-spans: nothing to install on %s", type(server).__name__)
    return None


def forward_preload(nanny: Nanny) -> None:
    """Make the worker process the Nanny starts run the ``otel_spans`` preload too.

    A Nanny's own process runs no tasks; ``Nanny.preload`` is the list it hands to the
    worker process (from ``distributed.worker.preload`` unless given explicitly).
    """
    preload = nanny.preload
    current = [preload] if isinstance(preload, str) else list(preload or [])
    if _PRELOAD in current:
        return
    nanny.preload = [*current, _PRELOAD]
    argv = nanny.preload_argv
    if argv and not isinstance(argv[0], str):
        # One argv per preload: keep them aligned.
        nanny.preload_argv = [*argv, []]
