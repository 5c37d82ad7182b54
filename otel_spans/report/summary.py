"""The plain-text summary ``otel-spans report`` prints for each workflow."""

from __future__ import annotations

from collections.abc import Sequence

from otel_spans.analysis.workflow import Analysis
from otel_spans.records import Finding
from otel_spans.report import diagnose, flame, memory
from otel_spans.report.build import BuiltWorkflow
from otel_spans.report.load import LoadedProfile

_TOP = 5


def render(
    built: BuiltWorkflow,
    analysis: Analysis,
    profiles: Sequence[LoadedProfile] = (),
    findings: Sequence[Finding] | None = None,
) -> str:
    """The diagnosis (``findings``: computed here when None), then the timeline of the
    Dask spans, critical path, bottlenecks and efficiency."""
    wf = built.workflow
    eff = analysis.efficiency
    path = analysis.critical_path
    lines = [
        f"workflow {wf.name!r}  (trace {built.trace_id})",
        f"  wall time {eff.wall_s:.3f}s, {wf.task_count} tasks"
        f" ({len(wf.tasks)} {built.granularity} analysed)",
    ]
    if built.task_states:
        states = ", ".join(f"{n} {state}" for state, n in built.task_states.items())
        lines.append(f"  tasks by state: {states}")
    if eff.efficiency is not None:
        lines.append(
            f"  parallel efficiency {eff.efficiency:.1%}: {eff.busy_s:.2f} of"
            f" {eff.thread_s:.2f} thread-seconds offered were busy, {eff.idle_s or 0:.2f}"
            f" idle (from {eff.basis}); sequential {eff.sequential_s:.3f}s,"
            f" speedup {eff.speedup or 0:.2f}x"
        )
    else:
        lines.append(f"  sequential {eff.sequential_s:.3f}s (thread counts unknown)")
    lines.extend(
        diagnose.summary_lines(diagnose.findings(built, analysis) if findings is None else findings)
    )
    lines.append("  timeline:")
    origin = wf.start_ns
    for tags, start, end in built.spans[:50]:
        indent = "  " * (len(tags) - 1)
        label = f"{indent}{tags[-1] if tags else '?'}"
        lines.append(
            f"    {label[:48]:<48} +{(start - origin) / 1e9:8.3f}s {(end - start) / 1e9:8.3f}s"
        )
    if len(built.spans) > 50:
        lines.append(f"    … {len(built.spans) - 50} more spans")
    if built.granularity != "tasks":
        lines.append(
            "  critical path over task groups (task spans are sampled; set"
            " otel-spans.traces.tasks.mode: all for a task-level path):"
        )
    else:
        lines.append("  critical path:")
    nodes = "task groups" if built.granularity != "tasks" else "tasks"
    of_wall = f" ({path.length_s / path.wall_s:.0%} of wall)" if path.wall_s else ""
    lines.append(
        f"    {len(path.steps)} {nodes}, {path.length_s:.3f}s of work{of_wall}"
        f" ({path.compute_s:.3f}s compute, {path.transfer_s:.3f}s transfer),"
        f" {path.gap_s:.3f}s waiting: {path.client_s:.3f}s on the client between a result"
        f" and the next submission, {path.scheduling_s:.3f}s scheduling and queueing,"
        f" {path.tail_s:.3f}s after the last task"
    )
    for step in path.steps[:20]:
        lines.append(f"    → {readable_key(step.task.key, 60)}  {step.compute_s:.3f}s")
    if len(path.steps) > 20:
        lines.append(f"    … {len(path.steps) - 20} more steps")
    if analysis.bottlenecks:
        lines.append("  bottlenecks (share of task time | of the critical path | of wall time):")
        for b in analysis.bottlenecks[:_TOP]:
            lines.append(
                f"    {b.prefix[:40]:<40} {b.share:6.1%} | {b.critical_share:6.1%}"
                f" | {b.wall_share:6.1%}  ({b.tasks} tasks, {b.seconds:.3f}s)"
            )
    if analysis.stragglers:
        lines.append("  stragglers:")
        for s in analysis.stragglers[:_TOP]:
            lines.append(
                f"    {readable_key(s.task.key, 50):<50} {s.seconds:.3f}s"
                f" = {s.ratio:.1f}× its prefix median"
            )
    if analysis.activities:
        lines.append("  worker time by activity:")
        for a in analysis.activities[:8]:
            lines.append(f"    {a.name[:40]:<40} {a.seconds:9.3f}s {a.share:6.1%}")
    lines.extend(memory.text_lines(built.memory))
    if profiles:
        lines.append("  hot code (the function running itself most, per profiled prefix):")
        lines.extend(flame.summary_lines(profiles))
    return "\n".join(lines)


def readable_key(key: str, width: int) -> str:
    """A task key cut to ``width`` characters without losing what tells tasks apart:
    a tuple key keeps its indices (``('random_sample-9f1e…', 3, 4)``), and any other
    its end, where Dask puts the index (``sum-aggregate-…-7``)."""
    if len(key) <= width:
        return key
    if key.startswith("(") and "," in key:
        name, indices = key.split(",", 1)
        room = width - len(indices) - 2
        if room >= 8:
            return f"{name[:room]}…,{indices}"
    half = (width - 1) // 2
    return f"{key[: width - 1 - half]}…{key[-half:]}"
