"""Loaded spans become workflows: one per root Dask span, ready for the analysis.

A workflow is analysed task by task when its trace holds every task run (task spans in
mode ``all``: no group reports dropped task spans); otherwise at the granularity the
trace keeps in full, task groups, using the dependency links between group spans. The
result says which one it is, so the report never presents a sampled critical path as
the real one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from otel_spans import semconv
from otel_spans.analysis.model import Phase, SpanTimes, TaskRun, ThreadInterval, Workflow
from otel_spans.report.load import LoadedSpan, as_int
from otel_spans.report.memory import MemoryEvidence, evidence


@dataclass(frozen=True)
class BuiltWorkflow:
    workflow: Workflow
    #: "tasks" (every task run is in the trace) or "task groups" (task spans sampled).
    granularity: str
    #: The Dask spans of the workflow, for the renderers.
    spans: tuple[SpanTimes, ...]
    trace_id: str
    #: Tasks of the whole workflow by state, from its root's latest export
    #: (``dask.span.task_states.*``, exported totals); empty when not recorded.
    task_states: Mapping[str, int] = field(default_factory=dict)
    #: The exported Dask spans (every export) and task-group spans of the workflow,
    #: for comparisons and lookups.
    dask_spans: tuple[LoadedSpan, ...] = ()
    group_spans: tuple[LoadedSpan, ...] = ()
    #: What its spans and task groups held, spilled, paused and lost
    #: (``dask.span.memory.*``); None when the trace recorded no memory.
    memory: MemoryEvidence | None = None
    #: The task runs the trace holds (every run at granularity "tasks", else the
    #: sampled ones: each group's slowest among them), for the diagnosis.
    task_runs: tuple[TaskRun, ...] = ()


def _tags(span: LoadedSpan) -> tuple[str, ...]:
    tags = span.attributes.get(semconv.DASK_SPAN_TAGS)
    if not isinstance(tags, list):
        # files from otel-spans 0.1 carry the tags as the array dask.span.name
        tags = span.attributes.get(semconv.DASK_SPAN_NAME)
    return tuple(str(t) for t in tags) if isinstance(tags, list) else (span.name,)


def build_workflows(
    spans: Iterable[LoadedSpan], activity: Mapping[str, Mapping[str, float]] | None = None
) -> list[BuiltWorkflow]:
    """Group spans into workflows; see the module docstring."""
    dask: dict[tuple[str, str], LoadedSpan] = {}
    groups: list[LoadedSpan] = []
    tasks: dict[tuple[str, str], LoadedSpan] = {}
    others: list[LoadedSpan] = []
    for s in spans:
        attrs = s.attributes
        if semconv.DASK_SPAN_ID in attrs:
            dask[(s.trace_id, s.span_id)] = s
        elif semconv.DASK_TASK_GROUP_NAME in attrs:
            groups.append(s)
        elif semconv.DASK_TASK_KEY in attrs:
            tasks[(s.trace_id, s.span_id)] = s
        else:
            others.append(s)

    def root_of(span: LoadedSpan) -> LoadedSpan:
        seen = 0
        while (span.trace_id, span.parent_span_id) in dask and seen < 10_000:
            span = dask[(span.trace_id, span.parent_span_id)]
            seen += 1
        return span

    roots: dict[tuple[str, str], list[LoadedSpan]] = defaultdict(list)
    for span in dask.values():
        root = root_of(span)
        roots[(root.trace_id, root.span_id)].append(span)
    group_root: dict[tuple[str, str], tuple[str, str]] = {}
    groups_of: dict[tuple[str, str], list[LoadedSpan]] = defaultdict(list)
    for g in groups:
        parent = dask.get((g.trace_id, g.parent_span_id))
        if parent is None:
            continue
        root = root_of(parent)
        group_root[(g.trace_id, g.span_id)] = (root.trace_id, root.span_id)
        groups_of[(root.trace_id, root.span_id)].append(g)
    submitted = {
        (g.trace_id, g.span_id): as_int(g.attributes.get(semconv.DASK_TASK_GROUP_SUBMITTED)) or None
        for g in groups
    }
    tasks_of: dict[tuple[str, str], list[LoadedSpan]] = defaultdict(list)
    for t in tasks.values():
        root_key = group_root.get((t.trace_id, t.parent_span_id))
        if root_key is not None:
            tasks_of[root_key].append(t)
    phases_of: dict[tuple[str, str], list[LoadedSpan]] = defaultdict(list)
    for p in others:
        if (p.trace_id, p.parent_span_id) in tasks:
            phases_of[(p.trace_id, p.parent_span_id)].append(p)

    out = []
    for root_key, members in roots.items():
        root = dask[root_key]
        name = "/".join(_tags(root))
        start = min(s.start_ns for s in members)
        end = max(s.end_ns for s in members)
        its_groups = groups_of.get(root_key, [])
        its_tasks = tasks_of.get(root_key, [])
        complete = bool(its_tasks) and all(
            not g.attributes.get(semconv.DASK_TASK_GROUP_TASK_SPANS_DROPPED) for g in its_groups
        )
        task_runs = tuple(
            _task_run(
                t,
                phases_of.get((t.trace_id, t.span_id), []),
                submitted.get((t.trace_id, t.parent_span_id)),
            )
            for t in its_tasks
        )
        runs = task_runs if complete else _group_runs(its_groups)
        workflow = Workflow(
            name=name,
            start_ns=start,
            end_ns=max(end, start),
            tasks=runs,
            threads=_threads(root, end),
            activity_seconds=run_seconds(members) or dict((activity or {}).get(_tags(root)[0], {})),
            compute_seconds=_compute_seconds(root, members),
        )
        spans_times = tuple(
            (_tags(s), s.start_ns, max(s.end_ns, s.start_ns))
            for s in sorted(members, key=lambda s: s.start_ns)
        )
        granularity = "tasks" if complete else "task groups"
        out.append(
            BuiltWorkflow(
                workflow,
                granularity,
                spans_times,
                root.trace_id,
                _task_states(root, members),
                tuple(members),
                tuple(its_groups),
                evidence(members, its_groups),
                task_runs,
            )
        )
    out.sort(key=lambda b: b.workflow.start_ns)
    return out


def _compute_seconds(root: LoadedSpan, members: Iterable[LoadedSpan]) -> float | None:
    """The compute time of every task of the workflow, as the scheduler summed it at the
    root's latest export (``dask.workflow.sequential_time``); None when not recorded."""
    uuid = root.attributes.get(semconv.DASK_SPAN_ID)
    found = [
        s.attributes[semconv.WORKFLOW_SEQUENTIAL_TIME]
        for s in members
        if s.attributes.get(semconv.DASK_SPAN_ID) == uuid
        and _number(s.attributes.get(semconv.WORKFLOW_SEQUENTIAL_TIME))
    ]
    return float(max(found)) if found else None


def _task_states(root: LoadedSpan, members: Iterable[LoadedSpan]) -> dict[str, int]:
    """The root's task counts by state at its latest export (they only grow)."""
    uuid = root.attributes.get(semconv.DASK_SPAN_ID)
    exports = [s for s in members if s.attributes.get(semconv.DASK_SPAN_ID) == uuid]
    latest = max(
        exports,
        key=lambda s: as_int(s.attributes.get(semconv.DASK_SPAN_CONTINUATION)),
        default=root,
    )
    prefix = semconv.DASK_SPAN_TASK_STATES_PREFIX
    return {
        key[len(prefix) :]: as_int(latest.attributes.get(key))
        for key in sorted(latest.attributes)
        if key.startswith(prefix) and as_int(latest.attributes.get(key))
    }


#: ``dask.span.run.time.<activity>`` names the activity as an attribute part
#: (``thread_cpu``); Dask's own names (``thread-cpu``, ``idle or other spans``).
_IDLE_PART = "idle_or_other_spans"


def run_seconds(members: Iterable[LoadedSpan]) -> dict[str, float]:
    """A workflow's worker time by activity: its Dask spans' per-run attributes summed
    (every export of every span of this run, and no other run of the same name, which
    the metrics files, summed by root name, would mix in)."""
    out: dict[str, float] = {}
    for span in members:
        for key, value in span.attributes.items():
            if key.startswith(semconv.DASK_SPAN_RUN_TIME_PREFIX) and _number(value):
                part = key[len(semconv.DASK_SPAN_RUN_TIME_PREFIX) :]
                name = semconv.IDLE_ACTIVITY if part == _IDLE_PART else part.replace("_", "-")
                out[name] = out.get(name, 0.0) + value
    return out


def _task_run(task: LoadedSpan, phases: list[LoadedSpan], submitted: int | None) -> TaskRun:
    attrs = task.attributes
    compute = [p for p in phases if p.name == "compute"]
    start = min((p.start_ns for p in compute), default=task.start_ns)
    end = max((p.end_ns for p in compute), default=task.end_ns)
    transfers = tuple(
        Phase(
            p.name,
            p.start_ns,
            max(p.end_ns, p.start_ns),
            p.attributes.get(semconv.DASK_PHASE_SOURCE),
        )
        for p in phases
        if p.name != "compute"
    )
    deps = attrs.get(semconv.DASK_TASK_DEPENDENCIES) or []
    thread = attrs.get(semconv.DASK_WORKER_THREAD)
    return TaskRun(
        key=str(attrs[semconv.DASK_TASK_KEY]),
        prefix=str(attrs.get(semconv.DASK_TASK_PREFIX, task.name)),
        group=str(attrs.get(semconv.DASK_TASK_GROUP, "")),
        worker=str(attrs.get(semconv.DASK_WORKER_ADDRESS, "")),
        thread=thread if isinstance(thread, int) else None,
        start_ns=start,
        end_ns=max(end, start),
        dependencies=tuple(str(d) for d in deps),
        transfers=transfers,
        state=str(attrs.get(semconv.DASK_TASK_STATE, "memory")),
        nbytes=int(attrs.get(semconv.DASK_TASK_NBYTES, 0) or 0),
        submitted_ns=submitted,
    )


def _group_runs(groups: list[LoadedSpan]) -> tuple[TaskRun, ...]:
    name_of = {g.span_id: str(g.attributes[semconv.DASK_TASK_GROUP_NAME]) for g in groups}
    return tuple(
        TaskRun(
            key=name_of[g.span_id],
            prefix=g.name,
            group=name_of[g.span_id],
            worker="",
            thread=None,
            start_ns=g.start_ns,
            end_ns=max(g.end_ns, g.start_ns),
            dependencies=tuple(name_of[sid] for _, sid, _ in g.links if sid in name_of),
            state="erred"
            if as_int(g.attributes.get(semconv.DASK_TASK_GROUP_TASK_STATES_ERRED))
            else "memory",
            # dask.task_group.tasks in files from otel-spans 0.1
            count=as_int(
                g.attributes.get(semconv.DASK_TASK_GROUP_TASK_COUNT),
                as_int(g.attributes.get("dask.task_group.tasks"), 1),
            ),
            submitted_ns=as_int(g.attributes.get(semconv.DASK_TASK_GROUP_SUBMITTED)) or None,
        )
        for g in groups
    )


def _threads(root: LoadedSpan, end: int) -> tuple[ThreadInterval, ...]:
    changes = sorted(
        (t, int(a.get(semconv.DASK_NTHREADS, 0)))
        for name, t, a in root.events
        if name == semconv.EVENT_NTHREADS
    )
    out = []
    for i, (t, n) in enumerate(changes):
        t_end = changes[i + 1][0] if i + 1 < len(changes) else end
        if t_end > t and n > 0:
            out.append(ThreadInterval(t, t_end, n))
    return tuple(out)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
