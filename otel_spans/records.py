"""Plain records handed from the Dask side (``scheduler/``) to the OTel side (``telemetry/``).

A record is a snapshot taken on the scheduler's event loop: detached from any live
scheduler object and never changed once built, so the exporter thread can read it
while the loop goes on mutating the scheduler. Times are integer nanoseconds since the
epoch; ``ns()`` is the one place where Dask's float seconds are converted.

The records built for every export and every kept task run (a span's, its events',
links' and memory's, the workflow analysis; ``task_records``' group and task records)
are plain slotted dataclasses, not frozen ones: a frozen dataclass sets each field
through ``object.__setattr__``, which costs a span's record of 30 fields several times
what the plain one does, on the event loop. Nothing assigns to a record's fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from otel_spans.names import clean


def ns(seconds: float) -> int:
    """Dask's float epoch seconds as OTel's integer epoch nanoseconds."""
    return int(seconds * 1e9)


@dataclass(frozen=True, slots=True)
class CodeSnippet:
    """The innermost client frame Dask captured for a computation."""

    code: str
    filename: str
    lineno: int


#: An attribute value as OTel accepts it.
AttrValue = str | bool | int | float | tuple[str, ...]

#: Most attributes a workflow may be given (``otel_spans.span(attributes=...)``,
#: ``otel-spans.workflow-attributes``, the ``otel_spans`` annotation).
MAX_WORKFLOW_ATTRIBUTES = 32
#: Longest attribute key a workflow may be given.
MAX_WORKFLOW_ATTRIBUTE_KEY = 128
#: Key prefixes of otel-spans' own attributes, which a workflow's cannot replace.
RESERVED_ATTRIBUTE_PREFIXES = ("dask.", "otel_spans.")


def workflow_attributes(value: object) -> tuple[tuple[str, str | bool | int | float], ...]:
    """User attributes of a workflow (``{"team": "risk"}``), checked; ValueError says why.

    Keys: non-empty strings of at most 128 characters, outside ``dask.`` and
    ``otel_spans.``; values: strings, booleans, integers or floats; at most 32. Keys and
    string values are made valid UTF-8 (:func:`otel_spans.names.clean`); values are cut
    where they are exported (``max-attribute-length``, metric labels shorter).
    """
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of attribute names to values, got {value!r}")
    if len(value) > MAX_WORKFLOW_ATTRIBUTES:
        raise ValueError(f"at most {MAX_WORKFLOW_ATTRIBUTES} attributes, got {len(value)}")
    out: dict[str, str | bool | int | float] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_WORKFLOW_ATTRIBUTE_KEY:
            raise ValueError(
                f"attribute name {key!r}: expected a non-empty string of at most "
                f"{MAX_WORKFLOW_ATTRIBUTE_KEY} characters"
            )
        if key.startswith(RESERVED_ATTRIBUTE_PREFIXES):
            raise ValueError(
                f"attribute name {key!r}: names starting with "
                f"{' or '.join(RESERVED_ATTRIBUTE_PREFIXES)} are otel-spans' own"
            )
        if not isinstance(item, str | bool | int | float):
            raise ValueError(
                f"attribute {key!r}: expected a string, boolean, integer or float, got {item!r}"
            )
        # two keys that differ in lone surrogates alone are one key: the first is kept
        out.setdefault(clean(key), clean(item) if isinstance(item, str) else item)
    return tuple(sorted(out.items()))


@dataclass(slots=True)
class SpanEventRecord:
    """One event on an OTel span (a computation, a transition of an erred task, a change
    of the cluster's thread count); Dask's structured events become log records."""

    name: str
    time_ns: int
    attributes: tuple[tuple[str, AttrValue], ...] = ()


@dataclass(slots=True)
class LinkRecord:
    trace_id: int
    span_id: int
    attributes: tuple[tuple[str, AttrValue], ...] = ()
    #: W3C trace flags of the linked span (a caller's, as its traceparent said).
    trace_flags: int = 1
    #: The linked span belongs to another process (the caller).
    remote: bool = False


#: A value of a finding's evidence.
EvidenceValue = int | float | str


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason a workflow took as long as it did (:mod:`otel_spans.analysis.diagnosis`
    decides them; the root span, its events and a log record carry them)."""

    #: Stable id (``straggler``, ``tiny-tasks`` ...): docs/telemetry.md lists them.
    id: str
    #: ``critical``, ``warning`` or ``info``.
    severity: str
    #: The task group, Dask span or workflow it is about (see :attr:`subject_kind`).
    subject: str
    subject_kind: str
    #: The numbers behind it, by name, in a fixed order.
    evidence: tuple[tuple[str, EvidenceValue], ...]
    #: Of the wall time, what this finding explains; shares of one workflow add up to
    #: at most 1.
    share: float
    advice: str


@dataclass(slots=True)
class WorkflowAnalysis:
    """Why a finished workflow took as long as it did, on its root span's export.

    Computed on the scheduler from task groups (the granularity it keeps in full); see
    ``dask.workflow.*`` in docs/telemetry.md for each value's definition.
    """

    #: Summed compute time of every task in the tree, seconds.
    sequential_time: float
    #: Task groups on the critical path, first to last.
    critical_path_groups: tuple[str, ...]
    #: Length of the critical path, seconds.
    critical_path_length: float
    #: Busy over offered thread-seconds, at most 1; None when nothing was offered.
    efficiency: float | None
    #: Sequential time over wall time; None when the wall time was not positive.
    speedup: float | None
    #: The prefixes with the most compute time, most first (at most 5).
    bottlenecks: tuple[str, ...]
    #: ``prefix=share`` of each bottleneck; None when nothing computed.
    bottleneck_shares: tuple[str, ...] | None
    #: Why it was slow: ranked findings (docs/telemetry.md, Diagnosis).
    findings: tuple[Finding, ...] = ()
    #: Most threads of one worker when it finished; 0 when unknown.
    worker_threads: int = 0
    #: False for a workflow shorter than ``diagnosis.min-duration``: its sequential
    #: time, efficiency and speedup alone were computed (no path, bottleneck, finding).
    diagnosed: bool = True


@dataclass(slots=True)
class MemoryRecord:
    """Memory evidence of a Dask span's own tasks, or of one task group, at an export.

    Held bytes are the scheduler's ``nbytes`` of the results in memory (spilled ones
    included: the scheduler does not know where on a worker a result is); spilled and
    unspilled bytes are Dask's fine performance metrics (``disk-write`` and
    ``disk-read`` bytes of its tasks, context ``execute``). See docs/telemetry.md, Memory.
    """

    #: Most bytes of results held at once, and at the export.
    peak: int = 0
    held: int = 0
    #: On roots: the most bytes the whole tree held at once; 0 elsewhere.
    tree_peak: int = 0
    spilled: float = 0.0
    unspilled: float = 0.0
    #: Worker memory pauses that overlapped its tasks, and their seconds so far.
    pauses: int = 0
    pause_seconds: float = 0.0
    #: Workers removed unexpectedly while running or holding its tasks.
    workers_lost: int = 0


@dataclass(slots=True)
class SpanRecord:
    """One export of one Dask span (or of a continuation of it)."""

    #: Dask uuid of the span (``Span.id``).
    uuid: str
    #: All tags, root first (``Span.name``).
    tags: tuple[str, ...]
    trace_id: int
    span_id: int
    #: 0 when the span is a trace root.
    parent_span_id: int
    #: 0 for the first export; n for the n-th continuation after the span reopened.
    continuation: int
    #: Span id of the previous export of the same Dask span (continuations link to it).
    previous_span_id: int
    start_ns: int
    end_ns: int
    #: Time the span first appeared on the scheduler (``Span.enqueued``).
    enqueued_ns: int
    #: Earliest task start in the span tree; 0 when no task finished computing.
    compute_start_ns: int
    done: bool
    #: Tasks of the span tree by the final state they reached ("memory": computed,
    #: "erred": failed), plus, on unfinished spans, those still pending by state.
    states: tuple[tuple[str, int], ...]
    #: Tasks in the span tree (sizes of its task groups).
    tasks: int
    task_groups: int
    nbytes: int
    #: Sum of all task action durations in the span tree, seconds.
    task_duration: float
    active_cpu_seconds: float
    code: tuple[CodeSnippet, ...] = field(default=())
    #: Computations that fed the span, erred-task details...
    events: tuple[SpanEventRecord, ...] = field(default=())
    #: Events left out of ``events`` (OTLP's dropped_events_count).
    events_dropped: int = 0
    #: Links besides the continuation link (e.g. to the caller's span in link mode).
    links: tuple[LinkRecord, ...] = field(default=())
    #: The parent is the caller's span, in another process.
    parent_remote: bool = False
    #: The root's first export under (or linked to) a caller in another process: the
    #: span kind CONSUMER, which service graphs pair with the caller's PRODUCER/CLIENT.
    consumer: bool = False
    #: The workflow analysis: on roots exported done only.
    analysis: WorkflowAnalysis | None = None
    #: The workflow's attributes (configured, then given; sorted by key): on every span
    #: of its tree.
    workflow_attributes: tuple[tuple[str, AttrValue], ...] = field(default=())
    #: Who started the workflow (roots only): the Dask client id of its first graph and
    #: the client's OS user; None when unknown.
    client_id: str | None = None
    client_user: str | None = None
    #: This export's share of the span's own worker metrics as (attribute key, value):
    #: keys under ``semconv.DASK_SPAN_RUN_PREFIXES``, sorted; only positive shares.
    run_breakdown: tuple[tuple[str, float], ...] = field(default=())
    #: The memory of its own tasks (and on roots the tree's peak); None when not read.
    footprint: MemoryRecord | None = None

    @property
    def erred(self) -> int:
        return dict(self.states).get("erred", 0)


#: Metric attributes as a hashable, ordered tuple of (key, value) pairs.
Attrs = tuple[tuple[str, str], ...]


class CounterDelta(NamedTuple):
    """How much a monotonic counter series grew since the last reading.

    ``tags`` are the Dask span's tags (None for cluster-level series); the metrics
    side turns them into bounded ``dask.span.name``/``dask.span.root`` attributes.
    """

    metric: str
    tags: tuple[str, ...] | None
    attributes: Attrs
    value: float


#: A :class:`CounterDelta` of its four fields, in order, by ``tuple.__new__`` (see
#: :data:`log_entry`): the metrics tick builds several per live span on every pass.
counter_delta: Callable[[tuple[str, tuple[str, ...] | None, Attrs, float]], CounterDelta] = partial(
    tuple.__new__, CounterDelta
)


class GaugeValue(NamedTuple):
    """The current value of a gauge series (progress of a running Dask span, a
    worker's memory).

    A set of them replaces the previous set at once: a series not in it is gone.
    ``tags`` are None for cluster-level series.
    """

    metric: str
    tags: tuple[str, ...] | None
    attributes: Attrs
    value: float


class HistogramSample(NamedTuple):
    """One value for a histogram, with the span it came from (for exemplars).

    A NamedTuple rather than a frozen dataclass: one is built per finished task on
    the event loop, and tuple construction is several times cheaper.
    """

    metric: str
    tags: tuple[str, ...]
    attributes: Attrs
    value: float
    trace_id: int
    span_id: int


#: A :class:`GaugeValue` and a :class:`HistogramSample` of their fields, in order, by
#: ``tuple.__new__`` (see :data:`log_entry`): the metrics tick builds a gauge per live
#: span on every pass, and each export its histogram values.
gauge_value: Callable[[tuple[str, tuple[str, ...] | None, Attrs, float]], GaugeValue] = partial(
    tuple.__new__, GaugeValue
)
histogram_sample: Callable[
    [tuple[str, tuple[str, ...], Attrs, float, int, int]], HistogramSample
] = partial(tuple.__new__, HistogramSample)


class LogEntry(NamedTuple):
    """One log record: a Dask structured event, the report of an erred task, or a record
    of Python's ``logging``.

    A NamedTuple rather than a frozen dataclass, as :class:`HistogramSample`: one is
    built per Dask event on the event loop (and per Python log record on any thread),
    and a frozen dataclass sets its eleven fields one ``object.__setattr__`` at a time.
    """

    time_ns: int
    severity_number: int
    severity_text: str
    #: A Dask event message: a shallow copy of the dict (or the object) as logged.
    body: object
    attributes: tuple[tuple[str, AttrValue], ...]
    event_name: str
    trace_id: int = 0
    span_id: int = 0
    #: Instrumentation scope: the Python logger's name; "" for otel-spans' own scope.
    scope: str = ""
    #: Longest body string; 0: the attribute length limit (a profile is longer).
    body_length: int = 0
    #: The trace's sampling decision, in the record's W3C flags (its span is exported
    #: only when true).
    sampled: bool = True


#: A :class:`LogEntry` of every one of its fields, in order: ``tuple.__new__`` itself,
#: where a call of the class first runs the NamedTuple's ``__new__``, a Python function
#: (cold on the event loop, once per Dask event). No field may be left out.
log_entry: Callable[[tuple[object, ...]], LogEntry] = partial(tuple.__new__, LogEntry)


@dataclass(frozen=True, slots=True)
class ProfileRecord:
    """Dask's statistical profile of one task prefix over one workflow's time window, as
    the workers sent it: one call tree per worker (Dask's ``distributed.profile`` dicts,
    decoded from their replies and owned by nobody else). Folded on the logs exporter
    thread (:mod:`otel_spans.telemetry.folded_stacks`), never on the event loop."""

    time_ns: int
    trace_id: int
    #: The root Dask span's OTel span id.
    span_id: int
    #: The root Dask span's uuid and tags.
    dask_span_id: str
    tags: tuple[str, ...]
    prefix: str
    trees: tuple[object, ...]
