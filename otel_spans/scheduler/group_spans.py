"""A task group's span: what is kept of the group, and its record at its span's export.

:class:`~otel_spans.scheduler.task_groups.TaskGroups` keeps one small
:class:`GroupState` per task group, updated by every finished task on the scheduler's
event loop, and decides when a group is exported (with its Dask span). The
:class:`~otel_spans.task_records.GroupRecord` is built here, from that state and the
Dask group, once per group: kept apart from the per-task bookkeeping so that the
record's shape (its dependency links, its bounds) reads in one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from otel_spans import semconv
from otel_spans.names import clean
from otel_spans.records import LinkRecord, MemoryRecord, ns
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.task_records import GroupRecord

if TYPE_CHECKING:
    from distributed.scheduler import TaskGroup

#: Most dependency links built for a group span; the rest are counted as dropped.
_MAX_LINKS = 128
#: The attributes of every dependency link (one tuple, not one per link).
_DEPENDENCY = ((semconv.DASK_LINK_KIND, semconv.LINK_KIND_DEPENDENCY),)


@dataclass(slots=True)
class GroupState:
    """What is remembered of one task group of a tracked or released Dask span."""

    span: SpanIdentity
    span_id: int
    memory: int = 0
    erred: int = 0
    #: ``error.type`` of the tasks of the group that raised: their exception's type
    #: while they all raised the same one, else the conventions' ``_OTHER``.
    error_type: str = ""
    workers: set[str] | None = field(default_factory=set)
    worker_count: int = 0
    #: Runs on a worker not in ``workers`` once it held ``task_groups._MAX_WORKERS``.
    workers_uncounted_runs: int = 0
    exported: bool = False
    #: First start and last stop of its finished runs, on the clocks of the workers
    #: that ran them: the bounds its span must have to cover its task spans (inf, -inf
    #: until a run is known).
    first: float = math.inf
    last: float = -math.inf
    #: Compute seconds of the slowest successful run so far, and its Dask key (the
    #: diagnosis's straggler evidence); one comparison per finished task.
    slowest: float = 0.0
    slowest_key: object = None
    #: When the computation that made the group was submitted (epoch seconds, 0 if
    #: Dask's recent computations hold none), read once; negative until read.
    submitted: float = -1.0


def dependency_links(
    tg: TaskGroup, known: Mapping[TaskGroup, GroupState]
) -> tuple[list[LinkRecord], int]:
    """Links to the spans of the ``known`` groups ``tg`` depends on (at most
    ``_MAX_LINKS``), and how many more there were."""
    links: list[LinkRecord] = []
    links_dropped = 0
    for dep in list(tg.dependencies):
        dep_state = known.get(dep)
        if dep_state is None:
            continue
        if len(links) == _MAX_LINKS:
            links_dropped += 1
            continue
        links.append(LinkRecord(dep_state.span.trace_id, dep_state.span_id, _DEPENDENCY))
    return links, links_dropped


def group_record(
    tg: TaskGroup,
    state: GroupState,
    span: SpanIdentity,
    known: Mapping[TaskGroup, GroupState],
    *,
    bounds: tuple[float, float] | None,
    fallback: float,
    kept: int,
    dropped: int,
    max_length: int,
    footprint: Callable[[TaskGroup], MemoryRecord] | None,
    submitted: float,
) -> GroupRecord:
    """The span of ``tg`` under ``span``. ``bounds``: its runs' first start and last
    stop, None when no run reported (then Dask's compute times, from ``fallback`` when
    Dask has no start); ``kept`` and ``dropped``: its task spans; ``submitted``: when
    its computation was submitted, 0 if unknown."""
    links, links_dropped = dependency_links(tg, known)
    if bounds is None:  # no run reported: Dask's compute times
        start = tg.start or fallback
        bounds = (start, max(tg.stop, start))
    return GroupRecord(
        name=clean(str(tg.name), max_length),
        prefix=clean(tg.prefix.name, max_length),
        trace_id=span.trace_id,
        span_id=state.span_id,
        parent_span_id=span.otel_span_id,
        start_ns=ns(bounds[0]),
        end_ns=ns(bounds[1]),
        tasks=len(tg),
        memory=state.memory,
        erred=state.erred,
        error_type=state.error_type,
        nbytes=int(tg.nbytes_total),
        durations=tuple(sorted(tg.all_durations.items())),
        workers=state.worker_count,
        task_spans_kept=kept,
        task_spans_dropped=dropped,
        links=tuple(links),
        submitted_ns=ns(submitted),
        links_dropped=links_dropped,
        footprint=footprint(tg) if footprint is not None else None,
        workers_uncounted_runs=state.workers_uncounted_runs,
    )
