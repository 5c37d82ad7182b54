"""What is remembered of each Dask span between its discovery and its last export.

One :class:`TrackedSpan` per Dask span the scheduler has seen, owned by
:class:`~otel_spans.scheduler.tracking.SpanTracker` (Dask's ``Span`` stays the
read-only view of the extension's state), a :class:`SpanIdentity` (the part its task
groups and runs carry too) and the span's lifecycle; :class:`FinishedRoot` for the
workflows page; and how a span's identity (sampling policy, metric labels) is fixed
when it is first seen.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from otel_spans.config import TaskSettings
from otel_spans.records import AttrValue, SpanRecord
from otel_spans.scheduler.memory import SpanMemory
from otel_spans.scheduler.sampling import Policy
from otel_spans.telemetry.histogram import Series

if TYPE_CHECKING:
    from distributed.scheduler import Computation

#: Finished workflows remembered for the workflows page.
MAX_FINISHED_ROOTS = 100
#: Dask spans whose last export settled, kept so that late work in one is still
#: exported as a continuation: at most this many, least recently released evicted
#: first, counted in ``stats()["released_evicted"]``. Read at every release.
MAX_RELEASED = 512


@dataclass(slots=True)
class SpanIdentity:
    """Who a tracked Dask span is in OTel terms: what its task groups and runs need."""

    uuid: str
    tags: tuple[str, ...]
    trace_id: int
    otel_span_id: int
    policy: Policy
    #: Erred tasks of this span whose story was recorded (bounded).
    stories: int = 0
    #: False when the workflow joined a caller's trace that is not sampled (parent-based
    #: sampling): nothing of its tree is exported as spans.
    sampled: bool = True
    #: The workflow attributes of ``metrics.attribute-labels``, as metric attributes.
    labels: tuple[tuple[str, str], ...] = ()


class FinishedRoot(NamedTuple):
    """A finished workflow, as the workflows page lists it."""

    tags: tuple[str, ...]
    trace_id: int
    span_id: int
    start_ns: int
    end_ns: int
    #: Its tasks by final state.
    states: tuple[tuple[str, int], ...]
    #: Whether its spans were exported (see parent-based sampling).
    sampled: bool

    @classmethod
    def of(cls, record: SpanRecord, identity: SpanIdentity, *, sampled: bool) -> FinishedRoot:
        """The root's export as done; ``span_id`` is its first export's (the one the
        trace link points at)."""
        return cls(
            identity.tags,
            identity.trace_id,
            identity.otel_span_id,
            record.start_ns,
            record.end_ns,
            record.states,
            sampled,
        )


@dataclass(slots=True, kw_only=True)
class TrackedSpan(SpanIdentity):
    """What otel-spans remembers of one Dask span: its identity (inherited: the part its
    task groups and runs carry too), and its lifecycle.

    One object rather than a track holding an identity: every object that lives as long
    as a span is walked by each of the garbage collector's full collections (and counts
    towards the next), so a span's state is kept in as few objects as reads well. An
    empty dict is not tracked by the collector until it holds an object it tracks.
    """

    is_root: bool
    #: How many times the span was exported so far.
    exports: int = 0
    #: OTel span id of the latest export.
    last_span_id: int = 0
    #: When the latest export ended (epoch seconds).
    last_end: float = 0.0
    #: When new work arrived after the latest export; None while not reopened.
    reopened_at: float | None = None
    #: When the poll first saw the span done; None while not done.
    done_since: float | None = None
    #: When the span was last exported as done; metrics settle from there.
    exported_at: float | None = None
    #: (prefix, final state) -> tasks that reached it; keyed by :func:`finished_key`.
    finished: dict[tuple[str, str], int] = field(default_factory=dict)
    #: prefix -> bytes of outputs produced.
    output: dict[str, int] = field(default_factory=dict)
    #: Whether the metrics read this root's CPU while it runs (False once one read
    #: took longer than a loop slice: then only at its export).
    live_cpu: bool = True
    #: Cumulative values already handed over as counter deltas, by metric key.
    reported: dict[tuple[Hashable, ...], float] = field(default_factory=dict)
    #: Run-breakdown attributes of earlier exports, summed (see run_breakdown.run_totals).
    run_exported: dict[str, float] = field(default_factory=dict)
    #: Results held, pauses and lost workers of its own tasks (scheduler/memory.py).
    memory: SpanMemory = field(default_factory=SpanMemory)
    #: The duration histogram's series its successful tasks go to, resolved at a
    #: prefix's first task (the labels are hashed once, not per task): the first
    #: prefix's inline (a span of one prefix fills no dict), the others' by prefix.
    series_prefix: str | None = None
    series: Series | None = None
    duration_series: dict[str, Series] = field(default_factory=dict)
    #: The computation that held every group of the span when it was first seen, read
    #: by its first export and then dropped: Dask keeps its 100 recent computations,
    #: which a busy scheduler rolls over before a span's export. None when it was first
    #: seen later than the graph that made it.
    computation: Computation | None = None

    @property
    def identity(self) -> SpanIdentity:
        """Tags, trace id, OTel span id of the first export, sampling policy."""
        return self

    def series_of(self, prefix: str) -> Series | None:
        """The duration histogram's series of ``prefix``, if resolved."""
        if prefix == self.series_prefix:
            return self.series
        return self.duration_series.get(prefix)

    def keep_series(self, prefix: str, series: Series) -> None:
        if self.series_prefix is None:
            self.series_prefix, self.series = prefix, series
        else:
            self.duration_series[prefix] = series

    def forget_series(self) -> None:
        """Another copy's histogram takes over (``SpanTracker.inherit``)."""
        self.series_prefix = self.series = None
        self.duration_series = {}


def finished_key(prefix: str, state: str) -> tuple[str, str]:
    """The key of :attr:`TrackedSpan.finished` for tasks of ``prefix`` that reached
    ``state``: the same tuple for every span.

    The collector stops tracking a tuple of strings once it has seen it, and a dict whose
    keys and values it does not track is not tracked either: with a fresh tuple per span,
    each span's counts would be one more object for every full collection to walk.
    """
    keys = _finished_keys.get(state)
    if keys is None:
        keys = _finished_keys[state] = {}
    key = keys.get(prefix)
    if key is None:
        if len(keys) >= _MAX_FINISHED_KEYS:  # prefixes of a long-lived cluster
            keys.clear()
        key = keys[prefix] = (prefix, state)
    return key


#: Final state -> prefix -> its key in :attr:`TrackedSpan.finished`, shared by every
#: span of every scheduler in the process.
_finished_keys: dict[str, dict[str, tuple[str, str]]] = {}
#: Most prefixes whose keys are remembered per final state (cleared beyond).
_MAX_FINISHED_KEYS = 4_096


def task_policy(tasks: TaskSettings, tags: tuple[str, ...]) -> Policy:
    """The task sampling policy of a span: the first rule matching its joined tags,
    else the default mode."""
    mode = tasks.mode
    if tasks.rules:
        name = "/".join(tags)
        for rule in tasks.rules:
            if fnmatch.fnmatchcase(name, rule.match):
                mode = rule.mode
                break
    global _policies
    known = _policies  # read once: another scheduler's thread may replace it
    if known[0] is not tasks:
        known = _policies = (tasks, {})
    policy = known[1].get(mode)
    if policy is None:
        policy = known[1][mode] = Policy(
            mode, tasks.slowest, tasks.ratio, tasks.max_per_trace, tasks.min_duration
        )
    return policy


#: The policies of the last task settings, by mode: every span of a scheduler shares
#: one of a handful (a ``Policy`` is frozen), rather than each building its own.
_policies: tuple[TaskSettings | None, dict[str, Policy]] = (None, {})


def metric_labels(
    allowed: tuple[str, ...], attributes: Mapping[str, AttrValue]
) -> tuple[tuple[str, str], ...]:
    """The ``allowed`` workflow attributes as metric attributes, in ``allowed`` order."""
    return tuple((name, _label_value(attributes[name])) for name in allowed if name in attributes)


def _label_value(value: AttrValue) -> str:
    """A workflow attribute's value as a metric attribute (a string, as in PromQL)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class ReleasedSpans:
    """Tracks of spans whose last export settled, least recently released first.

    A long-lived scheduler sees workflows without end and Dask keeps every span: what
    otel-spans remembers of a span moves here once its metrics settled, and is dropped
    (``evict`` is told, to release the span's task groups and callers) beyond
    :data:`MAX_RELEASED`. A span taken back (late work) is tracked again as before.
    Late work in an evicted span is not exported (counted in :attr:`late`): it would
    reuse the ids of its first export.
    """

    def __init__(self, evict: Callable[[str, TrackedSpan], object]):
        #: uuid -> track, at most :data:`MAX_RELEASED`, oldest first.
        self._tracks: dict[str, TrackedSpan] = {}
        self._evict = evict
        #: Tracks evicted at the bound.
        self.evicted = 0
        #: Transitions of evicted spans, ignored.
        self.late = 0

    def put(self, uuid: str, track: TrackedSpan) -> None:
        self._tracks[uuid] = track
        while len(self._tracks) > MAX_RELEASED:
            old = next(iter(self._tracks))
            self.evicted += 1
            self._evict(old, self._tracks.pop(old))

    def take(self, uuid: str) -> TrackedSpan | None:
        """The released track of ``uuid``, no longer released; None if unknown."""
        return self._tracks.pop(uuid, None) if self._tracks else None

    def get(self, uuid: str) -> TrackedSpan | None:
        return self._tracks.get(uuid)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._tracks

    def __len__(self) -> int:
        return len(self._tracks)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tracks)

    def update(self, other: ReleasedSpans) -> None:
        for uuid, track in other._tracks.items():
            self.put(uuid, track)

    def clear(self) -> None:
        self._tracks.clear()


class KnownSpans:
    """The spans tracked or released, by uuid: their ids are settled."""

    def __init__(self, tracks: Mapping[str, TrackedSpan], released: ReleasedSpans):
        self._tracks = tracks
        self._released = released

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._tracks or uuid in self._released

    def get(self, uuid: str) -> TrackedSpan | None:
        """The track of ``uuid``: tracked, else released; None when neither."""
        return self._tracks.get(uuid) or self._released.get(uuid)
