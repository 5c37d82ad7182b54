"""Every span name, attribute key, event name and unit that otel-spans emits, once.

``docs/telemetry.md`` is the contract these constants implement; a test checks that
every constant here is documented there, so the two cannot drift apart.

Keys from the OpenTelemetry semantic conventions are used where one exists
(``service.*``, ``code.*``, ``exception.*``); everything Dask-specific lives under
``dask.*``.
"""

from __future__ import annotations

import functools
from typing import Final, NamedTuple

#: The characters an attribute key of ours may hold (the naming rules: lowercase
#: letters, digits, ``_``, and ``.`` between namespaces).
_KEY_PART = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")

#: Instrumentation scope of everything the scheduler emits (its version: the package's).
SCOPE_NAME: Final = "otel_spans"
#: The semantic conventions these names follow: the schema URL of every scope we encode.
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.33.0"
#: ``telemetry.distro.name``: the bytes are otel-spans', the SDK's only in part.
DISTRO_NAME: Final = "otel-spans"


@functools.lru_cache(maxsize=1024)  # a few dozen names, read on every export
def key_part(name: str) -> str:
    """A Dask name (task state, action, activity) as the last part of an attribute key.

    The one place Dask's names become key parts: lowercase, every character other
    than ``a-z``, ``0-9`` and ``_`` as ``_`` (``no-worker`` -> ``no_worker``,
    ``disk-read`` -> ``disk_read``, ``idle or other spans`` -> ``idle_or_other_spans``).
    Metric attribute *values* keep Dask's spelling.
    """
    lowered = name.lower()
    if _KEY_PART.issuperset(lowered):
        return lowered
    return "".join(c if c in _KEY_PART else "_" for c in lowered)


# -- resource -------------------------------------------------------------------------
SERVICE_NAME: Final = "service.name"
SERVICE_INSTANCE_ID: Final = "service.instance.id"
SERVICE_NAMESPACE: Final = "service.namespace"
TELEMETRY_DISTRO_NAME: Final = "telemetry.distro.name"
TELEMETRY_DISTRO_VERSION: Final = "telemetry.distro.version"
DASK_SCHEDULER_ADDRESS: Final = "dask.scheduler.address"
DASK_CLUSTER_NAME: Final = "dask.cluster.name"
DASK_VERSION: Final = "dask.distributed.version"

#: ``service.name`` when neither otel-spans.service-name, OTEL_SERVICE_NAME nor
#: OTEL_RESOURCE_ATTRIBUTES set one.
DEFAULT_SERVICE_NAME: Final = "dask"

# -- the Dask span ----------------------------------------------------------------------
#: The Dask span uuid (``distributed.spans.Span.id``); the OTel ids derive from it.
DASK_SPAN_ID: Final = "dask.span.id"
#: All tags of the span, root first (string array).
DASK_SPAN_TAGS: Final = "dask.span.tags"
#: The tags joined with "/": one string, the same key and meaning on spans, logs and
#: metrics (where it is bounded by metrics.max-span-names).
DASK_SPAN_NAME: Final = "dask.span.name"
#: 0 for the first export of a Dask span, n for its n-th continuation.
DASK_SPAN_CONTINUATION: Final = "dask.span.continuation"
#: False when the span was exported unfinished (scheduler shutdown).
DASK_SPAN_DONE: Final = "dask.span.done"
#: Number of tasks in the span tree, and by state: ``dask.span.task_states.<state>``.
DASK_SPAN_TASK_COUNT: Final = "dask.span.task_count"
DASK_SPAN_TASK_STATES_PREFIX: Final = "dask.span.task_states."
DASK_SPAN_TASK_GROUPS: Final = "dask.span.task_groups"
DASK_SPAN_NBYTES: Final = "dask.span.nbytes"
DASK_SPAN_TASK_DURATION: Final = "dask.span.task_duration"
DASK_SPAN_ACTIVE_CPU_SECONDS: Final = "dask.span.active_cpu_seconds"
DASK_SPAN_ENQUEUED: Final = "dask.span.enqueued"
DASK_SPAN_COMPUTE_START: Final = "dask.span.compute_start"
DASK_SPAN_CODE_SNIPPET: Final = "dask.span.code.snippet"
DASK_SPAN_CODE_COUNT: Final = "dask.span.code.count"
CODE_FILE_PATH: Final = "code.file.path"
CODE_LINE_NUMBER: Final = "code.line.number"
#: On log records of Python's logging: the function that logged, and its thread.
CODE_FUNCTION_NAME: Final = "code.function.name"
THREAD_NAME: Final = "thread.name"

DASK_SPAN_TASK_STATES_MEMORY: Final = "dask.span.task_states.memory"

# -- memory of a Dask span (its own tasks) and of a task group: span attributes, and the
# -- metrics of the same names (docs/telemetry.md, Memory) ------------------------------
#: Bytes of the results of its own tasks held at once on the cluster (scheduler's
#: ``nbytes`` of keys in memory, spilled ones included), at most, and at the export.
DASK_SPAN_MEMORY_PEAK: Final = "dask.span.memory.peak"
DASK_SPAN_MEMORY_HELD: Final = "dask.span.memory.held"
#: On roots: the same peak over the whole tree (every span of the workflow together).
DASK_SPAN_MEMORY_TREE_PEAK: Final = "dask.span.memory.tree_peak"
#: Bytes its own tasks wrote to disk to make room (spilled) and read back (unspilled).
DASK_SPAN_MEMORY_SPILLED: Final = "dask.span.memory.spilled"
DASK_SPAN_MEMORY_UNSPILLED: Final = "dask.span.memory.unspilled"
#: Worker memory pauses that overlapped its tasks on that worker, and their seconds.
DASK_SPAN_MEMORY_PAUSES: Final = "dask.span.memory.pauses"
DASK_SPAN_MEMORY_PAUSE_DURATION: Final = "dask.span.memory.pause_duration"
#: Workers removed unexpectedly while running or holding its tasks.
DASK_SPAN_MEMORY_WORKERS_LOST: Final = "dask.span.memory.workers_lost"
DASK_TASK_GROUP_MEMORY_PEAK: Final = "dask.task_group.memory.peak"
DASK_TASK_GROUP_MEMORY_HELD: Final = "dask.task_group.memory.held"
DASK_TASK_GROUP_MEMORY_SPILLED: Final = "dask.task_group.memory.spilled"
DASK_TASK_GROUP_MEMORY_UNSPILLED: Final = "dask.task_group.memory.unspilled"
DASK_TASK_GROUP_MEMORY_PAUSES: Final = "dask.task_group.memory.pauses"
DASK_TASK_GROUP_MEMORY_PAUSE_DURATION: Final = "dask.task_group.memory.pause_duration"
DASK_TASK_GROUP_MEMORY_WORKERS_LOST: Final = "dask.task_group.memory.workers_lost"
UNIT_PAUSES: Final = "{pause}"
UNIT_WORKERS: Final = "{worker}"
DASK_SPAN_TASK_STATES_ERRED: Final = "dask.span.task_states.erred"

# -- metric attributes (low cardinality only: never uuids, keys or addresses) -------------
#: The first tag: the workflow the span belongs to.
ATTR_SPAN_ROOT: Final = "dask.span.root"
#: The task prefix (also on task and task-group spans).
DASK_TASK_PREFIX: Final = "dask.task.prefix"
#: The state of a task: on metrics its final one, memory (computed) or erred; on task
#: spans the state the run ended in.
DASK_TASK_STATE: Final = "dask.task.state"
#: What a worker spent the time or bytes on (Dask's fine performance metrics).
ATTR_ACTIVITY: Final = "dask.activity"
#: Where P2P shuffle work happened (Dask's second key element of "p2p" metrics).
ATTR_P2P_WHERE: Final = "dask.p2p.where"
#: The context of a cluster-level worker metric (execute, gather-dep, get-data, p2p...).
ATTR_CONTEXT: Final = "dask.context"
#: Which share of the cluster's cost a ``dask.cluster.cost`` series is.
ATTR_COST_SHARE: Final = "dask.cost.share"
#: ``dask.cost.share`` values: the thread time Dask spans' tasks used, and the rest.
COST_SHARE_WORKFLOWS: Final = "workflows"
COST_SHARE_IDLE: Final = "idle"
ATTR_SIGNAL: Final = "otel_spans.signal"
ATTR_OUTCOME: Final = "otel_spans.outcome"
ATTR_LIMITED: Final = "otel_spans.attribute"
#: The value that replaces span names and prefixes beyond the cardinality budget.
OVERFLOW_VALUE: Final = "(overflow)"
#: ``otel_spans.attribute`` value counting series the SDK folded into its overflow point.
LIMITED_SERIES: Final = "(series)"
#: The attribute (value ``true``) of the one point of an instrument into which the
#: series past ``metrics.max-series`` are folded (the SDK's, and our histograms').
SDK_OVERFLOW: Final = "otel.metric.overflow"
#: A worker's address: on task spans, kill records and, bounded by
#: ``metrics.max-workers``, the worker memory gauges.
DASK_WORKER_ADDRESS: Final = "dask.worker.address"
#: Which part of a worker's memory a ``dask.worker.memory`` series is (Dask's
#: ``MemoryState``): ``managed`` (task results in RAM), ``unmanaged`` (the rest of the
#: process), ``spilled`` (task results on disk).
ATTR_MEMORY_TYPE: Final = "dask.memory.type"
MEMORY_TYPES: Final = ("managed", "unmanaged", "spilled")
#: Dask's synthetic activity: thread time of the span not attributed to its tasks.
IDLE_ACTIVITY: Final = "idle or other spans"
#: On erred task, task-group and Dask spans and on erred points of dask.task.duration:
#: the qualified type of the exception raised (task spans, the metric; group spans when
#: their tasks raised one type), else ERROR_TYPE_OTHER.
ERROR_TYPE: Final = "error.type"
#: ``error.type`` of a span some of whose tasks erred (the semantic conventions' fallback).
ERROR_TYPE_OTHER: Final = "_OTHER"
#: Every attribute key metric points carry (besides the resource's).
METRIC_ATTRIBUTES: Final = (
    DASK_SPAN_NAME,
    ATTR_SPAN_ROOT,
    DASK_TASK_PREFIX,
    DASK_TASK_STATE,
    ATTR_ACTIVITY,
    ATTR_P2P_WHERE,
    ATTR_CONTEXT,
    ATTR_COST_SHARE,
    ATTR_SIGNAL,
    ATTR_OUTCOME,
    ATTR_LIMITED,
    DASK_WORKER_ADDRESS,
    ATTR_MEMORY_TYPE,
    ERROR_TYPE,
)

# -- metrics: (name, unit) ------------------------------------------------------------
#: Per span, its own share of worker time/bytes/counts by prefix and activity.
M_EXECUTE_TIME: Final = "dask.span.execute.time"
M_EXECUTE_BYTES: Final = "dask.span.execute.bytes"
M_EXECUTE_COUNT: Final = "dask.span.execute.count"
M_P2P_TIME: Final = "dask.span.p2p.time"
M_P2P_BYTES: Final = "dask.span.p2p.bytes"
M_P2P_COUNT: Final = "dask.span.p2p.count"
M_SPAN_TASKS: Final = "dask.span.tasks"
M_SPAN_OUTPUT: Final = "dask.span.output"
M_SPAN_CPU_AVAILABLE: Final = "dask.span.cpu.available"
M_SPAN_COST: Final = "dask.span.cost"
M_SPAN_DURATION: Final = "dask.span.duration"
#: Gauges of every Dask span not exported yet (running): its own tasks by current state,
#: and the seconds since it appeared. A series disappears when its span is exported.
M_OPEN_TASKS: Final = "dask.span.open.tasks"
M_OPEN_ELAPSED: Final = "dask.span.open.elapsed"
#: Task states the dask.span.open.tasks gauge reports.
PROGRESS_STATES: Final = ("waiting", "queued", "processing", "no-worker", "memory", "erred")
M_TASK_DURATION: Final = "dask.task.duration"
#: Memory of every worker by ``dask.memory.type`` (one series per worker address, at
#: most ``metrics.max-workers``), its memory limit, and the cluster's sum by type.
M_WORKER_MEMORY: Final = "dask.worker.memory"
M_WORKER_MEMORY_LIMIT: Final = "dask.worker.memory_limit"
M_CLUSTER_MEMORY: Final = "dask.cluster.memory"
M_CLUSTER_TIME: Final = "dask.cluster.time"
M_CLUSTER_BYTES: Final = "dask.cluster.bytes"
M_CLUSTER_COUNT: Final = "dask.cluster.count"
#: Thread-seconds the cluster's workers offered (integral of ``Scheduler.total_nthreads``),
#: the part no Dask span's tasks used, and what both cost (see docs/telemetry.md, Cost).
M_CLUSTER_CPU_AVAILABLE: Final = "dask.cluster.cpu.available"
M_CLUSTER_CPU_IDLE: Final = "dask.cluster.cpu.idle"
M_CLUSTER_COST: Final = "dask.cluster.cost"
M_RECORDS: Final = "otel_spans.records"
M_OVERFLOW: Final = "otel_spans.cardinality.overflow"
M_INTERNAL_ERRORS: Final = "otel_spans.internal_errors"
#: 1 once the scheduler plugin switched its per-task hooks off after too many internal
#: errors (self-protection, see docs/telemetry.md); 0 while they run.
M_HOOKS_DISABLED: Final = "otel_spans.hooks.disabled"

UNIT_SECONDS: Final = "s"
UNIT_BYTES: Final = "By"
#: A dimensionless ratio (efficiency).
UNIT_RATIO: Final = "1"
#: Counts carry what they count as a UCUM annotation (the semantic conventions' rule).
UNIT_TASKS: Final = "{task}"
#: Dask's "count" fine performance metrics: occurrences of an activity.
UNIT_EVENTS: Final = "{event}"
UNIT_RECORDS: Final = "{record}"
UNIT_VALUES: Final = "{value}"
UNIT_ERRORS: Final = "{error}"
#: A 0/1 state. Not ``1``: Prometheus' OTLP translation names a gauge of unit ``1``
#: ``..._ratio`` while its client library's exposition does not, and the two metrics
#: paths must give one name.
UNIT_STATE: Final = "{state}"

#: Dask's metric units -> (execute metric, p2p metric, cluster metric, UCUM unit).
#: This export's share of the Dask span's own worker metrics (context ``execute``, all
#: prefixes), by Dask's unit and activity: ``dask.span.run.time.<activity>`` (seconds),
#: ``.bytes.<activity>``, ``.count.<activity>``; the activity with every character
#: other than a letter or a digit as ``_`` (``thread-cpu`` -> ``thread_cpu``).
DASK_SPAN_RUN_TIME_PREFIX: Final = "dask.span.run.time."
DASK_SPAN_RUN_BYTES_PREFIX: Final = "dask.span.run.bytes."
DASK_SPAN_RUN_COUNT_PREFIX: Final = "dask.span.run.count."
#: Dask's units -> the run breakdown's attribute prefix.
DASK_SPAN_RUN_PREFIXES: Final = {
    "seconds": DASK_SPAN_RUN_TIME_PREFIX,
    "bytes": DASK_SPAN_RUN_BYTES_PREFIX,
    "count": DASK_SPAN_RUN_COUNT_PREFIX,
}

DASK_UNITS: Final = {
    "seconds": (M_EXECUTE_TIME, M_P2P_TIME, M_CLUSTER_TIME, UNIT_SECONDS),
    "bytes": (M_EXECUTE_BYTES, M_P2P_BYTES, M_CLUSTER_BYTES, UNIT_BYTES),
    "count": (M_EXECUTE_COUNT, M_P2P_COUNT, M_CLUSTER_COUNT, UNIT_EVENTS),
}

#: On every Dask span of a workflow: the Dask client id that submitted its first graph
#: (roots only) and the OS user of the client (with otel_spans.span; roots only).
DASK_CLIENT_ID: Final = "dask.client.id"
DASK_CLIENT_USER: Final = "dask.client.user"

# -- task-group spans (children of their Dask span, named by the task prefix) -----------
DASK_TASK_GROUP_NAME: Final = "dask.task_group.name"
DASK_TASK_GROUP_TASK_COUNT: Final = "dask.task_group.task_count"
DASK_TASK_GROUP_TASK_STATES_MEMORY: Final = "dask.task_group.task_states.memory"
DASK_TASK_GROUP_TASK_STATES_ERRED: Final = "dask.task_group.task_states.erred"
DASK_TASK_GROUP_NBYTES: Final = "dask.task_group.nbytes"
#: Summed durations by action: ``dask.task_group.duration.<action>`` (compute, transfer...).
DASK_TASK_GROUP_DURATION_PREFIX: Final = "dask.task_group.duration."
DASK_TASK_GROUP_WORKERS: Final = "dask.task_group.workers"
#: Task runs on a worker left out of ``dask.task_group.workers`` (saturated).
DASK_TASK_GROUP_WORKERS_UNCOUNTED_RUNS: Final = "dask.task_group.workers_uncounted_runs"
#: When the client submitted the computation that created the group (epoch ns).
DASK_TASK_GROUP_SUBMITTED: Final = "dask.task_group.submitted"
#: Task spans of the group that were not exported (sampling, budget).
DASK_TASK_GROUP_TASK_SPANS_DROPPED: Final = "dask.task_group.task_spans.dropped"
DASK_TASK_GROUP_TASK_SPANS_KEPT: Final = "dask.task_group.task_spans.kept"
#: On links from a group span to the group spans it depends on.
DASK_LINK_KIND: Final = "dask.link.kind"
LINK_KIND_DEPENDENCY: Final = "dependency"
#: On the link from a root Dask span to the caller's span (link mode).
LINK_KIND_CALLER: Final = "caller"
#: The Dask annotation ``otel_spans.span`` puts on tasks: {"traceparent", "link"}. Read,
#: never emitted (that it equals SCOPE_NAME is a coincidence of naming).
ANNOTATION: Final = "otel_spans"
#: Key of the task metadata a worker sets when user code started spans in the task.
METADATA_CHILDREN: Final = "otel_spans.children"
#: Topic of the Dask event a worker logs when the ``scheduler_delay`` it shifts its
#: tasks' phases by changes (``{"delay": seconds}``): the scheduler undoes the shift.
CLOCK_EVENT_TOPIC: Final = "otel_spans.clock"

# -- task spans (sampled; children of their group span, named by the task prefix) --------
#: Besides DASK_TASK_PREFIX and DASK_TASK_STATE (under metric attributes):
DASK_TASK_KEY: Final = "dask.task.key"
DASK_TASK_GROUP: Final = "dask.task.group"
DASK_TASK_ATTEMPT: Final = "dask.task.attempt"
DASK_TASK_NBYTES: Final = "dask.task.nbytes"
DASK_TASK_TYPE: Final = "dask.task.type"
#: Why the task span was kept: erred, recomputed, slowest, ratio, all.
DASK_TASK_SAMPLED_BECAUSE: Final = "dask.task.sampled_because"
DASK_WORKER_THREAD: Final = "dask.worker.thread"
#: On phase spans (children of a task span, named by the action): the worker data
#: came from, for transfers.
DASK_PHASE_SOURCE: Final = "dask.phase.source"

# -- span events (on Dask, task-group and task spans; Dask's own events are logs) -----
EVENT_EXCEPTION: Final = "exception"
EXCEPTION_TYPE: Final = "exception.type"
EXCEPTION_MESSAGE: Final = "exception.message"
EXCEPTION_STACKTRACE: Final = "exception.stacktrace"


def qualified_type(module: str, qualname: str) -> str:
    """``exception.type`` and ``error.type`` of a class: ``module.QualName``, builtins
    bare (``ValueError``), as Python's tracebacks name them and the semantic
    conventions' examples do; ``__main__`` stays, since the name is read elsewhere."""
    return qualname if module == "builtins" else f"{module}.{qualname}"


#: One event per scheduler transition of an erred task (from Scheduler.story).
EVENT_TRANSITION: Final = "dask.transition"
DASK_TRANSITION_FROM: Final = "dask.transition.from"
DASK_TRANSITION_TO: Final = "dask.transition.to"
DASK_TRANSITION_STIMULUS: Final = "dask.transition.stimulus"
DASK_TRANSITION_RECOMMENDATIONS: Final = "dask.transition.recommendations"
#: Recommendations of the transition left out of the array above (beyond the most kept).
DASK_TRANSITION_RECOMMENDATIONS_DROPPED: Final = "dask.transition.recommendations_dropped"
#: One event per compute/persist/submit that fed the Dask span.
EVENT_COMPUTATION: Final = "dask.computation"
DASK_COMPUTATION_ID: Final = "dask.computation.id"
DASK_COMPUTATION_GROUPS: Final = "dask.computation.task_groups"


# -- logs -------------------------------------------------------------------------------
class Severity(NamedTuple):
    """An OTel log severity: the ``SeverityNumber`` backends filter on, and its text."""

    number: int
    text: str


#: The OTel severities (the first of each range; a range's 2-4 are finer steps).
SEVERITY_TRACE: Final = Severity(1, "TRACE")
SEVERITY_DEBUG: Final = Severity(5, "DEBUG")
SEVERITY_INFO: Final = Severity(9, "INFO")
SEVERITY_WARN: Final = Severity(13, "WARN")
SEVERITY_ERROR: Final = Severity(17, "ERROR")
SEVERITY_FATAL: Final = Severity(21, "FATAL")

#: Log attribute: the topic of a Dask structured event (``Scheduler.log_event``).
DASK_EVENT_TOPIC: Final = "dask.event.topic"
#: Log attribute: what happened (``msg["action"]`` when the event has one).
DASK_EVENT_ACTION: Final = "dask.event.action"
#: event_name of log records from Dask structured events.
LOG_DASK_EVENT: Final = "dask.event"
#: event_name of the log record emitted for each erred task.
LOG_TASK_ERRED: Final = "dask.task.erred"
#: Event name of the log record sent when a workflow (a root Dask span) starts: it
#: carries the trace and span ids at once, long before the trace itself arrives.
LOG_SPAN_STARTED: Final = "dask.span.started"
#: Event name of a log record holding Dask's statistical profile of one task prefix over
#: one finished workflow (``otel-spans.profile``): the body is folded stacks text.
LOG_PROFILE: Final = "dask.profile"
#: Profile attributes: samples in the profile, distinct stacks, stacks summed into the
#: "(other stacks)" line to fit ``profile-max-length``, workers that answered.
DASK_PROFILE_SAMPLES: Final = "dask.profile.samples"
DASK_PROFILE_STACKS: Final = "dask.profile.stacks"
DASK_PROFILE_FOLDED_STACKS: Final = "dask.profile.folded_stacks"
DASK_PROFILE_WORKERS: Final = "dask.profile.workers"
#: The workflow's link in a tracing UI (``otel-spans.trace-url``). Not ``url.full``,
#: which the conventions reserve for the URL of the request a span describes.
OTEL_SPANS_TRACE_URL: Final = "otel_spans.trace_url"

# -- workflow analysis (on root Dask spans, computed on the scheduler) --------------------
#: The root span's parallel efficiency (share of available thread time used), and the
#: histogram metric of it across workflows, which has the same name.
WORKFLOW_EFFICIENCY: Final = "dask.workflow.efficiency"
WORKFLOW_SPEEDUP: Final = "dask.workflow.speedup"
WORKFLOW_SEQUENTIAL_TIME: Final = "dask.workflow.sequential_time"
WORKFLOW_CRITICAL_PATH_GROUPS: Final = "dask.workflow.critical_path.groups"
WORKFLOW_CRITICAL_PATH_LENGTH: Final = "dask.workflow.critical_path.length"
WORKFLOW_BOTTLENECKS: Final = "dask.workflow.bottlenecks"
WORKFLOW_BOTTLENECK_SHARES: Final = "dask.workflow.bottleneck_shares"
#: Event on root spans: the cluster's thread count changed (attribute dask.nthreads).
EVENT_NTHREADS: Final = "dask.cluster.nthreads"
DASK_NTHREADS: Final = "dask.nthreads"
#: A worker was removed unexpectedly (died, killed by its nanny for memory, lost):
#: the event name of its log record and of the event on each Dask span it ran tasks of.
EVENT_WORKER_LOST: Final = "dask.worker.lost"
#: Its attributes: the tasks it was running (at most 32), their groups and Dask span
#: names, those that ended in ``KilledWorker``, and its last reported memory.
DASK_WORKER_LOST_TASKS: Final = "dask.worker.lost.tasks"
DASK_WORKER_LOST_GROUPS: Final = "dask.worker.lost.groups"
DASK_WORKER_LOST_SPANS: Final = "dask.worker.lost.spans"
DASK_WORKER_LOST_KILLED_TASKS: Final = "dask.worker.lost.killed_tasks"
DASK_WORKER_LOST_HELD: Final = "dask.worker.lost.held"
DASK_WORKER_LOST_PROCESS_MEMORY: Final = "dask.worker.lost.process_memory"
DASK_WORKER_LOST_SPILLED: Final = "dask.worker.lost.spilled"
DASK_WORKER_LOST_MEMORY_LIMIT: Final = "dask.worker.lost.memory_limit"
#: Task span attribute: keys of the task's dependencies (at most 32).
DASK_TASK_DEPENDENCIES: Final = "dask.task.dependencies"
#: Task span attribute: dependencies left out of ``dask.task.dependencies``.
DASK_TASK_DEPENDENCIES_DROPPED: Final = "dask.task.dependencies_dropped"

# -- diagnosis (root Dask spans of finished workflows; docs/telemetry.md, Diagnosis) -----
#: Most threads of one worker when the workflow finished (the GIL rule reads it).
WORKFLOW_WORKER_THREADS: Final = "dask.workflow.worker_threads"
#: Root span attribute: the finding ids, most severe first.
DIAGNOSIS_FINDINGS: Final = "dask.diagnosis.findings"
#: One event per finding on the root span, with these attributes and the finding's
#: numbers as ``dask.diagnosis.evidence.<name>``.
EVENT_DIAGNOSIS_FINDING: Final = "dask.diagnosis.finding"
DIAGNOSIS_FINDING_ID: Final = "dask.diagnosis.finding.id"
DIAGNOSIS_FINDING_SEVERITY: Final = "dask.diagnosis.finding.severity"
DIAGNOSIS_FINDING_SUBJECT: Final = "dask.diagnosis.finding.subject"
DIAGNOSIS_FINDING_SUBJECT_KIND: Final = "dask.diagnosis.finding.subject_kind"
DIAGNOSIS_FINDING_SHARE: Final = "dask.diagnosis.finding.share"
DIAGNOSIS_FINDING_ADVICE: Final = "dask.diagnosis.finding.advice"
DIAGNOSIS_EVIDENCE_PREFIX: Final = "dask.diagnosis.evidence."
#: event_name of the one log record per finished workflow that states its diagnosis.
LOG_DIAGNOSIS: Final = "dask.diagnosis"
