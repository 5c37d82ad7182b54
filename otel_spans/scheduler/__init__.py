"""The scheduler side: the only code that reads distributed's scheduler objects.

:class:`~otel_spans.scheduler.plugin.OtelSpansPlugin` dispatches Dask's hooks to one
module per job and hands plain records to :mod:`otel_spans.telemetry`; nothing it
hands over refers to a live scheduler object. See ``docs/architecture.md``.
"""

from otel_spans.scheduler.plugin import OtelSpansPlugin

__all__ = ["OtelSpansPlugin"]
