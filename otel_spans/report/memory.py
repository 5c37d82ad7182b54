"""A workflow's memory: which stage and task group held, spilled, paused, lost workers.

The evidence (:class:`MemoryEvidence`, on every
:class:`~otel_spans.report.build.BuiltWorkflow` as ``memory``) is read from the Dask
spans' ``dask.span.memory.*`` and the group spans' ``dask.task_group.memory.*``
attributes and the ``dask.worker.lost`` span events; a diagnosis (say a
``memory-pressure`` finding naming the stage and group that held the most) reads the
same rows the renderers here draw: :func:`text_lines` for the summary, :func:`section`
for the HTML page, :func:`as_json` for machines. A span's memory attributes are its
totals so far at each export, so the largest value over its exports is its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from otel_spans import semconv
from otel_spans.report.load import LoadedSpan, as_float, as_int
from otel_spans.report.markup import escape, more, seconds, short, table

#: Rows drawn in the text summary and the page (the evidence keeps them all).
_TOP = 10
#: Attribute suffixes shared by the span and group prefixes, in MemoryRow's order.
_FIELDS = ("peak", "held", "spilled", "unspilled", "pauses", "pause_duration", "workers_lost")


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """The memory of one Dask span's own tasks, or of one task group."""

    #: The Dask span's name (tags joined with ``/``); for a group, its span's.
    span: str
    #: The task group's full name; "" for a span's row.
    group: str
    peak: int
    held: int
    spilled: int
    unspilled: int
    pauses: int
    pause_seconds: float
    workers_lost: int


@dataclass(frozen=True, slots=True)
class LostWorker:
    """A worker lost while running tasks of the workflow (a ``dask.worker.lost`` event)."""

    time_ns: int
    span: str
    worker: str
    tasks: tuple[str, ...]
    groups: tuple[str, ...]
    killed_tasks: tuple[str, ...]
    #: From its last heartbeat (process memory: its nanny's reading when it killed it).
    held: int
    process_memory: int
    memory_limit: int


@dataclass(frozen=True, slots=True)
class MemoryEvidence:
    """Everything the trace says about a workflow's memory."""

    #: The most bytes the whole workflow held at once (its root's tree peak).
    tree_peak: int
    #: One row per Dask span, most held first.
    spans: tuple[MemoryRow, ...]
    #: One row per task group, most held first.
    groups: tuple[MemoryRow, ...]
    lost_workers: tuple[LostWorker, ...]

    @property
    def spilled(self) -> int:
        return sum(row.spilled for row in self.spans)

    @property
    def pauses(self) -> int:
        return sum(row.pauses for row in self.spans)


def _name(span: LoadedSpan) -> str:
    tags = span.attributes.get(semconv.DASK_SPAN_TAGS)
    return "/".join(str(t) for t in tags) if isinstance(tags, list) else span.name


def _row(span_name: str, group: str, attrs: dict[str, Any], prefix: str) -> MemoryRow:
    values = [attrs.get(prefix + field) for field in _FIELDS]
    return MemoryRow(
        span_name,
        group,
        as_int(values[0]),
        as_int(values[1]),
        int(as_float(values[2])),
        int(as_float(values[3])),
        as_int(values[4]),
        as_float(values[5]),
        as_int(values[6]),
    )


def _largest(rows: Iterable[MemoryRow]) -> MemoryRow:
    """The largest of each value over the exports of one span or group."""
    rows = list(rows)
    first = rows[0]
    return MemoryRow(
        first.span,
        first.group,
        max(r.peak for r in rows),
        rows[-1].held,
        max(r.spilled for r in rows),
        max(r.unspilled for r in rows),
        max(r.pauses for r in rows),
        max(r.pause_seconds for r in rows),
        max(r.workers_lost for r in rows),
    )


def evidence(
    dask_spans: Iterable[LoadedSpan], group_spans: Iterable[LoadedSpan]
) -> MemoryEvidence | None:
    """The memory evidence of one workflow's spans; None when they carry none (files
    written before otel-spans recorded memory)."""
    span_prefix = "dask.span.memory."
    group_prefix = "dask.task_group.memory."
    by_uuid: dict[str, list[MemoryRow]] = {}
    names: dict[str, str] = {}
    tree_peak = 0
    lost: list[LostWorker] = []
    for span in sorted(dask_spans, key=lambda s: s.end_ns):
        attrs = span.attributes
        if semconv.DASK_SPAN_MEMORY_PEAK not in attrs:
            continue
        name = _name(span)
        uuid = str(attrs.get(semconv.DASK_SPAN_ID, span.span_id))
        names[span.span_id] = name
        by_uuid.setdefault(uuid, []).append(_row(name, "", attrs, span_prefix))
        tree_peak = max(tree_peak, as_int(attrs.get(semconv.DASK_SPAN_MEMORY_TREE_PEAK)))
        for event, time_ns, event_attrs in span.events:
            if event == semconv.EVENT_WORKER_LOST:
                lost.append(_lost(time_ns, name, event_attrs))
    if not by_uuid:
        return None
    groups = []
    for group in group_spans:
        attrs = group.attributes
        if semconv.DASK_TASK_GROUP_MEMORY_PEAK in attrs:
            name = str(attrs.get(semconv.DASK_TASK_GROUP_NAME, group.name))
            span_name = names.get(group.parent_span_id, "")
            groups.append(_row(span_name, name, attrs, group_prefix))
    spans = [_largest(rows) for rows in by_uuid.values()]
    return MemoryEvidence(
        tree_peak=tree_peak,
        spans=tuple(sorted(spans, key=lambda r: (-r.peak, r.span))),
        groups=tuple(sorted(groups, key=lambda r: (-r.peak, r.span, r.group))),
        lost_workers=tuple(sorted(lost, key=lambda w: w.time_ns)),
    )


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _lost(time_ns: int, span: str, attrs: dict[str, Any]) -> LostWorker:
    return LostWorker(
        time_ns=time_ns,
        span=span,
        worker=str(attrs.get(semconv.DASK_WORKER_ADDRESS, "")),
        tasks=_strings(attrs.get(semconv.DASK_WORKER_LOST_TASKS)),
        groups=_strings(attrs.get(semconv.DASK_WORKER_LOST_GROUPS)),
        killed_tasks=_strings(attrs.get(semconv.DASK_WORKER_LOST_KILLED_TASKS)),
        held=as_int(attrs.get(semconv.DASK_WORKER_LOST_HELD)),
        process_memory=as_int(attrs.get(semconv.DASK_WORKER_LOST_PROCESS_MEMORY)),
        memory_limit=as_int(attrs.get(semconv.DASK_WORKER_LOST_MEMORY_LIMIT)),
    )


def size(value: float) -> str:
    """Bytes for people: binary units, 3 significant digits."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} TiB"  # pragma: no cover


# -- renderers -------------------------------------------------------------------------
def text_lines(memory: MemoryEvidence | None) -> list[str]:
    """The summary's memory section; nothing when the trace recorded no memory."""
    if memory is None:
        return []
    lines = [
        f"  memory: {size(memory.tree_peak)} of results held at most,"
        f" {size(memory.spilled)} spilled, {memory.pauses} worker pause(s),"
        f" {len(memory.lost_workers)} worker(s) lost"
    ]
    rows = [r for r in memory.spans if r.peak or r.spilled or r.pauses or r.workers_lost]
    for r in rows[:_TOP]:
        lines.append(f"    span {short(r.span, 35):<35} {_text_row(r)}")
    groups = [r for r in memory.groups if r.peak or r.spilled or r.pauses or r.workers_lost]
    if groups:
        for r in groups[:5]:
            name = f"group {short(r.group, 34)}"
            lines.append(f"    {name:<40} {_text_row(r)}  (in {r.span!r})")
    for w in memory.lost_workers[:_TOP]:
        killed = f", KilledWorker: {', '.join(w.killed_tasks)}" if w.killed_tasks else ""
        lines.append(
            f"    worker {w.worker} lost running {', '.join(w.tasks) or 'nothing'}"
            f" ({', '.join(w.groups)}) in {w.span!r}{killed}; last reported"
            f" {size(w.process_memory)} of {size(w.memory_limit)}, held {size(w.held)}"
        )
    return lines


def _text_row(r: MemoryRow) -> str:
    out = f"peak {size(r.peak):>10}  spilled {size(r.spilled):>10}"
    if r.unspilled:
        out += f"  read back {size(r.unspilled)}"
    if r.pauses:
        out += f"  {r.pauses} pause(s) {seconds(r.pause_seconds)}"
    if r.workers_lost:
        out += f"  {r.workers_lost} worker(s) lost"
    return out


def section(memory: MemoryEvidence | None) -> str:
    """The page's memory section (escaped); empty when the trace recorded no memory."""
    if memory is None:
        return ""
    headers = [
        ("name", "span"),
        ("name", "task group"),
        ("num", "peak held"),
        ("num", "held at end"),
        ("num", "spilled"),
        ("num", "read back"),
        ("num", "pauses"),
        ("num", "paused"),
        ("num", "workers lost"),
    ]
    rows = [
        [
            ("name", escape(short(r.span, 80))),
            ("name", escape(short(r.group, 80))),
            ("num", size(r.peak)),
            ("num", size(r.held)),
            ("num", size(r.spilled)),
            ("num", size(r.unspilled)),
            ("num", str(r.pauses)),
            ("num", seconds(r.pause_seconds)),
            ("num", str(r.workers_lost)),
        ]
        for r in [*memory.spans[:_TOP], *memory.groups[:_TOP]]
    ]
    left_out = len(memory.spans) + len(memory.groups) - len(rows)
    lost = "".join(
        f"<li>{escape(w.worker)} lost running {escape(', '.join(w.tasks))}"
        f" ({escape(', '.join(w.groups))}) in {escape(w.span)}"
        + (f", <b>KilledWorker</b>: {escape(', '.join(w.killed_tasks))}" if w.killed_tasks else "")
        + f"; last reported {size(w.process_memory)} of {size(w.memory_limit)},"
        f" held {size(w.held)}</li>"
        for w in memory.lost_workers[:_TOP]
    )
    return (
        '<section id="memory"><h2>Memory</h2>'
        f"<p>{size(memory.tree_peak)} of results held at most, {size(memory.spilled)}"
        f" spilled to disk, {memory.pauses} worker pause(s),"
        f" {len(memory.lost_workers)} worker(s) lost.</p>"
        + table(headers, rows)
        + more(left_out, "spans and task groups")
        + (f"<ul>{lost}</ul>" if lost else "")
        + "</section>"
    )


def as_json(memory: MemoryEvidence | None) -> dict[str, Any] | None:
    """The evidence as plain JSON values (bytes as integers, seconds as floats)."""
    if memory is None:
        return None

    def row(r: MemoryRow) -> dict[str, Any]:
        return {
            "span": r.span,
            "group": r.group,
            "peak_bytes": r.peak,
            "held_bytes": r.held,
            "spilled_bytes": r.spilled,
            "unspilled_bytes": r.unspilled,
            "pauses": r.pauses,
            "pause_seconds": r.pause_seconds,
            "workers_lost": r.workers_lost,
        }

    return {
        "tree_peak_bytes": memory.tree_peak,
        "spans": [row(r) for r in memory.spans],
        "groups": [row(r) for r in memory.groups],
        "lost_workers": [
            {
                "time_ns": w.time_ns,
                "span": w.span,
                "worker": w.worker,
                "tasks": list(w.tasks),
                "groups": list(w.groups),
                "killed_tasks": list(w.killed_tasks),
                "held_bytes": w.held,
                "process_memory_bytes": w.process_memory,
                "memory_limit_bytes": w.memory_limit,
            }
            for w in memory.lost_workers
        ],
    }
