"""A plain-text timeline of traces: one block per trace, spans indented under parents."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from otel_spans import semconv
from otel_spans.report.load import LoadedSpan

_ERROR = 2


def render(spans: Iterable[LoadedSpan]) -> str:
    """Render every trace as an indented tree with offsets and durations in seconds."""
    by_trace: dict[str, list[LoadedSpan]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    ordered = sorted(by_trace.items(), key=lambda kv: min(s.start_ns for s in kv[1]))
    return "\n\n".join(_render_trace(trace_id, members) for trace_id, members in ordered)


def _render_trace(trace_id: str, members: list[LoadedSpan]) -> str:
    origin = min(s.start_ns for s in members)
    ids = {s.span_id for s in members}
    children: dict[str, list[LoadedSpan]] = defaultdict(list)
    for s in members:
        children[s.parent_span_id if s.parent_span_id in ids else ""].append(s)
    lines = [f"trace {trace_id}"]
    # Iterative depth-first walk: a deep span tree must not hit the recursion limit.
    stack = [(s, 0) for s in sorted(children[""], key=_order, reverse=True)]
    while stack:
        s, depth = stack.pop()
        # dask.span.tasks in files from otel-spans 0.1
        tasks = s.attributes.get(semconv.DASK_SPAN_TASK_COUNT, s.attributes.get("dask.span.tasks"))
        extra = f"  {tasks} tasks" if tasks is not None else ""
        if s.status_code == _ERROR:
            extra += f"  ERROR: {s.error}"
        lines.append(
            f"  {'  ' * depth}{s.name:<{max(1, 40 - 2 * depth)}} "
            f"+{(s.start_ns - origin) / 1e9:7.3f}s  {s.duration_s:7.3f}s{extra}"
        )
        stack.extend((c, depth + 1) for c in sorted(children[s.span_id], key=_order, reverse=True))
    return "\n".join(lines)


def _order(span: LoadedSpan) -> tuple[int, str]:
    return (span.start_ns, span.name)
