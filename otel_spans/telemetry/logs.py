"""Log entries become OpenTelemetry log records.

A body, whatever Dask's event put in it, is bounded by :mod:`.log_body`, so a strange
event costs a truncated log record, never an exporter failure. Records are written
straight to OTLP bytes (:mod:`otel_spans.export.wire`): a scheduler logs an event per
client call, and the SDK's encoder cost several times more per record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from otel_spans import __version__, semconv
from otel_spans.export import log_wire, wire
from otel_spans.export.outcome import Delivery, deliver
from otel_spans.export.pipeline import ExportPipeline
from otel_spans.export.senders import make_request_sender
from otel_spans.records import LogEntry, ProfileRecord
from otel_spans.settings import RecordLimits, Settings
from otel_spans.telemetry import folded_stacks
from otel_spans.telemetry.log_body import bounded_attributes, encoded_body, safe_body

#: Encoded instrumentation scopes kept (one per Python logger: a handful in practice).
_MAX_SCOPES = 100

#: What the logs pipeline carries: log entries, and profiles folded into entries on its
#: exporter thread.
LogSource = LogEntry | ProfileRecord


def log_record(entry: LogEntry, limits: RecordLimits) -> bytes:
    """``entry`` as an encoded OTLP ``LogRecord``; its body and attributes bounded."""
    max_length = limits.log_attribute_length
    body_length = entry.body_length or max_length
    # One pass unless the body's strings have a limit of their own (a profile's), as
    # safe_body's result would then be cut again by the encoder's limit.
    if body_length == max_length:
        body, encoded = None, encoded_body(entry.body, max_length)
    else:
        body, encoded = safe_body(entry.body, body_length), None
    return log_wire.log_record(
        time_ns=entry.time_ns,
        severity_number=entry.severity_number,
        severity_text=entry.severity_text,
        body=body,
        encoded_body=encoded,
        attributes=bounded_attributes(entry.attributes, max_length),
        limits=limits,
        trace_id=entry.trace_id,
        span_id=entry.span_id,
        event_name=entry.event_name,
        sampled=entry.sampled,
    )


class LogEncoder:
    """Log entries as one ``ExportLogsServiceRequest``: a scope per Python logger, the
    others under otel-spans' own scope (so a backend shows which logger said it)."""

    def __init__(
        self,
        resource_attributes: Mapping[str, object],
        scope_name: str,
        limits: RecordLimits,
        profile_length: int = 65536,
    ):
        version = __version__ if scope_name == semconv.SCOPE_NAME else ""
        self._encoder = wire.RequestEncoder(
            resource_attributes, scope_name, version, semconv.SCHEMA_URL
        )
        self._limits = limits
        self._profile_length = profile_length
        #: Encoded scopes by logger name (a handful: the loggers of one library).
        self._scopes: dict[str, bytes] = {}

    def request(self, batch: Sequence[LogSource]) -> bytes:
        by_scope: dict[str, list[bytes]] = {}
        for source in batch:
            entry = (
                folded_stacks.log_entry(source, self._profile_length)
                if isinstance(source, ProfileRecord)
                else source
            )
            by_scope.setdefault(entry.scope, []).append(log_record(entry, self._limits))
        return self._encoder.scoped_request(
            (self._scope(name), records) for name, records in by_scope.items()
        )

    def _scope(self, name: str) -> bytes:
        if not name:
            return b""
        encoded = self._scopes.get(name)
        if encoded is None:
            if len(self._scopes) >= _MAX_SCOPES:
                self._scopes.clear()
            encoded = self._scopes[name] = wire.scope(name)
        return encoded


def log_pipeline(
    settings: Settings, resource_attributes: Mapping[str, object], *, role: str, scope_name: str
) -> ExportPipeline[LogSource]:
    """The bounded pipeline that sends one process's log entries to ``logs``' target."""
    sender = make_request_sender(settings.logs.target, signal="logs", role=role)
    encoder = LogEncoder(
        resource_attributes, scope_name, settings.record_limits, settings.profile.max_length
    )

    def send(batch: list[LogSource]) -> Delivery:
        return deliver(batch, encoder.request, sender.send)

    return ExportPipeline(
        "logs",
        send,
        sender.shutdown,
        queue_size=settings.queue_size,
        batch_size=settings.batch_size,
        batch_wait=settings.logs.batch_wait,
    )
