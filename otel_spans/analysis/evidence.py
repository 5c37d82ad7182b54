"""What a diagnosis reads: a finished workflow's evidence as plain, frozen values.

The scheduler (:mod:`otel_spans.scheduler.root_analysis`, from live task groups and
worker metrics) and the report (:mod:`otel_spans.report.diagnose`, from the exported
spans) each build one :class:`Evidence`; :func:`otel_spans.analysis.diagnosis.diagnose`
reads nothing else, so both sides run the same rules over the same kind of numbers.
Everything is at task-group granularity (the finest the scheduler keeps in full),
plus the critical path at whatever granularity the source had.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from otel_spans.analysis.critical_path import CriticalPath
from otel_spans.semconv import IDLE_ACTIVITY

#: Worker activities (Dask's fine performance metrics, context ``execute``) that are
#: spilling: writing results to disk and reading them back, with their (de)compression.
SPILL_ACTIVITIES = ("disk-read", "disk-write")
#: Activities of a task's thread: on CPU, and off it (waiting on I/O, a lock, the GIL).
CPU_ACTIVITY = "thread-cpu"
NONCPU_ACTIVITY = "thread-noncpu"


@dataclass(frozen=True, slots=True)
class GroupEvidence:
    """One task group of the workflow."""

    #: Full group name (prefix and token), as on the group span.
    name: str
    prefix: str
    #: Tasks in the group.
    tasks: int
    #: Task runs that finished (in memory or erred): more than :attr:`tasks` when some
    #: ran again (recomputed after a lost worker); 0 when unknown.
    runs: int = 0
    erred: int = 0
    #: Summed seconds by action of the phases its tasks reported (Dask's
    #: ``TaskGroup.all_durations``: ``compute``, ``transfer``, ``disk-read`` ...).
    durations: Mapping[str, float] = field(default_factory=dict)
    #: First compute start and last compute end, epoch ns (the group's step on a
    #: group-level critical path).
    start_ns: int = 0
    end_ns: int = 0
    #: Compute seconds of its slowest successful task, and that task's key; None when
    #: unknown.
    slowest_s: float | None = None
    slowest_key: str | None = None
    #: Typical compute seconds of its other tasks (median when each run is known,
    #: else their mean); None when unknown or the group has one task.
    typical_s: float | None = None
    #: The Dask span (joined tags) whose tasks these are; "" when unknown.
    span: str = ""
    #: Most bytes of its results held in memory at once (the scheduler's ``nbytes``);
    #: 0 when unknown (a trace written before memory was recorded).
    peak_bytes: int = 0

    @property
    def compute_s(self) -> float:
        return self.durations.get("compute", 0.0)

    @property
    def mean_s(self) -> float:
        """Mean compute seconds per run."""
        return self.compute_s / max(self.runs, self.tasks, 1)


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the rules of :mod:`.diagnosis` weigh, for one finished workflow."""

    #: The workflow (root Dask span) name, joined tags.
    name: str
    wall_s: float
    #: The critical path (task or task-group granularity).
    path: CriticalPath
    groups: tuple[GroupEvidence, ...] = ()
    #: Worker thread-seconds by activity over the whole workflow, idle included
    #: (``"idle or other spans"``); empty when the metrics did not arrive.
    activities: Mapping[str, float] = field(default_factory=dict)
    #: The same per Dask span of the workflow (joined tags), each span's own seconds.
    span_activities: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: Parallel efficiency (busy over offered thread-seconds); None when unknown.
    efficiency: float | None = None
    #: Most threads the cluster had while the workflow ran; 0 when unknown.
    peak_threads: int = 0
    #: Most threads of one worker process; 0 when unknown.
    worker_threads: int = 0
    #: The critical path's steps are task groups (each from its first compute start to
    #: its last compute end), not single task runs.
    path_of_groups: bool = True
    #: Memory, summed over the workflow's Dask spans: the most bytes of results it held
    #: at once (0 when unknown), bytes its tasks spilled to disk and read back, worker
    #: pauses that overlapped its tasks and their seconds (a pause overlapping two spans
    #: counts in each), workers lost while running or holding them.
    peak_bytes: int = 0
    spilled_bytes: float = 0.0
    unspilled_bytes: float = 0.0
    pauses: int = 0
    pause_s: float = 0.0
    workers_lost: int = 0

    @property
    def biggest_group(self) -> GroupEvidence | None:
        """The group that held the most bytes at its peak; None when none held any."""
        best = max(self.groups, key=lambda g: (g.peak_bytes, g.name), default=None)
        return best if best is not None and best.peak_bytes > 0 else None

    @property
    def tasks(self) -> int:
        return sum(g.tasks for g in self.groups)

    @property
    def busy_s(self) -> float:
        """Busy thread-seconds: every activity but idle, never less than compute."""
        metrics = sum(s for a, s in self.activities.items() if a != IDLE_ACTIVITY)
        return max(metrics, sum(g.compute_s for g in self.groups))
