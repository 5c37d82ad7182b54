"""Task groups and sampled task runs of every Dask span, with their phases and errors.

Dask side, on the scheduler's event loop (driven by :mod:`otel_spans.scheduler.plugin`).
Per finished task the work is a few dict updates and one sampling decision; a task that
is kept leaves a :class:`~otel_spans.task_records.DeferredTask` (its span id and a copy of
what the worker reported, :mod:`otel_spans.scheduler.task_runs`), and its
:class:`TaskRecord` is built on the exporter thread. Per task group it keeps one small
:class:`~otel_spans.scheduler.group_spans.GroupState` (its span's record is built in
:mod:`otel_spans.scheduler.group_spans`); per-task state ends with the sampling
decision (see
:mod:`otel_spans.scheduler.sampling`), so memory is O(groups + kept tasks). What an
erred task carries (exception, story, log) is read by
:mod:`otel_spans.scheduler.erred_tasks`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from distributed.metrics import time

from otel_spans import ids, semconv
from otel_spans.names import clean
from otel_spans.records import LogEntry, MemoryRecord
from otel_spans.scheduler import erred_tasks, snapshots
from otel_spans.scheduler.group_spans import GroupState, group_record
from otel_spans.scheduler.sampling import (
    CHILDREN,
    ERRED,
    RECOMPUTED,
    SLOWEST,
    TaskSampler,
)
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.scheduler.task_runs import deferred_task
from otel_spans.scheduler.worker_clocks import WorkerClocks
from otel_spans.task_records import (
    DeferredTask,
    GroupRecord,
    TaskRecord,
    run_bounds,
)

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import Computation, TaskGroup, TaskState
    from distributed.spans import Span

#: Most distinct workers remembered per group (the count saturates there; runs on
#: other workers are counted in ``dask.task_group.workers_uncounted_runs``).
_MAX_WORKERS = 10_000
#: Most running tasks remembered as parents of Dask spans they opened (oldest
#: forgotten first, counted in ``stats()["parents_evicted"]``).
_MAX_PARENTS = 10_000
#: Most keys with an abandoned or lost run and not rerun yet, remembered as reruns
#: (oldest forgotten first, counted in ``stats()["reruns_evicted"]``).
_MAX_RERUNS = 10_000


class Tally(NamedTuple):
    """What ran of one task group, for the diagnosis at its root's export."""

    #: Runs that finished (in memory or erred); more than the group's tasks when some
    #: ran again.
    runs: int
    erred: int
    #: Compute seconds of its slowest successful run, and that run's key (cleaned).
    slowest_s: float
    slowest_key: str


class TaskGroups:
    """Task groups, sampling and error details of every Dask span."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        submit: Callable[[GroupRecord | TaskRecord | DeferredTask], object],
        log: Callable[[LogEntry], object] | None,
        max_error_stories: int,
        max_length: int,
        exception_messages: bool = True,
        exemplar: Callable[[SpanIdentity, str, float, int], object] | None = None,
        clocks: WorkerClocks | None = None,
    ):
        self.scheduler = scheduler
        #: Each worker's clock offset: task runs are exported on their worker's clock.
        self.clocks = clocks if clocks is not None else WorkerClocks()
        #: Told (span, prefix, compute seconds, task span id) of each held task span
        #: exported at its group's end: the duration histogram's exemplar may then point
        #: at it (a held span may still drop out before, so none is given earlier).
        self.exemplar = exemplar
        self.submit = submit
        self.log = log
        self.max_error_stories = max_error_stories
        self.max_length = max_length
        self.exception_messages = exception_messages
        self.sampler: TaskSampler[DeferredTask | TaskRecord] = TaskSampler()
        #: One per task group of a tracked or released span; a span's groups are
        #: forgotten when it leaves the released spans (``forget_span``).
        self._groups: dict[TaskGroup, GroupState] = {}
        #: (Dask span uuid, group name) -> how many groups of that name the span had
        #: (forgotten with the span's groups).
        self._names: dict[tuple[str, str], int] = {}
        #: Keys whose run was abandoned while processing (its worker died, it raised
        #: ``Reschedule``, it erred with retries left, its run went stale), that were
        #: retried after they erred, or whose result was lost with a worker: key ->
        #: runs before the next one. A key leaves when it finishes again or is
        #: forgotten; at most ``_MAX_RERUNS``. Read by the transition hook, which
        #: calls :meth:`forget_key` only while it holds a key.
        self.reruns: dict[Any, int] = {}
        #: Lost keys forgotten at ``_MAX_RERUNS`` before they reran.
        self.reruns_evicted = 0
        #: Parent tasks forgotten at ``_MAX_PARENTS`` before they finished.
        self.parents_evicted = 0
        #: Keys of running tasks that opened Dask spans of their own (insertion-ordered,
        #: bounded): their spans are parents, so they are kept like ``children``.
        self._parents: dict[Any, None] = {}
        #: Group spans not exported because their caller's trace is not sampled.
        self.unsampled = 0

    def stats(self) -> dict[str, int]:
        """Sizes of the DAG state, to check it stays O(groups + kept tasks)."""
        return {
            "task_groups": len(self._groups),
            "held_task_spans": self.sampler.held(),
            "pending_reruns": len(self.reruns),
            "reruns_evicted": self.reruns_evicted,
            "traces_counted": self.sampler.traces(),
            "parent_tasks": len(self._parents),
            "parents_evicted": self.parents_evicted,
            "worker_clocks": len(self.clocks),
            "worker_clocks_evicted": self.clocks.evicted,
        }

    # -- the hot path ---------------------------------------------------------------------
    def group(self, tg: TaskGroup, span: SpanIdentity) -> GroupState:
        state = self._groups.get(tg)
        if state is None:
            n = self._names.get((span.uuid, tg.name), 0)
            self._names[(span.uuid, tg.name)] = n + 1
            state = self._groups[tg] = GroupState(
                span, ids.task_group_span_id(span.uuid, tg.name, n)
            )
        return state

    def tally(self, tg: TaskGroup) -> Tally | None:
        """What ran of ``tg``: (runs finished, erred, slowest compute seconds, its key
        as text); None for a group no task of which finished here."""
        state = self._groups.get(tg)
        if state is None:
            return None
        key = clean(str(state.slowest_key), self.max_length) if state.slowest_key else ""
        return Tally(state.memory + state.erred, state.erred, state.slowest, key)

    def submitted_at(self, tg: TaskGroup, fed: list[Computation] | None = None) -> float | None:
        """When the computation that made ``tg`` was submitted
        (:func:`~otel_spans.scheduler.snapshots.submitted_at`: a scan of Dask's recent
        computations, or of ``fed``, those that fed its span), remembered for a tracked
        group: its record and its root's analysis both read it."""
        state = self._groups.get(tg)
        if state is not None and state.submitted >= 0:
            return state.submitted or None
        submitted = snapshots.submitted_at(self.scheduler, tg, fed)
        if state is not None:
            state.submitted = submitted or 0.0
        return submitted

    def submitted_in(self, span: Span) -> Callable[[TaskGroup], float | None]:
        """:meth:`submitted_at` for the groups of ``span``'s tree (a root's analysis
        reads each): Dask's recent computations are scanned once for all of them, at
        the first one not read yet, rather than once for each."""
        fed: list[Computation] | None = None

        def submitted(tg: TaskGroup) -> float | None:
            nonlocal fed
            state = self._groups.get(tg)
            if state is not None and state.submitted >= 0:
                return state.submitted or None
            if fed is None:
                fed = snapshots.fed_by(self.scheduler, set(span.traverse_groups()))
            return self.submitted_at(tg, fed)

        return submitted

    def keep_as_parent(self, key: Any) -> None:
        """The task ``key`` opened a Dask span that hangs under its span: keep that span."""
        self._parents[key] = None
        if len(self._parents) > _MAX_PARENTS:
            del self._parents[next(iter(self._parents))]
            self.parents_evicted += 1

    def lost(self, keys: Iterable[Any]) -> None:
        """Keys whose result a dead worker held: their next run is a rerun."""
        for key in keys:
            self.abandoned(key)

    def abandoned(self, key: Any) -> None:
        """A run of ``key`` ended without a result the scheduler keeps (it left
        ``processing`` or ``erred`` for ``released``), or its result was lost: the next
        run is attempt + 1, kept as ``recomputed`` (spans its earlier runs started hang
        under the task span the scheduler exports, which must therefore exist)."""
        self.reruns[key] = self.reruns.get(key, 0) + 1
        if len(self.reruns) > _MAX_RERUNS:
            del self.reruns[next(iter(self.reruns))]
            self.reruns_evicted += 1

    def forget_key(self, key: Any) -> None:
        """``key`` left the scheduler without rerunning: a later task of that key is
        a new task, not a recomputation."""
        self.reruns.pop(key, None)

    def forget_span(self, uuid: str, groups: Iterable[TaskGroup], trace_id: int | None) -> None:
        """A released span is forgotten: its groups (a later graph's dependency on one
        gets no link), and with a root (``trace_id``) its trace's task span budget."""
        for tg in groups:
            self._groups.pop(tg, None)
            self._names.pop((uuid, tg.name), None)
            self.sampler.flush(tg)
        if trace_id is not None:
            self.sampler.forget_trace(trace_id)

    def task_finished(
        self,
        ts: TaskState,
        start: str,
        finish: str,
        kwargs: dict[str, Any],
        span: SpanIdentity,
        duration: float,
    ) -> int:
        """Account for a finished task that computed for ``duration`` seconds
        (:func:`~otel_spans.scheduler.task_runs.compute_seconds`); returns its task span
        id when that span is exported now, else 0 (dropped, or held among its group's
        slowest: see ``exemplar``)."""
        tg = ts.group
        group = self._groups.get(tg)
        if group is None:
            group = self.group(tg, span)
        if finish == "memory":
            group.memory += 1
            if duration > group.slowest:
                group.slowest, group.slowest_key = duration, ts.key
        else:
            group.erred += 1
        worker = kwargs.get("worker")
        workers = group.workers
        if worker and workers is not None:
            if len(workers) < _MAX_WORKERS:
                workers.add(worker)
            elif worker not in workers:
                group.workers_uncounted_runs += 1
        # The run on its worker's clock, as its task span would be exported: the group
        # span covers it whether it is kept or not.
        offset = self.clocks.offset(worker)
        bounds = run_bounds(kwargs.get("startstops"), offset)
        if bounds is not None:
            if bounds[0] < group.first:
                group.first = bounds[0]
            if bounds[1] > group.last:
                group.last = bounds[1]
        key = ts.key
        reruns = self.reruns.pop(key, 0) if self.reruns else 0
        must_keep = None
        if finish == "erred" and start == "processing":
            must_keep = ERRED
        elif reruns:
            must_keep = RECOMPUTED
        else:
            metadata = kwargs.get("metadata")
            if (metadata and metadata.get(semconv.METADATA_CHILDREN)) or (
                self._parents and self._parents.pop(key, 0) is None
            ):
                # Spans of user code, or Dask spans it opened, hang under this task's
                # span: it must exist.
                must_keep = CHILDREN
        policy = span.policy
        if span.sampled:
            key_hash = zlib.crc32(str(key).encode("utf-8", "surrogatepass")) if policy.ratio else 0
            decision = self.sampler.offer(tg, span.trace_id, policy, duration, must_keep, key_hash)
        else:  # the caller's trace is not sampled: no task span, whatever happened
            decision = None
        erred_here = must_keep == ERRED
        if decision is None and not erred_here:
            return 0
        reason = SLOWEST if decision == "hold" else (decision or "")
        now = time()  # read only for a run that gets a span
        if bounds is None:  # a kept run without phases: its span is at ``now``
            group.first = min(group.first, now - offset)
            group.last = max(group.last, now - offset)
        pending = deferred_task(
            ts,
            kwargs,
            span,
            group.span_id,
            (finish, reruns + 1, reason),
            now,
            offset,
            self.max_length,
        )
        record: DeferredTask | TaskRecord = pending
        if finish == "erred":
            # Built at once: the exception and the scheduler's story of the key are read
            # now, on the loop, and the erred-task log needs them too.
            record = erred_tasks.erred_record(
                self.scheduler,
                ts,
                kwargs,
                span,
                pending,
                max_length=self.max_length,
                messages=self.exception_messages,
                max_stories=self.max_error_stories,
            )
        if decision == "hold":
            self.sampler.hold(tg, span.trace_id, policy, duration, record)
        elif decision is not None:
            self.submit(record)
        if erred_here:
            assert isinstance(record, TaskRecord) and record.exception is not None
            kind = record.exception.type
            if group.error_type != kind:
                group.error_type = kind if not group.error_type else semconv.ERROR_TYPE_OTHER
            if self.log is not None:
                kept = decision is not None
                self.log(
                    erred_tasks.erred_log(record, span.trace_id, kept=kept, sampled=span.sampled)
                )
        return pending.span_id if decision is not None and decision != "hold" else 0

    def bounds(self, tg: TaskGroup) -> tuple[float, float] | None:
        """First start and last stop of the group's finished runs, on their workers'
        clocks (the times of their task spans); None when no run finished."""
        state = self._groups.get(tg)
        if state is None or state.last < state.first:
            return None
        return state.first, state.last

    # -- at the export of a Dask span ----------------------------------------------------------
    def export_groups(
        self,
        groups: Iterable[TaskGroup],
        span: SpanIdentity,
        fallback: float,
        footprint: Callable[[TaskGroup], MemoryRecord] | None = None,
        fed: list[Computation] | None = None,
    ) -> None:
        """Export the not yet exported groups (and their held task spans), each with
        its ``footprint`` when given (``fed``: the computations that fed their span,
        :func:`~otel_spans.scheduler.snapshots.fed_by`, when read already)."""
        for tg in groups:
            state = self.group(tg, span)
            held, kept, dropped = self.sampler.flush(tg)
            for duration, record in held:
                self.submit(record)
                if self.exemplar is not None and span.sampled:
                    self.exemplar(span, tg.prefix.name, duration, record.span_id)
            if state.exported:
                continue
            state.exported = True
            if not span.sampled:
                state.workers = None
                self.unsampled += 1
                continue
            state.worker_count = len(state.workers or ())
            state.workers = None
            self.submit(
                group_record(
                    tg,
                    state,
                    span,
                    self._groups,
                    bounds=self.bounds(tg),
                    fallback=fallback,
                    kept=kept,
                    dropped=dropped,
                    max_length=self.max_length,
                    footprint=footprint,
                    submitted=self.submitted_at(tg, fed) or 0.0,
                )
            )
