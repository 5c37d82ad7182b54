"""otel-spans: Dask spans as OpenTelemetry traces, metrics and logs over OTLP.

Enable it on the scheduler with ``distributed.scheduler.preload: [otel_spans]`` or,
on a running cluster, ``client.register_plugin(OtelSpansPlugin())``. Importing the
package has no side effect besides registering the ``otel-spans`` dask.config defaults.
"""

from __future__ import annotations

from otel_spans.config import ConfigError, Settings, register_defaults
from otel_spans.plugin import OtelSpansPlugin
from otel_spans.preload import dask_setup, dask_teardown

__all__ = [
    "ConfigError",
    "OtelSpansPlugin",
    "Settings",
    "dask_setup",
    "dask_teardown",
]
__version__ = "0.1.0"

register_defaults()
