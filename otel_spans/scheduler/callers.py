"""The caller's trace context, adopted from the annotations of ``update_graph``.

``otel_spans.span`` annotates the tasks a client submits with the caller's W3C
``traceparent`` (:mod:`otel_spans.context`). The scheduler reads it once per new Dask
span, before any of the graph's tasks transitions, so a span's trace and parent are
settled before it is first tracked; the first graph of a Dask span decides for it.
"""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING, Any, NamedTuple

from otel_spans import ids, semconv
from otel_spans.context import parse_traceparent
from otel_spans.scheduler.snapshots import root_of

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.spans import Span, SpansSchedulerExtension


class Caller(NamedTuple):
    """The caller's span a Dask span hangs under (or links to)."""

    trace_id: int
    span_id: int
    #: Keep a trace of its own and link to the caller instead of joining its trace.
    as_link: bool


def parse_caller(value: Any) -> Caller | None:
    """The :class:`Caller` of an ``otel_spans`` task annotation; None if it names none.

    Parsed exactly as workers parse it (:func:`otel_spans.context.parse_traceparent`),
    so that every process derives the same ids from the same annotation.
    """
    if not isinstance(value, dict):
        return None
    text = value.get("traceparent")
    parsed = parse_traceparent(text) if isinstance(text, str) else None
    if parsed is None:
        return None
    trace_id, span_id, _ = parsed
    return Caller(trace_id, span_id, bool(value.get("link", False)))


class CallerContexts:
    """Dask span uuid -> the caller it adopted; filled by :meth:`adopt` from each graph.

    ``tracked`` holds the uuids of Dask spans already tracked: their ids are settled
    and a later graph never changes them.
    """

    def __init__(self, tracked: Container[str]):
        self._tracked = tracked
        self._callers: dict[str, Caller] = {}

    def get(self, uuid: str) -> Caller | None:
        return self._callers.get(uuid)

    def clear(self) -> None:
        self._callers.clear()

    def adopt(self, scheduler: Scheduler, ext: SpansSchedulerExtension, annotations: Any) -> None:
        """Adopt the callers named by the ``otel_spans`` annotations of one graph.

        * a new *root* Dask span joins the caller's trace as its child (or, with
          ``link``, keeps its own trace and links to the caller);
        * a new *nested* Dask span whose tasks name another parent in the same trace
          was opened by code running inside a task: it hangs under that task's span
          (with ``link``, it keeps its Dask parent and links to the task).

        A root never adopts a context from its own trace (a task of the tree submitting
        more work): that would make it a child of its own descendant.
        """
        by_key = (annotations or {}).get(semconv.ANNOTATION)
        if not by_key:
            return
        decided: set[str] = set()
        for key, value in by_key.items():
            ts = scheduler.tasks.get(key)
            if ts is None or ts.group is None or not ts.group.span_id:
                continue
            uuid = ts.group.span_id
            if uuid in decided:
                continue
            decided.add(uuid)
            span = ext.spans.get(uuid)
            caller = parse_caller(value)
            if span is None or caller is None:
                continue
            self._adopt(span, caller, decided)

    def _adopt(self, span: Span, caller: Caller, decided: set[str]) -> None:
        root = root_of(span)
        if root.id not in self._tracked and root.id not in self._callers:
            # A new tree: its root adopts the caller; spans new in the same graph as
            # their root follow the Dask tree.
            if caller.trace_id != ids.workflow_trace_id(root.id):
                self._callers[root.id] = caller
            decided.add(root.id)
            return
        if span is root or root.id in decided or span.id in self._tracked:
            return
        if span.id in self._callers:
            return
        root_caller = self._callers.get(root.id)
        if root_caller is not None and caller[:2] == root_caller[:2]:
            return  # the tree's own caller, opening another span of the tree
        parent = span.parent
        if parent is not None and caller.span_id == ids.dask_span_id(parent.id):
            return
        # Opened by code running in a task of the tree (or elsewhere): hang under it.
        self._callers[span.id] = caller
