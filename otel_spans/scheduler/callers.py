"""The caller's trace context, adopted in ``update_graph`` before the graph's tasks run.

Two callers are known:

* ``otel_spans.span`` annotates the tasks a client submits with the caller's W3C
  ``traceparent`` (:mod:`otel_spans.context`);
* code running in a task that submits work: distributed's client sends the key of the
  submitting task with the graph (``submitting_task`` of the ``update-graph``
  message). A Dask span opened there hangs under that task's span, and the task's
  span is then always exported. No annotation is added to anything task code sees.

The scheduler reads them once per new Dask span, before any of the graph's tasks
transitions, so a span's trace and parent are settled before it is first tracked; the
first graph of a Dask span decides for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Container, Hashable, Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from otel_spans import ids, semconv
from otel_spans.names import clean
from otel_spans.records import MAX_WORKFLOW_ATTRIBUTES, workflow_attributes
from otel_spans.scheduler.snapshots import root_of, span_uuid_of_key
from otel_spans.traceparent import parse_traceparent

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.spans import Span, SpansSchedulerExtension


class Caller(NamedTuple):
    """The caller's span a Dask span hangs under (or links to)."""

    trace_id: int
    span_id: int
    #: Keep a trace of its own and link to the caller instead of joining its trace.
    as_link: bool
    #: The W3C trace flags the caller sent (0x01: the caller's span is sampled).
    trace_flags: int = 1
    #: The caller's span lives in another process (a client's); false for the span of
    #: a task this scheduler exports itself.
    remote: bool = True

    @property
    def sampled(self) -> bool:
        return bool(self.trace_flags & 1)


def parse_caller(value: Any) -> Caller | None:
    """The :class:`Caller` of an ``otel_spans`` task annotation; None if it names none.

    Parsed exactly as workers parse it (:func:`otel_spans.traceparent.parse_traceparent`),
    so that every process derives the same ids from the same annotation.
    """
    if not isinstance(value, dict):
        return None
    text = value.get("traceparent")
    parsed = parse_traceparent(text) if isinstance(text, str) else None
    if parsed is None:
        return None
    trace_id, span_id, flags = parsed
    return Caller(trace_id, span_id, bool(value.get("link", False)), flags)


#: Most workflows whose origin, and Dask spans whose adopted caller, are remembered
#: (oldest forgotten first, counted in ``stats()["callers_evicted"]``); a span's are
#: also forgotten with the span (see ``SpanTracker.released``).
_MAX_REMEMBERED = 10_000

_V = TypeVar("_V")


def _remember(memory: dict[str, _V], uuid: str, value: _V) -> int:
    """Remember ``value``; returns how many older ones were forgotten (0 or 1)."""
    memory[uuid] = value
    if len(memory) > _MAX_REMEMBERED:
        del memory[next(iter(memory))]
        return 1
    return 0


class Origin:
    """Who started a workflow and what they said about it: on every span of its tree."""

    __slots__ = ("attributes", "client", "user")

    def __init__(self) -> None:
        #: The Dask client id of the workflow's first graph.
        self.client: str | None = None
        #: The OS user of the client, when ``otel_spans.span`` sent it.
        self.user: str | None = None
        #: User attributes (``otel_spans.span(attributes=...)``, the annotation): the
        #: first value given for a key wins.
        self.attributes: dict[str, str | bool | int | float] = {}

    def merge(self, value: dict[str, Any]) -> None:
        """Take what an ``otel_spans`` annotation says; what is malformed is ignored."""
        user = value.get("user")
        if self.user is None and isinstance(user, str) and user:
            self.user = clean(user, 256)
        given = value.get("attributes")
        if given is None:
            return
        try:
            pairs = workflow_attributes(given)
        except ValueError:
            return  # sent by a client, not checked there: never an error of the scheduler's
        for key, item in pairs:
            # however many graphs add some, a workflow carries at most this many
            if len(self.attributes) >= MAX_WORKFLOW_ATTRIBUTES:
                break
            self.attributes.setdefault(key, item)


#: While the scheduler handles a client's ``update-graph`` message: the key of the task
#: that submitted the graph (None for a graph from outside any task).
_submitting_task: ContextVar[Hashable | None] = ContextVar(
    "otel_spans_submitting_task", default=None
)
_UPDATE_GRAPH = "update-graph"


def watch_submitting_tasks(scheduler: Scheduler) -> Callable[[], None]:
    """Make the submitting task of each graph visible to the ``update_graph`` hook.

    ``SchedulerPlugin.update_graph`` is not given ``submitting_task``; the stream handler
    that receives it is wrapped in a pass-through that only sets a context variable for
    the duration of the call (the handler is awaited in the stream's own task, so
    concurrent graphs from other clients never see each other's). Returns the undo.
    When the handler is missing or not a coroutine function (another distributed), this
    does nothing: Dask spans opened in tasks then follow the Dask tree.
    """
    handlers = scheduler.stream_handlers
    original = handlers.get(_UPDATE_GRAPH)
    if original is None or not inspect.iscoroutinefunction(original):
        return lambda: None

    async def update_graph(**msg: Any) -> Any:
        token = _submitting_task.set(msg.get("submitting_task"))
        try:
            return await original(**msg)
        finally:
            _submitting_task.reset(token)

    handlers[_UPDATE_GRAPH] = update_graph

    def undo() -> None:
        if handlers.get(_UPDATE_GRAPH) is update_graph:
            handlers[_UPDATE_GRAPH] = original

    return undo


class CallerContexts:
    """Dask span uuid -> the caller it adopted; filled by :meth:`adopt` from each graph.

    ``tracked`` holds the uuids of Dask spans already tracked: their ids are settled
    and a later graph never changes them. ``trace_of`` gives a tracked span's trace id;
    ``keep_task`` is told the key of a task whose span became a parent.
    """

    def __init__(
        self,
        tracked: Container[str],
        trace_of: Callable[[str], int | None],
        keep_task: Callable[[Hashable], object],
    ):
        self._tracked = tracked
        self._trace_of = trace_of
        self._keep_task = keep_task
        self._callers: dict[str, Caller] = {}
        #: Root Dask span uuid -> who started that workflow (bounded, oldest first).
        self._origins: dict[str, Origin] = {}
        #: Callers and origins forgotten at ``_MAX_REMEMBERED``.
        self.evicted = 0

    def get(self, uuid: str) -> Caller | None:
        return self._callers.get(uuid)

    def origin(self, root_uuid: str) -> Origin | None:
        return self._origins.get(root_uuid)

    def forget(self, uuid: str) -> None:
        """The span ``uuid`` is forgotten (left the tracker's released spans)."""
        self._callers.pop(uuid, None)
        self._origins.pop(uuid, None)

    def clear(self) -> None:
        self._callers.clear()
        self._origins.clear()

    def inherit(self, old: CallerContexts) -> None:
        """Take over the callers a closed copy had adopted (see ``SpanTracker.inherit``)."""
        self._callers.update(old._callers)
        self._origins.update(old._origins)

    def _origin_of(self, root_uuid: str) -> Origin:
        origin = self._origins.get(root_uuid)
        if origin is None:
            origin = Origin()
            self.evicted += _remember(self._origins, root_uuid, origin)
        return origin

    def adopt(
        self,
        scheduler: Scheduler,
        ext: SpansSchedulerExtension,
        annotations: Any,
        tasks: Iterable[Any],
        client: str | None = None,
    ) -> None:
        """Adopt the callers named by the ``otel_spans`` annotations of one graph, and
        note who started each new workflow (client, user, attributes).

        * a new *root* Dask span joins the caller's trace as its child (or, with
          ``link``, keeps its own trace and links to the caller);
        * a new *nested* Dask span whose tasks name another parent in the same trace
          was opened by code running inside a task: it hangs under that task's span
          (with ``link``, it keeps its Dask parent and links to the task).

        A root never adopts a context from its own trace (a task of the tree submitting
        more work): that would make it a child of its own descendant. Then, for a graph
        submitted from a task, the Dask spans opened in that task (new children of the
        task's own Dask span) that no annotation decided for hang under the task.
        """
        decided: set[str] = set()
        if client is not None:
            # The workflow's client: the first graph's, read from one task (O(1)).
            for key in tasks:
                first = self._span_of(scheduler, ext, key)
                if first is not None:
                    origin = self._origin_of(root_of(first).id)
                    if origin.client is None:
                        origin.client = clean(str(client), 256)
                break
        by_key = (annotations or {}).get(semconv.ANNOTATION) or {}
        for key, value in by_key.items():
            span = self._span_of(scheduler, ext, key)
            if span is None or span.id in decided:
                continue
            decided.add(span.id)
            if isinstance(value, dict):
                self._origin_of(root_of(span).id).merge(value)
            caller = parse_caller(value)
            if caller is None:
                continue
            self._adopt(span, caller, decided)
        submitter = _submitting_task.get()
        if submitter is not None:
            self._adopt_submitter(scheduler, ext, submitter, tasks, decided)

    @staticmethod
    def _span_of(scheduler: Scheduler, ext: SpansSchedulerExtension, key: Any) -> Span | None:
        uuid = span_uuid_of_key(scheduler, key)
        return ext.spans.get(uuid) if uuid is not None else None

    def _adopt_submitter(
        self,
        scheduler: Scheduler,
        ext: SpansSchedulerExtension,
        submitter: Any,
        tasks: Iterable[Any],
        decided: set[str],
    ) -> None:
        task_uuid = span_uuid_of_key(scheduler, submitter)
        if task_uuid is None:
            return
        trace_id = self._trace_of(task_uuid)
        if trace_id is None:
            return
        span_id = ids.task_span_id(task_uuid, str(submitter))
        caller = Caller(trace_id, span_id, False, remote=False)
        adopted = False
        for key in tasks:
            uuid = span_uuid_of_key(scheduler, key)
            if uuid is None or uuid in decided:
                continue
            decided.add(uuid)
            span = ext.spans.get(uuid)
            parent = span.parent if span is not None else None
            if (
                parent is None
                or parent.id != task_uuid
                or uuid in self._tracked
                or uuid in self._callers
            ):
                continue
            self.evicted += _remember(self._callers, uuid, caller)
            adopted = True
        if adopted:
            self._keep_task(submitter)

    def _adopt(self, span: Span, caller: Caller, decided: set[str]) -> None:
        root = root_of(span)
        if root.id not in self._tracked and root.id not in self._callers:
            # A new tree: its root adopts the caller; spans new in the same graph as
            # their root follow the Dask tree.
            if caller.trace_id != ids.workflow_trace_id(root.id):
                self.evicted += _remember(self._callers, root.id, caller)
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
        self.evicted += _remember(self._callers, span.id, caller)
