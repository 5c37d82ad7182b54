"""The DAG inside a Dask span: task groups, sampled task runs, their phases and errors.

Dask side, on the scheduler's event loop (driven by :mod:`otel_spans.plugin`). Per
finished task the work is a few dict updates and one sampling decision; a task that is
kept leaves a :class:`PendingTask` (its span id and references), and its
:class:`TaskRecord` is built on the exporter thread. Per task group it keeps one
small :class:`_Group`; per-task state ends with the sampling decision (see
:mod:`otel_spans.sampling`), so memory is O(groups + kept tasks).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

from distributed.metrics import time

from otel_spans import ids, semconv
from otel_spans.records import (
    EventRecord,
    ExceptionRecord,
    GroupRecord,
    LinkRecord,
    LogEntry,
    PhaseRecord,
    TaskRecord,
    ns,
)
from otel_spans.sampling import CHILDREN, ERRED, RECOMPUTED, SLOWEST, Policy, TaskSampler

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import TaskGroup, TaskState

#: Most distinct workers remembered per group (the count saturates there).
_MAX_WORKERS = 10_000
#: Most transition events recorded on one erred task span.
_MAX_STORY_EVENTS = 50
_SEVERITY_ERROR = 17  # OTel SeverityNumber.ERROR
#: Most dependency keys recorded on a task span.
_MAX_DEPENDENCIES = 32


@dataclass(slots=True)
class SpanContextInfo:
    """What the DAG needs to know of the Dask span a task group belongs to."""

    uuid: str
    tags: tuple[str, ...]
    trace_id: int
    otel_span_id: int
    policy: Policy
    #: Erred tasks of this span whose story was recorded (bounded).
    stories: int = 0


@dataclass(slots=True)
class _Group:
    span: SpanContextInfo
    span_id: int
    memory: int = 0
    erred: int = 0
    workers: set[str] | None = field(default_factory=set)
    worker_count: int = 0
    exported: bool = False


def compute_seconds(startstops: Iterable[dict[str, Any]] | None) -> float:
    """Seconds a finished task spent computing, from the phases its worker reported."""
    total = 0.0
    for phase in startstops or ():
        if phase.get("action") == "compute":
            total += phase["stop"] - phase["start"]
    return total


def _phases(startstops: Iterable[dict[str, Any]]) -> tuple[PhaseRecord, ...]:
    return tuple(
        PhaseRecord(
            str(p.get("action", "?")),
            ns(p["start"]),
            ns(p["stop"]),
            str(p["source"]) if p.get("source") else None,
        )
        for p in startstops
        if "start" in p and "stop" in p
    )


@dataclass(slots=True)
class PendingTask:
    """A kept task run whose :class:`TaskRecord` is built later, on the exporter thread.

    A full record (phases, texts of the dependency keys, a frozen dataclass of 17 fields)
    costs about 25 µs; the loop would pay it for every task entering a group's slowest
    K, including those that drop out again. Here the loop only derives the span id
    (the exemplar of the task's duration points at it) and keeps references to values
    nobody changes after the transition: the key's text, dependency *keys* (never
    task states), and the transition's own ``kwargs`` dict, whose values are what the
    worker reported.
    """

    key: str
    prefix: str
    group: str
    trace_id: int
    span_id: int
    parent_span_id: int
    state: str
    attempt: int
    sampled_because: str
    #: Scheduler time of the transition: the span's time when the worker sent no phases.
    finished_at: float
    kwargs: dict[str, Any]
    dependencies: tuple[Any, ...]

    def build(
        self, *, exception: ExceptionRecord | None = None, events: tuple[EventRecord, ...] = ()
    ) -> TaskRecord:
        kwargs = self.kwargs
        phases = _phases(kwargs.get("startstops") or ())
        now = ns(self.finished_at)
        thread = kwargs.get("thread")
        return TaskRecord(
            key=self.key,
            prefix=self.prefix,
            group=self.group,
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_span_id=self.parent_span_id,
            state=self.state,
            worker=str(kwargs.get("worker") or ""),
            thread=thread if isinstance(thread, int) else None,
            nbytes=int(kwargs.get("nbytes") or 0),
            typename=str(kwargs.get("typename") or ""),
            attempt=self.attempt,
            sampled_because=self.sampled_because,
            start_ns=min((p.start_ns for p in phases), default=now),
            end_ns=max((p.end_ns for p in phases), default=now),
            phases=phases,
            dependencies=tuple(str(key) for key in self.dependencies),
            exception=exception,
            events=events,
        )


def exception_record(
    kwargs: dict[str, Any], max_length: int, *, messages: bool = True
) -> ExceptionRecord:
    """The exception of an erred task from the texts the worker sent (never unpickled).

    Without ``messages`` only the type is kept: message and traceback may quote data.
    """
    text = str(kwargs.get("exception_text") or "")[: max_length * 2]
    kind, _, rest = text.partition("(")
    kind = kind.strip()[:max_length] or "Exception"
    if not messages:
        return ExceptionRecord(type=kind, message="", stacktrace="")
    message = rest[:-1] if rest.endswith(")") else text
    if message[:1] in "'\"" and message[-1:] == message[:1]:
        message = message[1:-1]
    return ExceptionRecord(
        type=kind,
        message=message[:max_length],
        stacktrace=str(kwargs.get("traceback_text") or "")[:max_length],
    )


class DagTracker:
    """Task groups, sampling and error details of every Dask span."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        submit: Callable[[GroupRecord | TaskRecord | PendingTask], object],
        log: Callable[[LogEntry], object] | None,
        max_error_stories: int,
        max_length: int,
        exception_messages: bool = True,
    ):
        self.scheduler = scheduler
        self.submit = submit
        self.log = log
        self.max_error_stories = max_error_stories
        self.max_length = max_length
        self.exception_messages = exception_messages
        self.sampler: TaskSampler[PendingTask | TaskRecord] = TaskSampler()
        self._groups: dict[TaskGroup, _Group] = {}
        #: (Dask span uuid, group name) -> how many groups of that name the span had.
        self._names: dict[tuple[str, str], int] = {}
        #: Keys that were processing or in memory on a worker that died: key -> times.
        self._reruns: dict[Any, int] = {}

    def stats(self) -> dict[str, int]:
        """Sizes of the DAG state, to check it stays O(groups + kept tasks)."""
        return {
            "task_groups": len(self._groups),
            "held_task_spans": self.sampler.held(),
            "pending_reruns": len(self._reruns),
        }

    # -- the hot path ---------------------------------------------------------------------
    def group(self, tg: TaskGroup, span: SpanContextInfo) -> _Group:
        state = self._groups.get(tg)
        if state is None:
            n = self._names.get((span.uuid, tg.name), 0)
            self._names[(span.uuid, tg.name)] = n + 1
            parts: tuple[str | int, ...] = (span.uuid, "group", tg.name)
            state = self._groups[tg] = _Group(span, ids.span_id_for(*(parts + ((n,) if n else ()))))
        return state

    def lost(self, keys: Iterable[Any]) -> None:
        """Keys a dead worker was running or holding: their next run is a rerun."""
        for key in keys:
            self._reruns[key] = self._reruns.get(key, 0) + 1

    def task_finished(
        self,
        ts: TaskState,
        start: str,
        finish: str,
        kwargs: dict[str, Any],
        span: SpanContextInfo,
        duration: float,
    ) -> int:
        """Account for a finished task that computed for ``duration`` seconds
        (:func:`compute_seconds`); returns its task span id when it got one, else 0."""
        tg = ts.group
        group = self.group(tg, span)
        if finish == "memory":
            group.memory += 1
        else:
            group.erred += 1
        worker = kwargs.get("worker")
        if worker and group.workers is not None and len(group.workers) < _MAX_WORKERS:
            group.workers.add(worker)
        key = ts.key
        reruns = self._reruns.pop(key, 0) if self._reruns else 0
        must_keep = None
        if finish == "erred" and start == "processing":
            must_keep = ERRED
        elif reruns:
            must_keep = RECOMPUTED
        else:
            metadata = kwargs.get("metadata")
            if metadata and metadata.get(semconv.METADATA_CHILDREN):
                # Spans of user code hang under this task's span: it must exist.
                must_keep = CHILDREN
        policy = span.policy
        key_hash = zlib.crc32(str(key).encode("utf-8", "surrogatepass")) if policy.ratio else 0
        decision = self.sampler.offer(tg, span.trace_id, policy, duration, must_keep, key_hash)
        erred_here = must_keep == ERRED
        if decision is None and not erred_here:
            return 0
        reason = SLOWEST if decision == "hold" else (decision or "")
        pending = self._pending(ts, finish, kwargs, span, group, reruns + 1, reason)
        record: PendingTask | TaskRecord = pending
        if finish == "erred":
            # Built at once: the exception and the scheduler's story of the key are read
            # now, on the loop, and the erred-task log needs them too.
            record = self._erred_record(ts, kwargs, span, pending)
        if decision == "hold":
            self.sampler.hold(tg, span.trace_id, policy, duration, record)
        elif decision is not None:
            self.submit(record)
        if erred_here and self.log is not None:
            assert isinstance(record, TaskRecord)
            self.log(self._erred_log(record, kwargs, span, kept=decision is not None))
        return pending.span_id if decision is not None else 0

    def _pending(
        self,
        ts: TaskState,
        finish: str,
        kwargs: dict[str, Any],
        span: SpanContextInfo,
        group: _Group,
        attempt: int,
        reason: str,
    ) -> PendingTask:
        key = str(ts.key)
        return PendingTask(
            key=key,
            prefix=ts.prefix.name,
            group=ts.group.name,
            trace_id=span.trace_id,
            span_id=ids.span_id_for(span.uuid, "task", key, attempt),
            parent_span_id=group.span_id,
            state=finish,
            attempt=attempt,
            sampled_because=reason,
            finished_at=self.scheduler_time(),
            kwargs=kwargs,
            dependencies=tuple(dep.key for dep in islice(ts.dependencies, _MAX_DEPENDENCIES)),
        )

    def _erred_record(
        self, ts: TaskState, kwargs: dict[str, Any], span: SpanContextInfo, pending: PendingTask
    ) -> TaskRecord:
        exception = exception_record(kwargs, self.max_length, messages=self.exception_messages)
        events: tuple[EventRecord, ...] = ()
        if span.stories < self.max_error_stories:
            span.stories += 1
            events = self._story(ts.key)
        return pending.build(exception=exception, events=events)

    @staticmethod
    def scheduler_time() -> float:
        return time()

    def _story(self, key: Any) -> tuple[EventRecord, ...]:
        """The scheduler's transitions of ``key`` (searches its bounded transition log)."""
        events = []
        for entry in self.scheduler.story(key)[-_MAX_STORY_EVENTS:]:
            # (key, start, finish, recommendations, stimulus_id, timestamp)
            if len(entry) < 6:
                continue
            events.append(
                EventRecord(
                    semconv.EVENT_TRANSITION,
                    ns(entry[5]),
                    (
                        (semconv.DASK_TRANSITION_FROM, str(entry[1])),
                        (semconv.DASK_TRANSITION_TO, str(entry[2])),
                        (semconv.DASK_TRANSITION_STIMULUS, str(entry[4])),
                    ),
                )
            )
        return tuple(events)

    def _erred_log(
        self, record: TaskRecord, kwargs: dict[str, Any], span: SpanContextInfo, *, kept: bool
    ) -> LogEntry:
        exc = record.exception
        assert exc is not None
        return LogEntry(
            time_ns=record.end_ns,
            severity_number=_SEVERITY_ERROR,
            severity_text="ERROR",
            body=f"Task {record.key} erred: {exc.describe()}",
            attributes=(
                (semconv.DASK_TASK_KEY, record.key),
                (semconv.DASK_TASK_PREFIX, record.prefix),
                (semconv.DASK_WORKER_ADDRESS, record.worker),
                (semconv.EXCEPTION_TYPE, exc.type),
                *(((semconv.EXCEPTION_MESSAGE, exc.message),) if exc.message else ()),
            ),
            event_name=semconv.LOG_TASK_ERRED,
            trace_id=span.trace_id,
            span_id=record.span_id if kept else record.parent_span_id,
        )

    # -- at the export of a Dask span ----------------------------------------------------------
    def export_groups(
        self, groups: Iterable[TaskGroup], span: SpanContextInfo, fallback: float
    ) -> int:
        """Export the not yet exported groups (and their held task spans); returns the count."""
        exported = 0
        for tg in groups:
            state = self.group(tg, span)
            held, kept, dropped = self.sampler.flush(tg)
            for record in held:
                self.submit(record)
            if state.exported:
                continue
            state.exported = True
            exported += 1
            state.worker_count = len(state.workers or ())
            state.workers = None
            links = []
            for dep in list(tg.dependencies)[:128]:
                dep_state = self._groups.get(dep)
                if dep_state is not None:
                    links.append(
                        LinkRecord(
                            dep_state.span.trace_id,
                            dep_state.span_id,
                            ((semconv.DASK_LINK_KIND, semconv.LINK_KIND_DEPENDENCY),),
                        )
                    )
            start = tg.start or fallback
            self.submit(
                GroupRecord(
                    name=str(tg.name),
                    prefix=tg.prefix.name,
                    trace_id=span.trace_id,
                    span_id=state.span_id,
                    parent_span_id=span.otel_span_id,
                    start_ns=ns(start),
                    end_ns=ns(max(tg.stop, start)),
                    tasks=len(tg),
                    memory=state.memory,
                    erred=state.erred,
                    nbytes=int(tg.nbytes_total),
                    durations=tuple(sorted(tg.all_durations.items())),
                    workers=state.worker_count,
                    task_spans_kept=kept,
                    task_spans_dropped=dropped,
                    links=tuple(links),
                )
            )
        return exported
