"""What the report's analysis consumes: a finished workflow as plain, frozen values.

These types say nothing about where the data came from (OTLP/JSON files, a live
scheduler, a test): loaders build them, the analyses of :mod:`otel_spans.analysis` read them,
the renderers draw them. Times are integer epoch nanoseconds everywhere, like the rest
of the package; durations only become float seconds in analysis results.

Validation is limited to what would silently corrupt the analysis (an interval that
ends before it starts, a negative thread count) and raises ``ValueError`` at
construction, naming the offending value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

#: A Dask span as the renderers take it: ``(tags root first, start_ns, end_ns)``.
SpanTimes = tuple[tuple[str, ...], int, int]


class DaskSpan(NamedTuple):
    """A named :data:`SpanTimes`; a plain tuple works wherever this is accepted."""

    name: tuple[str, ...]
    start_ns: int
    end_ns: int


def _check_interval(what: str, start_ns: int, end_ns: int) -> None:
    if end_ns < start_ns:
        raise ValueError(f"{what} ends before it starts: start_ns={start_ns}, end_ns={end_ns}")


@dataclass(frozen=True, slots=True)
class Phase:
    """One step a worker took before computing a task, typically fetching an input."""

    #: What happened: ``"transfer"`` (gather from a peer), ``"disk-read"``, ...
    action: str
    start_ns: int
    end_ns: int
    #: Worker address the data came from; ``None`` when unknown or local (disk).
    source: str | None = None

    def __post_init__(self) -> None:
        _check_interval(f"phase {self.action!r}", self.start_ns, self.end_ns)


@dataclass(frozen=True, slots=True)
class TaskRun:
    """One execution of one task on one worker thread.

    A key that ran twice (its worker died, it was recomputed) is two ``TaskRun``.
    """

    key: str
    #: Key prefix (``"read_parquet"``); the low-cardinality name bottlenecks group by.
    prefix: str
    #: Task group name (prefix plus token): one ``compute``/``persist`` of one layer.
    group: str
    #: Worker address.
    worker: str
    #: Thread ident on the worker; ``None`` when the source did not record it.
    thread: int | None
    #: Start of the compute phase only; incoming transfers are in :attr:`transfers`.
    start_ns: int
    end_ns: int
    #: Keys this task depends on; keys outside the workflow are allowed and ignored.
    dependencies: tuple[str, ...] = ()
    #: Phases before compute that made its inputs local, in any order.
    transfers: tuple[Phase, ...] = ()
    #: Final state: ``"memory"`` (computed) or ``"erred"``.
    state: str = "memory"
    nbytes: int = 0
    #: Tags of the Dask span the task ran in, root first; empty when unknown.
    span_name: tuple[str, ...] = ()
    #: Tasks this run stands for: 1 for a task's run; a whole task group's task count
    #: when the analysis is group-level (task spans were sampled), so counts stay true.
    count: int = 1
    #: When the client submitted the computation that created the task; ``None`` when
    #: unknown. A task submitted after its inputs were ready waited for the client.
    submitted_ns: int | None = None

    def __post_init__(self) -> None:
        if self.end_ns < self.start_ns:
            _check_interval(f"task {self.key!r}", self.start_ns, self.end_ns)

    @property
    def compute_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class ThreadInterval:
    """Threads that were available to run tasks between two instants.

    Intervals add up where they overlap, so a list can hold one interval per worker
    lifetime (workers joining and leaving) or a step function of cluster totals.
    """

    start_ns: int
    end_ns: int
    nthreads: int

    def __post_init__(self) -> None:
        _check_interval("thread interval", self.start_ns, self.end_ns)
        if self.nthreads < 0:
            raise ValueError(f"thread interval has nthreads={self.nthreads}, must be >= 0")


@dataclass(frozen=True, slots=True)
class Workflow:
    """Everything that ran between two instants and what the cluster offered meanwhile."""

    #: Shown as the report title; usually the root Dask span's name.
    name: str
    #: The window wall time, efficiency and idle time are measured over.
    start_ns: int
    end_ns: int
    tasks: tuple[TaskRun, ...] = ()
    #: Threads available over time; empty when unknown (efficiency is then ``None``).
    threads: tuple[ThreadInterval, ...] = ()
    #: Seconds by activity from the workers' fine performance metrics
    #: (``{"thread-cpu": 3.2, "thread-noncpu": 0.4, ...}``); may be empty.
    activity_seconds: Mapping[str, float] = field(default_factory=dict)
    #: Compute time of all its tasks as the scheduler summed it (every task, sampled
    #: or not); ``None`` to sum :attr:`tasks` instead.
    compute_seconds: float | None = None

    def __post_init__(self) -> None:
        _check_interval(f"workflow {self.name!r}", self.start_ns, self.end_ns)

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def task_count(self) -> int:
        """Tasks of the workflow, whatever the granularity of :attr:`tasks`."""
        return sum(task.count for task in self.tasks)
