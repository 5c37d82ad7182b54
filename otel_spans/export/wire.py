"""OTLP trace and log protobufs written straight to the wire format.

Why not the SDK's encoder: a record would first become a ``ReadableSpan`` (bounded
attributes, span contexts, status objects), then ``encode_spans`` would build one
protobuf object per span, attribute and value, on the exporter thread: CPU taken from
the scheduler's event loop through the GIL, for every span of a workflow
(docs/performance.md has the measurements). Writing the bytes directly costs a fraction
of that: keys are encoded once and cached, and a span is a ``bytes.join`` of a few dozen
pieces.

Log records (Dask's events, one per client call on a busy scheduler) are written the
same way, for the same reason.

The output is an ordinary ``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest``;
``tests/unit/test_otlp_wire.py`` checks it field by field against the SDK's encoders. Field
numbers are those of ``opentelemetry/proto/trace/v1/trace.proto``,
``logs/v1/logs.proto`` and ``common/v1/common.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from otel_spans.names import clean
from otel_spans.settings import RecordLimits

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_pack_fixed64 = struct.Struct("<Q").pack
_pack_double = struct.Struct("<d").pack
_pack_fixed32 = struct.Struct("<I").pack

#: ``Span.flags`` / ``Link.flags``: bits 0-7 are the W3C trace flags (0x01: sampled),
#: bit 8 says that bit 9 is known, bit 9 that the parent (or linked) span is remote.
_W3C_SAMPLED = 0x01
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def span_flags(trace_flags: int, *, remote: bool) -> int:
    """``Span.flags`` / ``Link.flags``: the W3C flags and whether the context is remote."""
    return (trace_flags & 0xFF) | _HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)


#: ``Span.SpanKind``: SPAN_KIND_INTERNAL, SPAN_KIND_CONSUMER
KIND_INTERNAL, KIND_CONSUMER = 1, 5
#: ``Status.StatusCode``
STATUS_UNSET, STATUS_ERROR = 0, 2


def _varint(value: int) -> bytes:
    """A base-128 varint; negative int64 values as their 10-byte two's complement."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes([i]) for i in range(0x80)]


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _length_delimited(field: int) -> bytes:
    return _tag(field, 2)


def _message(tag: bytes, payload: bytes) -> bytes:
    size = len(payload)
    return tag + (_SMALL[size] if size < 0x80 else _varint(size)) + payload


# Tags, by message (wire type 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
_KV_KEY, _KV_VALUE = _length_delimited(1), _length_delimited(2)
_ANY_STRING, _ANY_BOOL, _ANY_INT = _length_delimited(1), _tag(2, 0), _tag(3, 0)
_ANY_DOUBLE, _ANY_ARRAY = _tag(4, 1), _length_delimited(5)
_ANY_KVLIST, _ANY_BYTES = _length_delimited(6), _length_delimited(7)
_ARRAY_VALUES = _length_delimited(1)
_KVLIST_VALUES = _length_delimited(1)
_SPAN_TRACE_ID, _SPAN_SPAN_ID, _SPAN_PARENT = (_length_delimited(n) for n in (1, 2, 4))
_SPAN_NAME, _SPAN_KIND = _length_delimited(5), _tag(6, 0)
_SPAN_START, _SPAN_END = _tag(7, 1), _tag(8, 1)
_SPAN_ATTRIBUTE, _SPAN_DROPPED_ATTRIBUTES = _length_delimited(9), _tag(10, 0)
_SPAN_EVENT, _SPAN_DROPPED_EVENTS = _length_delimited(11), _tag(12, 0)
_SPAN_LINK, _SPAN_DROPPED_LINKS = _length_delimited(13), _tag(14, 0)
_SPAN_STATUS, _SPAN_FLAGS = _length_delimited(15), _tag(16, 5)
_EVENT_TIME, _EVENT_NAME = _tag(1, 1), _length_delimited(2)
_EVENT_ATTRIBUTE, _EVENT_DROPPED_ATTRIBUTES = _length_delimited(3), _tag(4, 0)
_LINK_TRACE_ID, _LINK_SPAN_ID = _length_delimited(1), _length_delimited(2)
_LINK_ATTRIBUTE, _LINK_DROPPED_ATTRIBUTES = _length_delimited(4), _tag(5, 0)
_LINK_FLAGS = _tag(6, 5)
_STATUS_MESSAGE, _STATUS_CODE = _length_delimited(2), _tag(3, 0)
_LOG_TIME, _LOG_SEVERITY_NUMBER = _tag(1, 1), _tag(2, 0)
_LOG_SEVERITY_TEXT, _LOG_BODY = _length_delimited(3), _length_delimited(5)
_LOG_ATTRIBUTE, _LOG_DROPPED_ATTRIBUTES = _length_delimited(6), _tag(7, 0)
_LOG_FLAGS, _LOG_TRACE_ID, _LOG_SPAN_ID = _tag(8, 5), _length_delimited(9), _length_delimited(10)
_LOG_OBSERVED_TIME, _LOG_EVENT_NAME = _tag(11, 1), _length_delimited(12)
#: ``LogRecord.flags``: the W3C "sampled" bit of the span a record belongs to.
_LOG_FLAGS_SAMPLED = _LOG_FLAGS + _pack_fixed32(1)
# ExportTraceServiceRequest and ExportLogsServiceRequest (and their ResourceSpans /
# ResourceLogs, ScopeSpans / ScopeLogs) number their fields alike.
_REQUEST_RESOURCE_SPANS = _length_delimited(1)
_RESOURCE_SPANS_RESOURCE, _RESOURCE_SPANS_SCOPE_SPANS = _length_delimited(1), _length_delimited(2)
_RESOURCE_ATTRIBUTE = _length_delimited(1)
_SCOPE_SPANS_SCOPE, _SCOPE_SPANS_SPAN = _length_delimited(1), _length_delimited(2)
_SCOPE_NAME, _SCOPE_VERSION = _length_delimited(1), _length_delimited(2)
#: ``ScopeSpans.schema_url`` / ``ScopeLogs.schema_url``
_SCOPE_SPANS_SCHEMA_URL = _length_delimited(3)
_LOCAL_FLAGS = _SPAN_FLAGS + _pack_fixed32(span_flags(_W3C_SAMPLED, remote=False))
_REMOTE_PARENT_FLAGS = _SPAN_FLAGS + _pack_fixed32(span_flags(_W3C_SAMPLED, remote=True))


@lru_cache(maxsize=4096)
def _key(key: str) -> bytes:
    """``KeyValue.key`` with its tag: the same few dozen keys recur on every span."""
    return _message(_KV_KEY, _text(key, len(key)))


def _text(value: str, max_length: int) -> bytes:
    try:
        return value[:max_length].encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate is not UTF-8, and one bad string would make a collector
        # refuse the whole batch: it becomes U+FFFD, as names do where they enter.
        return clean(value, max_length).encode("utf-8")


def _scalar(value: object, max_length: int) -> bytes:
    """An ``AnyValue`` payload for one non-sequence value."""
    if isinstance(value, str):
        return _message(_ANY_STRING, _text(value, max_length))
    if isinstance(value, bool):  # before int: bool is an int
        return _ANY_BOOL + _SMALL[int(value)]
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return _ANY_INT + _varint(value)
        return _message(_ANY_STRING, _text(str(value), max_length))
    if isinstance(value, float):
        return _ANY_DOUBLE + _pack_double(value)
    return _message(_ANY_STRING, _text(str(value), max_length))


def _any_value(value: object, max_length: int) -> bytes:
    if isinstance(value, list | tuple):
        items = b"".join(_message(_ARRAY_VALUES, _scalar(item, max_length)) for item in value)
        return _message(_ANY_ARRAY, items)
    return _scalar(value, max_length)


def _nested_value(value: object, max_length: int) -> bytes:
    """An ``AnyValue`` payload for a log body: maps, lists and bytes at any depth.

    The caller bounds depth and size (:func:`otel_spans.logs.safe_body`); ``None`` is
    an empty ``AnyValue``, as the SDK writes it.
    """
    if value is None:
        return b""
    if isinstance(value, bytes):
        return _message(_ANY_BYTES, value)
    if isinstance(value, Mapping):
        pairs = b"".join(
            _message(
                _KVLIST_VALUES, _key(str(k)) + _message(_KV_VALUE, _nested_value(v, max_length))
            )
            for k, v in value.items()
        )
        return _message(_ANY_KVLIST, pairs)
    if isinstance(value, list | tuple):
        items = b"".join(_message(_ARRAY_VALUES, _nested_value(v, max_length)) for v in value)
        return _message(_ANY_ARRAY, items)
    return _scalar(value, max_length)


def _key_values(
    tag: bytes, attributes: Mapping[str, object], max_count: int, max_length: int
) -> tuple[bytes, int]:
    """Repeated ``KeyValue`` fields under ``tag``: the first ``max_count`` pairs, values
    cut to ``max_length``, and how many were dropped. ``None`` values are left out, as
    the SDK does."""
    parts: list[bytes] = []
    dropped = 0
    # Every attribute of every record passes here: the scalar kinds are encoded inline
    # (by exact type; subclasses and sequences go through _any_value), and each length
    # below 128 is its one byte, without the helpers' calls.
    for key, value in attributes.items():
        if value is None:
            continue
        if len(parts) == max_count:
            dropped += 1
            continue
        if type(value) is str:
            try:
                text = value[:max_length].encode("utf-8")
            except UnicodeEncodeError:
                text = _text(value, max_length)
            size = len(text)
            any_value = _ANY_STRING + (_SMALL[size] if size < 0x80 else _varint(size)) + text
        elif type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
            any_value = _ANY_INT + _varint(value)
        elif type(value) is float:
            any_value = _ANY_DOUBLE + _pack_double(value)
        elif type(value) is bool:
            any_value = _ANY_BOOL + _SMALL[value]
        else:
            any_value = _any_value(value, max_length)
        size = len(any_value)
        pair = _key(key) + _KV_VALUE + (_SMALL[size] if size < 0x80 else _varint(size)) + any_value
        size = len(pair)
        parts.append(tag + (_SMALL[size] if size < 0x80 else _varint(size)) + pair)
    return b"".join(parts), dropped


@dataclass(frozen=True, slots=True)
class WireEvent:
    name: str
    time_ns: int
    attributes: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class WireLink:
    trace_id: int
    span_id: int
    attributes: Mapping[str, object]
    #: W3C trace flags of the linked span (0x01: sampled).
    trace_flags: int = _W3C_SAMPLED
    #: The linked span was made in another process (a caller's span).
    remote: bool = False


def _trace_id(trace_id: int) -> bytes:
    return trace_id.to_bytes(16, "big")


def _span_id(span_id: int) -> bytes:
    return span_id.to_bytes(8, "big")


def _event(event: WireEvent, limits: RecordLimits) -> bytes:
    attributes, dropped = _key_values(
        _EVENT_ATTRIBUTE, event.attributes, limits.event_attribute_count, limits.attribute_length
    )
    out = (
        _EVENT_TIME
        + _pack_fixed64(event.time_ns)
        + _message(_EVENT_NAME, _text(event.name, limits.attribute_length))
        + attributes
    )
    if dropped:
        out += _EVENT_DROPPED_ATTRIBUTES + _varint(dropped)
    return out


def _link(link: WireLink, limits: RecordLimits) -> bytes:
    attributes, dropped = _key_values(
        _LINK_ATTRIBUTE, link.attributes, limits.link_attribute_count, limits.attribute_length
    )
    out = (
        _message(_LINK_TRACE_ID, _trace_id(link.trace_id))
        + _message(_LINK_SPAN_ID, _span_id(link.span_id))
        + attributes
    )
    if dropped:
        out += _LINK_DROPPED_ATTRIBUTES + _varint(dropped)
    return out + _LINK_FLAGS + _pack_fixed32(span_flags(link.trace_flags, remote=link.remote))


def span(
    *,
    name: str,
    trace_id: int,
    span_id: int,
    parent_span_id: int,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, object],
    limits: RecordLimits,
    events: Sequence[WireEvent] = (),
    links: Sequence[WireLink] = (),
    links_dropped: int = 0,
    events_dropped: int = 0,
    status_code: int = STATUS_UNSET,
    status_message: str = "",
    parent_remote: bool = False,
    kind: int = KIND_INTERNAL,
) -> bytes:
    """One ``Span`` message (without its own tag); the first events and links are kept.

    ``parent_span_id`` 0 makes a root span; ``parent_remote`` says the parent is a span
    of another process (the caller's). ``links_dropped`` and ``events_dropped`` count
    links and events the caller left out already: they are reported with those over
    the limit. An empty name becomes
    ``(empty)``, since some backends refuse nameless spans. Every span sent is sampled:
    its flags say so.
    """
    max_length = limits.attribute_length
    name = name[:max_length] or "(empty)"
    parts = [
        _SPAN_TRACE_ID + b"\x10" + _trace_id(trace_id),
        _SPAN_SPAN_ID + b"\x08" + _span_id(span_id),
    ]
    if parent_span_id:
        parts.append(_SPAN_PARENT + b"\x08" + _span_id(parent_span_id))
    parts += (
        _message(_SPAN_NAME, _text(name, max_length)),
        _SPAN_KIND + _SMALL[kind],
        _SPAN_START + _pack_fixed64(start_ns),
        _SPAN_END + _pack_fixed64(max(end_ns, start_ns)),
    )
    encoded, dropped = _key_values(_SPAN_ATTRIBUTE, attributes, limits.attribute_count, max_length)
    parts.append(encoded)
    if dropped:
        parts.append(_SPAN_DROPPED_ATTRIBUTES + _varint(dropped))
    for event in events[: limits.events]:
        parts.append(_message(_SPAN_EVENT, _event(event, limits)))
    events_dropped += max(len(events) - limits.events, 0)
    if events_dropped:
        parts.append(_SPAN_DROPPED_EVENTS + _varint(events_dropped))
    for link in links[: limits.links]:
        parts.append(_message(_SPAN_LINK, _link(link, limits)))
    links_dropped += max(len(links) - limits.links, 0)
    if links_dropped:
        parts.append(_SPAN_DROPPED_LINKS + _varint(links_dropped))
    status = b""
    if status_message:
        status += _message(_STATUS_MESSAGE, _text(status_message, max_length))
    if status_code:
        status += _STATUS_CODE + _SMALL[status_code]
    parts.append(_message(_SPAN_STATUS, status))
    parts.append(_REMOTE_PARENT_FLAGS if parent_remote and parent_span_id else _LOCAL_FLAGS)
    return b"".join(parts)


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
) -> bytes:
    """One ``LogRecord`` message (without its own tag), observed when it happened.

    With a trace and span id the record is correlated with that span; its flags carry
    the trace's sampling decision (``sampled``).
    """
    max_length = limits.log_attribute_length
    parts = [_LOG_TIME + _pack_fixed64(time_ns)]
    if severity_number:
        parts.append(_LOG_SEVERITY_NUMBER + _varint(severity_number))
    if severity_text:
        parts.append(_message(_LOG_SEVERITY_TEXT, _text(severity_text, max_length)))
    parts.append(_message(_LOG_BODY, _nested_value(body, max_length)))
    encoded, dropped = _key_values(
        _LOG_ATTRIBUTE, attributes, limits.log_attribute_count, max_length
    )
    parts.append(encoded)
    if dropped:
        parts.append(_LOG_DROPPED_ATTRIBUTES + _varint(dropped))
    if trace_id and span_id:
        if sampled:
            parts.append(_LOG_FLAGS_SAMPLED)
        parts += (
            _LOG_TRACE_ID + b"\x10" + _trace_id(trace_id),
            _LOG_SPAN_ID + b"\x08" + _span_id(span_id),
        )
    parts.append(_LOG_OBSERVED_TIME + _pack_fixed64(time_ns))
    if event_name:
        parts.append(_message(_LOG_EVENT_NAME, _text(event_name, max_length)))
    return b"".join(parts)


class RequestEncoder:
    """Wraps encoded spans (or log records) into one request of one resource and scope.

    The resource and scope are encoded once; a request is then two length prefixes and
    a join. ``schema_url`` goes on every scope of a request: the records' attributes
    follow the same conventions whichever scope (Python logger) they are under.
    """

    def __init__(
        self,
        resource_attributes: Mapping[str, object],
        scope_name: str,
        scope_version: str = "",
        schema_url: str = "",
    ):
        resource, _ = _key_values(_RESOURCE_ATTRIBUTE, resource_attributes, 1 << 30, 1 << 30)
        scope = _message(_SCOPE_NAME, scope_name.encode())
        if scope_version:
            scope += _message(_SCOPE_VERSION, scope_version.encode())
        self._resource = _message(_RESOURCE_SPANS_RESOURCE, resource)
        self._scope = _message(_SCOPE_SPANS_SCOPE, scope)
        self._schema_url = (
            _message(_SCOPE_SPANS_SCHEMA_URL, schema_url.encode()) if schema_url else b""
        )

    def request(self, spans: Iterable[bytes]) -> bytes:
        """An ``ExportTraceServiceRequest`` of ``spans``, or, given encoded log records,
        the ``ExportLogsServiceRequest`` of them (the two are numbered alike)."""
        return self.scoped_request([(self._scope, spans)])

    def scoped_request(self, scopes: Iterable[tuple[bytes, Iterable[bytes]]]) -> bytes:
        """One request of several scopes: (encoded scope or b"" for ours, its items)."""
        resource_spans = self._resource + b"".join(
            _message(
                _RESOURCE_SPANS_SCOPE_SPANS,
                (scope or self._scope)
                + b"".join(_message(_SCOPE_SPANS_SPAN, s) for s in items)
                + self._schema_url,
            )
            for scope, items in scopes
        )
        return _message(_REQUEST_RESOURCE_SPANS, resource_spans)


def scope(name: str) -> bytes:
    """An encoded instrumentation scope of ``name`` (for :meth:`RequestEncoder.scoped_request`)."""
    return _message(_SCOPE_SPANS_SCOPE, _message(_SCOPE_NAME, name.encode()))
