"""A finished root's Dask spans and task groups, each read once for its analysis.

The root's analysis (:mod:`otel_spans.scheduler.root_analysis`) runs on the event loop
when the root is exported done. Dask computes several of a group's and a span's
attributes on each read (a group's ``all_durations`` is a new mapping each time), and
the group-level workflow, the bottlenecks and the diagnosis's evidence all need the
same ones: one walk of the tree's spans and one pass over its groups read each
attribute and clean each name once for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from otel_spans.analysis.evidence import GroupEvidence
from otel_spans.analysis.model import TaskRun
from otel_spans.names import clean
from otel_spans.records import ns
from otel_spans.scheduler.memory import SpanMemory
from otel_spans.scheduler.task_groups import Tally

if TYPE_CHECKING:
    from distributed.scheduler import TaskGroup
    from distributed.spans import Span

#: The memory ledger of a Dask span by its id (scheduler/memory.py); None if untracked.
MemoryOf = Callable[[str], "SpanMemory | None"]


class TreeSpans(NamedTuple):
    """What one walk of a root's Dask spans gives its evidence: each span's name (joined
    tags) and memory ledger by id, each span's own execute seconds by activity, and
    the memory counters summed over the tree."""

    names: dict[str, str]
    ledgers: dict[str, SpanMemory]
    activities: dict[str, dict[str, float]]
    spilled: float
    unspilled: float
    pauses: int
    pause_s: float
    lost: int


class TreeGroups(NamedTuple):
    """What one pass over a root's task groups gives its analysis: each group that ran
    as a step of the group-level workflow, each group's evidence, and the compute
    seconds by prefix (first computed first)."""

    steps: tuple[TaskRun, ...]
    evidence: tuple[GroupEvidence, ...]
    compute_by_prefix: dict[str, float]


def read_spans(spans: Iterable[Span], memory_of: MemoryOf, now: float) -> TreeSpans:
    """The tree's ``spans`` (its root among them) read for its evidence, each span's
    worker metrics walked once; ``now`` counts the pauses under way."""
    names: dict[str, str] = {}
    ledgers: dict[str, SpanMemory] = {}
    activities: dict[str, dict[str, float]] = {}
    spilled = unspilled = pause_s = 0.0
    pauses = lost = 0
    for node in spans:
        name = names[node.id] = clean("/".join(map(str, node.name)))
        own, wrote, read = _execute_digest(node._cumulative_worker_metrics)
        if own:
            activities[name] = own
        ledger = memory_of(node.id)
        if ledger is None:
            continue
        ledgers[node.id] = ledger
        spilled, unspilled = spilled + wrote, unspilled + read
        pauses, lost = pauses + ledger.pauses, lost + ledger.workers_lost
        pause_s += ledger.pause_seconds_at(now)
    return TreeSpans(names, ledgers, activities, spilled, unspilled, pauses, pause_s, lost)


def read_groups(
    tree_groups: Iterable[TaskGroup],
    spans: TreeSpans,
    tally: Callable[[TaskGroup], Tally | None],
    submitted_at: Callable[[TaskGroup], float | None],
) -> TreeGroups:
    """Each group as a step and as evidence, its Dask attributes read once: a step from
    its first compute start to its last compute end (groups that computed), linked
    to the groups it depends on; ``submitted_at`` gives when its computation was
    submitted, so that the critical path follows stages the client ran one after
    another."""
    compute_by_prefix: dict[str, float] = {}
    evidence = []
    ran: list[tuple[TaskGroup, str, str, int, int]] = []
    names: dict[int, str] = {}  # of the groups that ran, by id
    for tg in tree_groups:
        name = clean(str(tg.name))
        prefix = clean(tg.prefix.name)
        start, stop = tg.start, tg.stop
        start_ns, end_ns = ns(start), ns(max(stop, start))
        # Dask builds a new mapping on each read of a group's all_durations
        read = tg.all_durations
        durations = dict(zip(map(str, read), map(float, read.values()), strict=True))
        compute = read.get("compute", 0.0)
        if compute:
            compute_by_prefix[prefix] = compute_by_prefix.get(prefix, 0.0) + compute
        if start and stop:
            ran.append((tg, name, prefix, start_ns, end_ns))
            names[id(tg)] = name
        span_id = str(tg.span_id or "")
        ledger = spans.ledgers.get(span_id)
        held = ledger.group_of(tg.name) if ledger is not None else None
        counts = tally(tg)
        runs = counts.runs if counts else 0
        slowest = counts.slowest_s if counts and counts.slowest_s > 0 else None
        typical = None
        if slowest is not None and runs > 1:
            typical = max(durations.get("compute", 0.0) - slowest, 0.0) / (runs - 1)
        evidence.append(
            GroupEvidence(
                name=name,
                prefix=prefix,
                tasks=len(tg),
                runs=runs,
                erred=counts.erred if counts else int(tg.states.get("erred", 0)),
                durations=durations,
                start_ns=start_ns,
                end_ns=end_ns,
                slowest_s=slowest,
                slowest_key=counts.slowest_key if counts else None,
                typical_s=typical,
                span=spans.names.get(span_id, ""),
                peak_bytes=held.peak if held is not None else 0,
            )
        )
    steps = []
    for tg, name, prefix, start_ns, end_ns in ran:
        dependencies = []
        for d in tg.dependencies:
            if id(d) in names:
                dependencies.append(names[id(d)])
        steps.append(
            TaskRun(
                key=name,
                prefix=prefix,
                group=name,
                worker="",
                thread=None,
                start_ns=start_ns,
                end_ns=end_ns,
                dependencies=tuple(dependencies),
                submitted_ns=_ns_or_none(submitted_at(tg)),
            )
        )
    return TreeGroups(tuple(steps), tuple(evidence), compute_by_prefix)


def execute_seconds(metrics: Mapping[Any, float]) -> dict[str, float]:
    """Seconds by activity of Dask's ``execute`` fine performance metrics."""
    return _execute_digest(metrics)[0]


def _execute_digest(metrics: Mapping[Any, float]) -> tuple[dict[str, float], float, float]:
    """One pass over a span's ``execute`` fine performance metrics: seconds by
    activity (:func:`execute_seconds`) and the bytes written to and read from disk
    (:func:`~otel_spans.scheduler.memory.disk_bytes`)."""
    seconds: dict[str, float] = {}
    spilled = unspilled = 0.0
    for key, value in metrics.items():
        if not (isinstance(key, tuple) and len(key) == 4 and key[0] == "execute"):
            continue
        unit = key[3]
        if unit == "seconds":
            activity = str(key[2])
            seconds[activity] = seconds.get(activity, 0.0) + value
        elif unit == "bytes":
            if key[2] == "disk-write":
                spilled += value
            elif key[2] == "disk-read":
                unspilled += value
    return seconds, spilled, unspilled


def _ns_or_none(seconds: float | None) -> int | None:
    return ns(seconds) if seconds else None
