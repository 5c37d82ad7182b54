"""OTLP log records written straight to the wire format, as :mod:`.wire` writes spans.

Apart from the spans because a log record shares nothing with a span but the
primitives of :mod:`.protobuf` and the request around it
(:class:`~otel_spans.export.wire.RequestEncoder`: ``ExportLogsServiceRequest`` numbers
its fields as ``ExportTraceServiceRequest`` does). Why by hand at all: Dask's events,
one per client call on a busy scheduler, cost several times more through the SDK's
encoder. Field numbers are those of ``opentelemetry/proto/logs/v1/logs.proto``;
``tests/unit/test_otlp_wire.py`` checks the output against the SDK's encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from functools import lru_cache

from otel_spans.export.protobuf import (
    attributes_field,
    length_delimited,
    message,
    nested_value,
    pack_fixed32,
    tag,
    utf8,
    varint,
)
from otel_spans.settings import RecordLimits

_LOG_TIME, _LOG_SEVERITY_NUMBER = tag(1, 1), tag(2, 0)
_LOG_SEVERITY_TEXT, _LOG_BODY = length_delimited(3), length_delimited(5)
_LOG_ATTRIBUTE, _LOG_DROPPED_ATTRIBUTES = length_delimited(6), tag(7, 0)
_LOG_FLAGS, _LOG_TRACE_ID, _LOG_SPAN_ID = tag(8, 5), length_delimited(9), length_delimited(10)
_LOG_OBSERVED_TIME, _LOG_EVENT_NAME = tag(11, 1), length_delimited(12)
#: ``LogRecord.flags``: the W3C "sampled" bit of the span a record belongs to.
_LOG_FLAGS_SAMPLED = _LOG_FLAGS + pack_fixed32(1)
# A time with its one-byte tag, and the trace and span ids with theirs (and lengths),
# each in one pack: the ids big-endian (the trace id as two halves), the time not.
_TIME = struct.Struct("<BQ").pack
_IDS = struct.Struct(">BBQQBBQ").pack
_TIME_TAG, _OBSERVED_TAG = _LOG_TIME[0], _LOG_OBSERVED_TIME[0]
_TRACE_TAG, _SPAN_TAG = _LOG_TRACE_ID[0], _LOG_SPAN_ID[0]
_LOW64 = (1 << 64) - 1


def log_record(
    *,
    time_ns: int,
    severity_number: int,
    severity_text: str,
    body: object,
    attributes: Mapping[str, object],
    limits: RecordLimits,
    trace_id: int = 0,
    span_id: int = 0,
    event_name: str = "",
    sampled: bool = True,
    encoded_body: bytes | None = None,
) -> bytes:
    """One ``LogRecord`` message (without its own tag), observed when it happened.

    With a trace and span id the record is correlated with that span; its flags carry
    the trace's sampling decision (``sampled``). ``encoded_body``, when given, is the
    body's ``AnyValue`` already written, and ``body`` is not read.
    """
    max_length = limits.log_attribute_length
    parts = [
        _TIME(_TIME_TAG, time_ns),
        _severity(severity_number, severity_text, max_length),
        message(
            _LOG_BODY, nested_value(body, max_length) if encoded_body is None else encoded_body
        ),
    ]
    if attributes:
        parts.append(
            attributes_field(
                _LOG_ATTRIBUTE,
                attributes,
                limits.log_attribute_count,
                max_length,
                _LOG_DROPPED_ATTRIBUTES,
            )
        )
    if trace_id and span_id:
        if sampled:
            parts.append(_LOG_FLAGS_SAMPLED)
        parts.append(_IDS(_TRACE_TAG, 16, trace_id >> 64, trace_id & _LOW64, _SPAN_TAG, 8, span_id))
    parts.append(_TIME(_OBSERVED_TAG, time_ns))
    if event_name:
        parts.append(_event_name(event_name, max_length))
    return b"".join(parts)


@lru_cache(maxsize=256)
def _severity(severity_number: int, severity_text: str, max_length: int) -> bytes:
    """A log record's severity fields: a handful of pairs recur on every record."""
    out = b""
    if severity_number:
        out += _LOG_SEVERITY_NUMBER + varint(severity_number)
    if severity_text:
        out += message(_LOG_SEVERITY_TEXT, utf8(severity_text, max_length))
    return out


@lru_cache(maxsize=256)
def _event_name(event_name: str, max_length: int) -> bytes:
    return message(_LOG_EVENT_NAME, utf8(event_name, max_length))
