"""Plain records of task groups and sampled task runs, handed from ``scheduler/`` to
``telemetry/`` like those of :mod:`otel_spans.records`.

Kept apart from the span, metric and log records because a task run has two forms:
the :class:`DeferredTask` the event loop copies cheaply, and the :class:`TaskRecord`
built from it later on the exporter thread. Times as in :mod:`otel_spans.records`.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_spans.names import clean
from otel_spans.records import LinkRecord, MemoryRecord, SpanEventRecord, ns


@dataclass(slots=True)
class GroupRecord:
    """One task group of a Dask span, exported with (or after) its span."""

    name: str
    prefix: str
    trace_id: int
    span_id: int
    parent_span_id: int
    start_ns: int
    end_ns: int
    tasks: int
    memory: int
    erred: int
    nbytes: int
    #: Summed durations by action (compute, transfer, disk-read...), seconds.
    durations: tuple[tuple[str, float], ...]
    workers: int
    task_spans_kept: int
    task_spans_dropped: int
    links: tuple[LinkRecord, ...] = ()
    #: When its computation was submitted (epoch ns); 0 when unknown.
    submitted_ns: int = 0
    #: Dependency links left out beyond the most built (OTLP's dropped_links_count).
    links_dropped: int = 0
    #: Its memory (spilled bytes: its prefix's in its Dask span); None when not read.
    footprint: MemoryRecord | None = None
    #: The type its raising tasks raised (one type), ``_OTHER`` (several), or "" (none
    #: raised here: its erred tasks erred because a dependency did).
    error_type: str = ""
    #: Task runs on a worker not counted in ``workers`` (it saturated).
    workers_uncounted_runs: int = 0


@dataclass(slots=True)
class PhaseRecord:
    """One ``startstops`` entry of a task: compute, transfer, disk-read..."""

    action: str
    start_ns: int
    end_ns: int
    #: For transfers: the worker the data came from.
    source: str | None = None


@dataclass(frozen=True, slots=True)
class ExceptionRecord:
    type: str
    #: Empty when not captured (``capture.exceptions: type``) or when there was none.
    message: str
    stacktrace: str

    def describe(self) -> str:
        """``Type: message``, or the type alone when there is no message."""
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass(slots=True)
class TaskRecord:
    """One sampled run of one task."""

    key: str
    prefix: str
    group: str
    trace_id: int
    span_id: int
    parent_span_id: int
    state: str
    worker: str
    thread: int | None
    nbytes: int
    typename: str
    attempt: int
    sampled_because: str
    start_ns: int
    end_ns: int
    phases: tuple[PhaseRecord, ...] = ()
    #: Keys of its dependencies (at most 32, for offline critical paths).
    dependencies: tuple[str, ...] = ()
    exception: ExceptionRecord | None = None
    events: tuple[SpanEventRecord, ...] = ()
    #: Dependencies left out of ``dependencies``.
    dependencies_dropped: int = 0
    #: Events left out of ``events`` (OTLP's dropped_events_count).
    events_dropped: int = 0


#: One ``startstops`` entry as the worker reported it: (action, start, stop, source),
#: Dask's float seconds; copied out of the transition's message on the event loop.
RawPhase = tuple[str, float, float, str | None]


def raw_phases(startstops: object) -> tuple[RawPhase, ...]:
    """Copy a worker's ``startstops`` list into plain tuples (cheap: a handful of phases).

    Bad entries (not a mapping, no start or stop) are skipped: this is worker input.
    """
    out: list[RawPhase] = []
    for p in startstops if isinstance(startstops, list | tuple) else ():
        if isinstance(p, dict) and "start" in p and "stop" in p:
            source = p.get("source")
            out.append(
                (str(p.get("action", "?")), p["start"], p["stop"], str(source) if source else None)
            )
    return tuple(out)


_NUMBERS = (float, int)


def run_bounds(startstops: object, offset: float) -> tuple[float, float] | None:
    """(first start, last stop) of a worker's ``startstops``, minus ``offset``: the
    interval of the run's task span on the worker's clock (:meth:`DeferredTask.build`
    exports the same values, as nanoseconds); None without phases.

    The entries :func:`raw_phases` copies count, without copying them (it runs for
    every finished task, kept or not, to bound its group's span); times that are not
    numbers are skipped here (the task's record fails alone, on the exporter thread).
    """
    first = last = None
    # Tuples of types, not ``float | int``: this runs for every finished task, and a
    # union is the slower ``isinstance`` argument.
    for p in startstops if isinstance(startstops, (list, tuple)) else ():
        if isinstance(p, dict) and "start" in p and "stop" in p:
            start, stop = p["start"], p["stop"]
            if not isinstance(start, _NUMBERS) or not isinstance(stop, _NUMBERS):
                continue
            if first is None or start < first:
                first = start
            if last is None or stop > last:
                last = stop
    if first is None or last is None:
        return None
    return first - offset, last - offset


@dataclass(slots=True)
class DeferredTask:
    """A kept task run whose :class:`TaskRecord` is built later, on the exporter thread.

    A full record (phases as nanoseconds, texts of the dependency keys, a
    dataclass of 17 fields) is several times dearer than this copy; the loop would pay
    it for every task entering a group's slowest K, including those that drop out
    again. The loop copies what it must into plain values (the span id, the worker's
    report of the run, the dependency keys) and :meth:`build` does the rest. Nothing
    here refers to a live scheduler object or to the transition's own message.
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
    phases: tuple[RawPhase, ...]
    worker: str
    thread: int | None
    nbytes: int
    typename: str
    #: Dask keys (strings or tuples of plain values) of up to 32 dependencies.
    dependencies: tuple[object, ...]
    #: Seconds subtracted from the reported phases (and from ``finished_at``) to put the
    #: run on its worker's clock: the worker's ``scheduler_delay``
    #: (:mod:`otel_spans.scheduler.worker_clocks`); 0 keeps the scheduler's clock.
    clock_offset: float = 0.0
    #: Dependencies beyond those 32.
    dependencies_dropped: int = 0

    def build(
        self,
        *,
        exception: ExceptionRecord | None = None,
        events: tuple[SpanEventRecord, ...] = (),
        events_dropped: int = 0,
    ) -> TaskRecord:
        offset = self.clock_offset
        phases = tuple(
            PhaseRecord(action, ns(start - offset), ns(stop - offset), source)
            for action, start, stop, source in self.phases
        )
        now = ns(self.finished_at - offset)
        return TaskRecord(
            key=self.key,
            prefix=self.prefix,
            group=self.group,
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_span_id=self.parent_span_id,
            state=self.state,
            worker=self.worker,
            thread=self.thread,
            nbytes=self.nbytes,
            typename=self.typename,
            attempt=self.attempt,
            sampled_because=self.sampled_because,
            start_ns=min((p.start_ns for p in phases), default=now),
            end_ns=max((p.end_ns for p in phases), default=now),
            phases=phases,
            dependencies=tuple(clean(str(key)) for key in self.dependencies),
            exception=exception,
            events=events,
            dependencies_dropped=self.dependencies_dropped,
            events_dropped=events_dropped,
        )
