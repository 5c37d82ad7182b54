"""The worker side: trace context into task code, export of the spans it starts and of
Dask's Python log records.

:mod:`~otel_spans.worker.plugin` hooks a worker's task execution;
:mod:`~otel_spans.worker.tracing` owns the process's TracerProvider and its bounded
export; :mod:`~otel_spans.worker.logs` its log pipeline. Never imports
:mod:`otel_spans.scheduler`.
"""

from otel_spans.worker.plugin import (
    METADATA_CHILDREN,
    PLUGIN_NAME,
    OtelSpansWorkerPlugin,
    forward_preload,
    setup_server,
)

__all__ = [
    "METADATA_CHILDREN",
    "PLUGIN_NAME",
    "OtelSpansWorkerPlugin",
    "forward_preload",
    "setup_server",
]
