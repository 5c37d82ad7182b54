"""``otel-spans report PATH --key KEY | --group NAME``: everything recorded for one task
or task group, as text.

The question after "which group is the bottleneck" is "what happened to it": its
attempts, worker, timings, phases, errors and the groups it waited for. Everything
printed is what the trace holds; a task whose run was not sampled has no span of its
own, and the lookup says so rather than printing nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from otel_spans import semconv
from otel_spans.report.load import LoadedSpan

#: Most task spans listed under a group (slowest first).
MAX_LISTED_TASKS = 20


class _Index:
    def __init__(self, spans: Iterable[LoadedSpan]):
        self.by_id: dict[tuple[str, str], LoadedSpan] = {}
        self.children: dict[tuple[str, str], list[LoadedSpan]] = defaultdict(list)
        for span in spans:
            self.by_id[(span.trace_id, span.span_id)] = span
        for span in self.by_id.values():
            if span.parent_span_id:
                self.children[(span.trace_id, span.parent_span_id)].append(span)

    def parent(self, span: LoadedSpan) -> LoadedSpan | None:
        return self.by_id.get((span.trace_id, span.parent_span_id))

    def dask_span_name(self, span: LoadedSpan) -> str:
        """The name of the Dask span a task or group span ran in."""
        node: LoadedSpan | None = span
        for _ in range(3):
            if node is None:
                break
            name = node.attributes.get(semconv.DASK_SPAN_NAME)
            if semconv.DASK_SPAN_ID in node.attributes and isinstance(name, str):
                return name
            node = self.parent(node)
        return "?"

    def kids(self, span: LoadedSpan) -> list[LoadedSpan]:
        return sorted(self.children.get((span.trace_id, span.span_id), []), key=_start)


def render(
    spans: Iterable[LoadedSpan], *, key: str | None = None, group: str | None = None
) -> str | None:
    """Everything recorded for the task ``key`` or the task group ``group`` (exactly
    one of them); ``None`` when the spans hold nothing of it."""
    if (key is None) == (group is None):
        raise ValueError("give exactly one of key and group")
    return _key(spans, key) if key is not None else _group(spans, group or "")


def _start(span: LoadedSpan) -> int:
    return span.start_ns


def _value(value: Any) -> str:
    text = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
    return text if len(text) <= 400 else text[:400] + "…"


def _attributes(attributes: Mapping[str, Any], indent: str) -> list[str]:
    return [f"{indent}{key} = {_value(attributes[key])}" for key in sorted(attributes)]


def _header(span: LoadedSpan, what: str, index: _Index) -> list[str]:
    status = {2: "ERROR", 1: "OK"}.get(span.status_code, "unset")
    message = f": {span.error}" if span.error else ""
    return [
        f"{what} {span.name!r} in Dask span {index.dask_span_name(span)!r}"
        f"  (trace {span.trace_id}, span {span.span_id})",
        f"  {span.duration_s:.3f}s, status {status}{message}",
    ]


def _events(span: LoadedSpan) -> list[str]:
    lines = []
    for name, time_ns, attributes in span.events:
        lines.append(f"  event {name} at +{(time_ns - span.start_ns) / 1e9:.3f}s")
        lines.extend(_attributes(attributes, "      "))
    return lines


def _key(spans: Iterable[LoadedSpan], key: str) -> str | None:
    """Every recorded run of the task ``key`` (its ``dask.task.key``, as Dask prints
    it: tuple keys as ``('name', 0)``); ``None`` when the trace has no span of it."""
    index = _Index(spans)
    runs = [
        s
        for s in index.by_id.values()
        if str(s.attributes.get(semconv.DASK_TASK_KEY, "")) == key.strip()
    ]
    if not runs:
        return None
    lines: list[str] = []
    for run in sorted(runs, key=_start):
        lines += _header(run, "task", index)
        group = index.parent(run)
        if group is not None:
            lines.append(f"  task group {_group_name(group)}")
        lines += _attributes(run.attributes, "    ")
        lines += _events(run)
        for phase in index.kids(run):
            source = phase.attributes.get(semconv.DASK_PHASE_SOURCE)
            origin = f" from {source}" if source else ""
            lines.append(
                f"  phase {phase.name} +{(phase.start_ns - run.start_ns) / 1e9:.3f}s"
                f" {phase.duration_s:.3f}s{origin}"
            )
        lines.append("")
    return "\n".join(lines)


def _group(spans: Iterable[LoadedSpan], name: str) -> str | None:
    """Every task group whose name (``dask.task_group.name``) or prefix is ``name``:
    its recorded totals, the groups it depended on, and its kept task runs."""
    index = _Index(spans)
    wanted = name.strip()
    groups = [
        s
        for s in index.by_id.values()
        if semconv.DASK_TASK_GROUP_NAME in s.attributes
        and wanted in (_group_name(s), s.attributes.get(semconv.DASK_TASK_PREFIX))
    ]
    if not groups:
        return None
    lines: list[str] = []
    for group in sorted(groups, key=_start):
        lines += _header(group, "task group", index)
        lines += _attributes(group.attributes, "    ")
        lines += _events(group)
        upstream = [
            _group_name(linked)
            for trace_id, span_id, _ in group.links
            if (linked := index.by_id.get((trace_id, span_id))) is not None
        ]
        if upstream:
            lines.append(f"  depends on {', '.join(sorted(set(upstream)))}")
        lines += _task_runs(index.kids(group))
        lines.append("")
    return "\n".join(lines)


def _group_name(span: LoadedSpan) -> str:
    return str(span.attributes.get(semconv.DASK_TASK_GROUP_NAME, span.name))


def _task_runs(kids: Sequence[LoadedSpan]) -> list[str]:
    runs = [k for k in kids if semconv.DASK_TASK_KEY in k.attributes]
    if not runs:
        return ["  no task run of it was sampled"]
    runs.sort(key=lambda s: -s.duration_s)
    lines = [f"  {len(runs)} task runs in the trace (slowest first):"]
    for run in runs[:MAX_LISTED_TASKS]:
        state = run.attributes.get(semconv.DASK_TASK_STATE, "?")
        worker = run.attributes.get(semconv.DASK_WORKER_ADDRESS, "?")
        why = run.attributes.get(semconv.DASK_TASK_SAMPLED_BECAUSE)
        because = f", kept as {why}" if why else ""
        lines.append(
            f"    {str(run.attributes[semconv.DASK_TASK_KEY])[:60]:<60} {run.duration_s:8.3f}s"
            f"  {state} on {worker}{because}"
        )
    if len(runs) > MAX_LISTED_TASKS:
        lines.append(f"    … {len(runs) - MAX_LISTED_TASKS} more")
    return lines
