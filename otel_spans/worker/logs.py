"""The worker process's Python log records (``logs.python``), exported like the scheduler's.

One bounded log pipeline per process, shared by the Workers in it and reference-counted
like the process's tracing (:mod:`otel_spans.worker.tracing`): started by the first
worker, flushed for at most ``shutdown-timeout`` and stopped when the last one closes.
A record that names a task key one of the process's workers holds carries that task's
span; a record logged inside a task carries it anyway, from the OTel context.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.export.pipeline import ExportPipeline
from otel_spans.telemetry import python_logs
from otel_spans.telemetry.logs import LogSource, log_pipeline


class _Process:
    """What this process exports its Python log records with; guarded by ``_lock``."""

    def __init__(self) -> None:
        self.pipeline: ExportPipeline[LogSource] | None = None
        self.sink: python_logs.PythonLogs | None = None
        #: Each live worker's lookup of what a logged key or span id means.
        self.abouts: list[python_logs.About] = []

    def about(self, value: object) -> tuple[int, int, bool] | None:
        for about in list(self.abouts):
            found = about(value)
            if found is not None:
                return found
        return None


_lock = threading.Lock()
_process = _Process()


@dataclass
class LogLease:
    """A worker's share of the process's log export; :meth:`release` exactly once."""

    about: python_logs.About
    shutdown_timeout: float
    _released: bool = False

    def stats(self) -> dict[str, object]:
        pipeline, sink = _process.pipeline, _process.sink
        if pipeline is None or sink is None:
            return {"active": False}
        return {**pipeline.stats().as_dict(), **sink.stats()}

    def release(self) -> None:
        """Blocking (bounded by ``shutdown-timeout``): call it off the event loop."""
        with _lock:
            if self._released:
                return
            self._released = True
            if self.about in _process.abouts:
                _process.abouts.remove(self.about)
            last = not _process.abouts
            pipeline, sink = (_process.pipeline, _process.sink) if last else (None, None)
            if last:
                _process.pipeline = _process.sink = None
        if sink is not None:
            python_logs.detach(sink)
        if pipeline is not None:
            pipeline.close(self.shutdown_timeout)


def acquire(
    settings: Settings,
    resource_attributes: Callable[[], Mapping[str, object]],
    about: python_logs.About,
) -> LogLease | None:
    """Export this process's Python log records, or None when ``logs.python`` is off."""
    if not (settings.logs.python.enabled and settings.logs.target.enabled):
        return None
    with _lock:
        _process.abouts.append(about)
        if _process.pipeline is None:
            pipeline = log_pipeline(
                settings, resource_attributes(), role="worker", scope_name=semconv.SCOPE_NAME
            )
            sink = python_logs.PythonLogs(
                settings.logs.python,
                pipeline.producer(),
                _process.about,
                exception_messages=settings.capture.exceptions == "message",
            )
            _process.pipeline, _process.sink = pipeline, sink
            if not python_logs.attach(sink):
                _process.sink = None  # the process's own OTel handler has them
    return LogLease(about, settings.shutdown_timeout)
