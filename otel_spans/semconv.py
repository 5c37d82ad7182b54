"""Every span name, attribute key, event name and unit that otel-spans emits, once.

``docs/telemetry.md`` is the contract these constants implement; a test checks that
every constant here is documented there, so the two cannot drift apart.

Keys from the OpenTelemetry semantic conventions are used where one exists
(``service.*``, ``code.*``, ``exception.*``); everything Dask-specific lives under
``dask.*``.
"""

from __future__ import annotations

from typing import Final

#: Instrumentation scope of everything the scheduler emits.
SCOPE_NAME: Final = "otel_spans"

# -- resource -------------------------------------------------------------------------
SERVICE_NAME: Final = "service.name"
SERVICE_INSTANCE_ID: Final = "service.instance.id"
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
DASK_SPAN_NAME: Final = "dask.span.name"
#: 0 for the first export of a Dask span, n for its n-th continuation.
DASK_SPAN_CONTINUATION: Final = "dask.span.continuation"
#: False when the span was exported unfinished (scheduler shutdown).
DASK_SPAN_DONE: Final = "dask.span.done"
#: Number of tasks in the span tree, and by state: ``dask.span.tasks.<state>``.
DASK_SPAN_TASKS: Final = "dask.span.tasks"
DASK_SPAN_TASKS_PREFIX: Final = "dask.span.tasks."
DASK_SPAN_TASK_GROUPS: Final = "dask.span.task_groups"
DASK_SPAN_NBYTES: Final = "dask.span.nbytes"
DASK_SPAN_TASK_DURATION: Final = "dask.span.task_duration"
DASK_SPAN_ACTIVE_CPU_SECONDS: Final = "dask.span.active_cpu_seconds"
DASK_SPAN_ENQUEUED: Final = "dask.span.enqueued"
DASK_SPAN_COMPUTE_START: Final = "dask.span.compute_start"
DASK_SPAN_CODE: Final = "dask.span.code"
DASK_SPAN_CODE_COUNT: Final = "dask.span.code.count"
CODE_FILE_PATH: Final = "code.file.path"
CODE_LINE_NUMBER: Final = "code.line.number"

DASK_SPAN_TASKS_MEMORY: Final = "dask.span.tasks.memory"
DASK_SPAN_TASKS_ERRED: Final = "dask.span.tasks.erred"

# -- metric attributes (low cardinality only: never uuids, keys or addresses) -------------
#: The span's tags joined with "/" (bounded by metrics.max-span-names).
ATTR_SPAN_NAME: Final = "dask.span.name"
#: The first tag: the workflow the span belongs to.
ATTR_SPAN_ROOT: Final = "dask.span.root"
ATTR_TASK_PREFIX: Final = "dask.task.prefix"
#: Final state of a task: memory (computed) or erred.
ATTR_TASK_STATE: Final = "dask.task.state"
#: What a worker spent the time or bytes on (Dask's fine performance metrics).
ATTR_ACTIVITY: Final = "dask.activity"
#: Where P2P shuffle work happened (Dask's second key element of "p2p" metrics).
ATTR_P2P_WHERE: Final = "dask.p2p.where"
#: The context of a cluster-level worker metric (execute, gather-dep, get-data, p2p...).
ATTR_CONTEXT: Final = "dask.context"
ATTR_SIGNAL: Final = "otel_spans.signal"
ATTR_OUTCOME: Final = "otel_spans.outcome"
ATTR_LIMITED: Final = "otel_spans.attribute"
#: The value that replaces span names and prefixes beyond the cardinality budget.
OVERFLOW_VALUE: Final = "(overflow)"
#: Dask's synthetic activity: thread time of the span not attributed to its tasks.
IDLE_ACTIVITY: Final = "idle or other spans"

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
M_TASK_DURATION: Final = "dask.task.duration"
M_CLUSTER_TIME: Final = "dask.cluster.time"
M_CLUSTER_BYTES: Final = "dask.cluster.bytes"
M_CLUSTER_COUNT: Final = "dask.cluster.count"
M_RECORDS: Final = "otel_spans.records"
M_OVERFLOW: Final = "otel_spans.cardinality.overflow"
M_INTERNAL_ERRORS: Final = "otel_spans.internal_errors"

UNIT_SECONDS: Final = "s"
UNIT_BYTES: Final = "By"
UNIT_ONE: Final = "1"

#: Dask's metric units -> (execute metric, p2p metric, cluster metric, UCUM unit).
DASK_UNITS: Final = {
    "seconds": (M_EXECUTE_TIME, M_P2P_TIME, M_CLUSTER_TIME, UNIT_SECONDS),
    "bytes": (M_EXECUTE_BYTES, M_P2P_BYTES, M_CLUSTER_BYTES, UNIT_BYTES),
    "count": (M_EXECUTE_COUNT, M_P2P_COUNT, M_CLUSTER_COUNT, UNIT_ONE),
}
