"""A finished task's run: its compute seconds, and the cheap copy of a run that is kept.

On the scheduler's event loop. :func:`compute_seconds` is read for every finished task
(by the plugin's transition hook); :func:`deferred_task` only for a run the sampling
keeps: it copies what the worker reported into a
:class:`~otel_spans.task_records.DeferredTask`, and the run's
:class:`~otel_spans.task_records.TaskRecord` is built from it on the exporter thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import TYPE_CHECKING, Any

from otel_spans import ids
from otel_spans.names import clean
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.task_records import DeferredTask, raw_phases

if TYPE_CHECKING:
    from distributed.scheduler import TaskState

#: Most dependency keys recorded on a task span (the rest counted in
#: ``dask.task.dependencies_dropped``).
_MAX_DEPENDENCIES = 32


def compute_seconds(startstops: Iterable[dict[str, Any]] | None) -> float:
    """Seconds a finished task spent computing, from the phases its worker reported."""
    total = 0.0
    for phase in startstops or ():
        if phase.get("action") == "compute":
            total += phase["stop"] - phase["start"]
    return total


def _int(value: object) -> int:
    """An integer field of a worker's message; 0 when missing or malformed."""
    return value if isinstance(value, int) else 0


def deferred_task(
    ts: TaskState,
    kwargs: dict[str, Any],
    span: SpanIdentity,
    parent_span_id: int,
    run: tuple[str, int, str],
    finished_at: float,
    clock_offset: float,
    limit: int,
) -> DeferredTask:
    """The cheap copy of a kept run under its group's span ``parent_span_id``; ``run``
    is (final state, attempt, why kept), ``limit`` the longest attribute value."""
    finish, attempt, reason = run
    key = str(ts.key)
    thread = kwargs.get("thread")
    return DeferredTask(
        key=clean(key, limit),
        prefix=clean(ts.prefix.name, limit),
        group=clean(ts.group.name, limit),
        trace_id=span.trace_id,
        # the id from the key as Dask knows it: two keys that clean alike stay apart
        span_id=ids.task_span_id(span.uuid, key),
        parent_span_id=parent_span_id,
        state=finish,
        attempt=attempt,
        sampled_because=reason,
        finished_at=finished_at,
        phases=raw_phases(kwargs.get("startstops")),
        worker=clean(str(kwargs.get("worker") or ""), limit),
        thread=thread if isinstance(thread, int) else None,
        nbytes=_int(kwargs.get("nbytes")),
        typename=clean(str(kwargs.get("typename") or ""), limit),
        dependencies=tuple(dep.key for dep in islice(ts.dependencies, _MAX_DEPENDENCIES)),
        clock_offset=clock_offset,
        dependencies_dropped=max(len(ts.dependencies) - _MAX_DEPENDENCIES, 0),
    )
