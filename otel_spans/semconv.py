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
