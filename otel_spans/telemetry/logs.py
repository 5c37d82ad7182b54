"""Log entries become OpenTelemetry log records.

Dask's structured events carry whatever the code that logged them put in: dicts of
anything, user objects, huge strings. :func:`safe_body` turns any of it into an OTel
``AnyValue`` within fixed bounds (depth, items, string length) and never raises, so a
strange event costs a truncated log record, never an exporter failure. Records are
written straight to OTLP bytes (:mod:`otel_spans.export.wire`): a scheduler logs an
event per client call, and the SDK's encoder cost several times more per record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_spans import __version__, semconv
from otel_spans.export import wire
from otel_spans.export.outcome import Delivery, deliver
from otel_spans.export.pipeline import ExportPipeline
from otel_spans.export.senders import make_request_sender
from otel_spans.records import LogEntry, ProfileRecord
from otel_spans.settings import RecordLimits, Settings
from otel_spans.telemetry import folded_stacks

_MAX_DEPTH = 4
_MAX_ITEMS = 100
#: Encoded instrumentation scopes kept (one per Python logger: a handful in practice).
_MAX_SCOPES = 100

#: What the logs pipeline carries: log entries, and profiles folded into entries on its
#: exporter thread.
LogSource = LogEntry | ProfileRecord


def _text(value: object, max_length: int) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception as e:  # a user object whose repr raises
        text = f"<unrepresentable {type(value).__name__}: {type(e).__name__}>"
    return text[:max_length]


def safe_body(value: object, max_length: int, depth: int = 0) -> Any:
    """A bounded OTel AnyValue for any Python object."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str | bytes):
        return value[:max_length]
    if depth >= _MAX_DEPTH:
        return _text(value, max_length)
    try:
        if isinstance(value, Mapping):
            items = list(value.items())[:_MAX_ITEMS]
            return {_text(k, max_length): safe_body(v, max_length, depth + 1) for k, v in items}
        if isinstance(value, list | tuple | set | frozenset):
            return [safe_body(v, max_length, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    except Exception:
        pass
    return _text(value, max_length)


def log_record(entry: LogEntry, limits: RecordLimits) -> bytes:
    """``entry`` as an encoded OTLP ``LogRecord``; its body and attributes bounded."""
    max_length = limits.log_attribute_length
    return wire.log_record(
        time_ns=entry.time_ns,
        severity_number=entry.severity_number,
        severity_text=entry.severity_text,
        body=safe_body(entry.body, entry.body_length or max_length),
        attributes={k: safe_body(v, max_length) for k, v in entry.attributes},
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
    )
