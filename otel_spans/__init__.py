"""otel-spans: Dask spans as OpenTelemetry traces, metrics and logs over OTLP.

Enable it on the scheduler with ``distributed.scheduler.preload: [otel_spans]`` or,
on a running cluster, ``client.register_plugin(OtelSpansPlugin())``; on the workers
(spans started inside tasks) with ``distributed.worker.preload: [otel_spans]`` or
``client.register_plugin(OtelSpansWorkerPlugin())``. ``otel_spans.span`` is
``distributed.span`` carrying the caller's trace context. Importing the
package has no side effect besides registering the ``otel-spans`` dask.config defaults.
"""

from __future__ import annotations

#: First, before any import: modules of the package read it while it initialises
#: (the resource's ``telemetry.distro.version``, the scope version, the user agent).
__version__ = "0.2.0"

from otel_spans.config import ConfigError, Settings, register_defaults
from otel_spans.context import (
    LOG_FORMAT,
    TraceContextFilter,
    annotate_context,
    caller_traceparent,
    context_from_traceparent,
    current_context,
    current_traceparent,
    format_traceparent,
    parse_traceparent,
    span,
    trace_id,
    trace_url,
)
from otel_spans.preload import dask_setup, dask_teardown
from otel_spans.scheduler.plugin import OtelSpansPlugin
from otel_spans.worker.plugin import OtelSpansWorkerPlugin

__all__ = [
    "LOG_FORMAT",
    "ConfigError",
    "OtelSpansPlugin",
    "OtelSpansWorkerPlugin",
    "Settings",
    "TraceContextFilter",
    "annotate_context",
    "caller_traceparent",
    "context_from_traceparent",
    "current_context",
    "current_traceparent",
    "dask_setup",
    "dask_teardown",
    "format_traceparent",
    "parse_traceparent",
    "span",
    "trace_id",
    "trace_url",
]
register_defaults()
