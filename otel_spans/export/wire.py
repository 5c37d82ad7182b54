"""OTLP trace protobufs, and the request around log records, written straight to the
wire format.

Why not the SDK's encoder: a record would first become a ``ReadableSpan`` (bounded
attributes, span contexts, status objects), then ``encode_spans`` would build one
protobuf object per span, attribute and value, on the exporter thread: CPU taken from
the scheduler's event loop through the GIL, for every span of a workflow
(docs/performance.md has the measurements). Writing the bytes directly costs a fraction
of that: keys are encoded once and cached, and a span is a ``bytes.join`` of a few dozen
pieces.

Log records (Dask's events, one per client call on a busy scheduler) are written the
same way, for the same reason, by :mod:`.log_wire`; :class:`RequestEncoder` wraps
either.

The output is an ordinary ``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest``;
``tests/unit/test_otlp_wire.py`` checks it field by field against the SDK's encoders. Field
numbers are those of ``opentelemetry/proto/trace/v1/trace.proto`` and
``logs/v1/logs.proto``; the values and attributes every message carries, and the wire
format's primitives, are :mod:`otel_spans.export.protobuf`'s.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple

from otel_spans.export.protobuf import (
    SMALL,
    attributes_field,
    key_values,
    length_delimited,
    message,
    pack_fixed32,
    pack_fixed64,
    tag,
    utf8,
    varint,
)
from otel_spans.settings import RecordLimits

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


# Tags, by message (wire type 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
_SPAN_TRACE_ID, _SPAN_SPAN_ID, _SPAN_PARENT = (length_delimited(n) for n in (1, 2, 4))
_SPAN_NAME, _SPAN_KIND = length_delimited(5), tag(6, 0)
_SPAN_START, _SPAN_END = tag(7, 1), tag(8, 1)
_SPAN_ATTRIBUTE, _SPAN_DROPPED_ATTRIBUTES = length_delimited(9), tag(10, 0)
_SPAN_EVENT, _SPAN_DROPPED_EVENTS = length_delimited(11), tag(12, 0)
_SPAN_LINK, _SPAN_DROPPED_LINKS = length_delimited(13), tag(14, 0)
_SPAN_STATUS, _SPAN_FLAGS = length_delimited(15), tag(16, 5)
_EVENT_TIME, _EVENT_NAME = tag(1, 1), length_delimited(2)
_EVENT_ATTRIBUTE, _EVENT_DROPPED_ATTRIBUTES = length_delimited(3), tag(4, 0)
_LINK_TRACE_ID, _LINK_SPAN_ID = length_delimited(1), length_delimited(2)
_LINK_ATTRIBUTE, _LINK_DROPPED_ATTRIBUTES = length_delimited(4), tag(5, 0)
_LINK_FLAGS = tag(6, 5)
_STATUS_MESSAGE, _STATUS_CODE = length_delimited(2), tag(3, 0)
# ExportTraceServiceRequest and ExportLogsServiceRequest (and their ResourceSpans /
# ResourceLogs, ScopeSpans / ScopeLogs) number their fields alike.
_REQUEST_RESOURCE_SPANS = length_delimited(1)
_RESOURCE_SPANS_RESOURCE, _RESOURCE_SPANS_SCOPE_SPANS = length_delimited(1), length_delimited(2)
_RESOURCE_ATTRIBUTE = length_delimited(1)
_SCOPE_SPANS_SCOPE, _SCOPE_SPANS_SPAN = length_delimited(1), length_delimited(2)
_SCOPE_NAME, _SCOPE_VERSION = length_delimited(1), length_delimited(2)
#: ``ScopeSpans.schema_url`` / ``ScopeLogs.schema_url``
_SCOPE_SPANS_SCHEMA_URL = length_delimited(3)
_UNSET_STATUS = message(_SPAN_STATUS, b"")
# A span's ids and times, each with its one-byte tag (and length), in one pack each:
# the ids big-endian (the trace id as two halves), the times little-endian.
_ROOT = struct.Struct(">BBQQBBQ").pack
_PARENTED = struct.Struct(">BBQQBBQBBQ").pack
_TIMES = struct.Struct("<BQBQ").pack
_TRACE_TAG, _ID_TAG, _PARENT_TAG = _SPAN_TRACE_ID[0], _SPAN_SPAN_ID[0], _SPAN_PARENT[0]
_START_TAG, _END_TAG = _SPAN_START[0], _SPAN_END[0]
_LOW64 = (1 << 64) - 1
_LINK_IDS = _ROOT
_LINK_TRACE_TAG, _LINK_SPAN_TAG = _LINK_TRACE_ID[0], _LINK_SPAN_ID[0]
_LOCAL_FLAGS = _SPAN_FLAGS + pack_fixed32(span_flags(_W3C_SAMPLED, remote=False))
_REMOTE_PARENT_FLAGS = _SPAN_FLAGS + pack_fixed32(span_flags(_W3C_SAMPLED, remote=True))


# Named tuples, not frozen dataclasses: one is built per event and per link of every
# span, and a frozen dataclass's __init__ sets each field through object.__setattr__.
class WireEvent(NamedTuple):
    name: str
    time_ns: int
    attributes: Mapping[str, object]


class WireLink(NamedTuple):
    trace_id: int
    span_id: int
    attributes: Mapping[str, object]
    #: W3C trace flags of the linked span (0x01: sampled).
    trace_flags: int = _W3C_SAMPLED
    #: The linked span was made in another process (a caller's span).
    remote: bool = False


def _event(event: WireEvent, limits: RecordLimits) -> bytes:
    attributes, dropped = key_values(
        _EVENT_ATTRIBUTE, event.attributes, limits.event_attribute_count, limits.attribute_length
    )
    out = (
        _EVENT_TIME
        + pack_fixed64(event.time_ns)
        + _span_event_name(event.name, limits.attribute_length)
        + attributes
    )
    if dropped:
        out += _EVENT_DROPPED_ATTRIBUTES + varint(dropped)
    return out


@lru_cache(maxsize=256)
def _span_event_name(name: str, max_length: int) -> bytes:
    """``Event.name`` with its tag: a handful of names recur on every span."""
    return message(_EVENT_NAME, utf8(name, max_length))


@lru_cache(maxsize=256)
def _span_name(name: str, max_length: int) -> bytes:
    """``Span.name`` with its tag: a span is named by its last tag or its task prefix,
    which recur from one workflow to the next."""
    return message(_SPAN_NAME, utf8(name[:max_length] or "(empty)", max_length))


def _link(link: WireLink, limits: RecordLimits) -> bytes:
    attributes, dropped = key_values(
        _LINK_ATTRIBUTE, link.attributes, limits.link_attribute_count, limits.attribute_length
    )
    trace_id = link.trace_id
    out = _LINK_IDS(
        _LINK_TRACE_TAG, 16, trace_id >> 64, trace_id & _LOW64, _LINK_SPAN_TAG, 8, link.span_id
    )
    out += attributes
    if dropped:
        out += _LINK_DROPPED_ATTRIBUTES + varint(dropped)
    return out + _link_flags(link.trace_flags, link.remote)


@lru_cache(maxsize=16)
def _link_flags(trace_flags: int, remote: bool) -> bytes:
    """``Link.flags`` with its tag: sampled and local, nearly always."""
    return _LINK_FLAGS + pack_fixed32(span_flags(trace_flags, remote=remote))


def _repeated(
    parts: list[bytes], field_tag: bytes, items: list[bytes], dropped: int, dropped_tag: bytes
) -> None:
    """A span's repeated messages (events, links) and how many were left out."""
    parts.extend([message(field_tag, item) for item in items])
    if dropped:
        parts.append(dropped_tag + varint(dropped))


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
    high, low = trace_id >> 64, trace_id & _LOW64
    parts = [
        _PARENTED(_TRACE_TAG, 16, high, low, _ID_TAG, 8, span_id, _PARENT_TAG, 8, parent_span_id)
        if parent_span_id
        else _ROOT(_TRACE_TAG, 16, high, low, _ID_TAG, 8, span_id),
        _span_name(name, max_length),
        _SPAN_KIND + SMALL[kind],
        _TIMES(_START_TAG, start_ns, _END_TAG, max(end_ns, start_ns)),
    ]
    if attributes:
        parts.append(
            attributes_field(
                _SPAN_ATTRIBUTE,
                attributes,
                limits.attribute_count,
                max_length,
                _SPAN_DROPPED_ATTRIBUTES,
            )
        )
    if events or events_dropped:
        kept = [_event(event, limits) for event in events[: limits.events]]
        dropped = events_dropped + len(events) - len(kept)
        _repeated(parts, _SPAN_EVENT, kept, dropped, _SPAN_DROPPED_EVENTS)
    if links or links_dropped:
        kept = [_link(link, limits) for link in links[: limits.links]]
        dropped = links_dropped + len(links) - len(kept)
        _repeated(parts, _SPAN_LINK, kept, dropped, _SPAN_DROPPED_LINKS)
    if status_message or status_code:
        status = b""
        if status_message:
            status += message(_STATUS_MESSAGE, utf8(status_message, max_length))
        if status_code:
            status += _STATUS_CODE + SMALL[status_code]
        parts.append(message(_SPAN_STATUS, status))
    else:
        parts.append(_UNSET_STATUS)
    parts.append(_REMOTE_PARENT_FLAGS if parent_remote and parent_span_id else _LOCAL_FLAGS)
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
        resource, _ = key_values(_RESOURCE_ATTRIBUTE, resource_attributes, 1 << 30, 1 << 30)
        scope = message(_SCOPE_NAME, scope_name.encode())
        if scope_version:
            scope += message(_SCOPE_VERSION, scope_version.encode())
        self._resource = message(_RESOURCE_SPANS_RESOURCE, resource)
        self._scope = message(_SCOPE_SPANS_SCOPE, scope)
        self._schema_url = (
            message(_SCOPE_SPANS_SCHEMA_URL, schema_url.encode()) if schema_url else b""
        )

    def request(self, spans: Iterable[bytes]) -> bytes:
        """An ``ExportTraceServiceRequest`` of ``spans``, or, given encoded log records,
        the ``ExportLogsServiceRequest`` of them (the two are numbered alike)."""
        return self.scoped_request([(self._scope, spans)])

    def scoped_request(self, scopes: Iterable[tuple[bytes, Iterable[bytes]]]) -> bytes:
        """One request of several scopes: (encoded scope or b"" for ours, its items).

        Written by one join, the lengths added up on the way: wrapping each level in
        turn would copy the whole request (100 kB and more) once per level.
        """
        parts = [b"", self._resource]
        total = len(self._resource)
        schema_url = self._schema_url
        for scope, items in scopes:
            scope = scope or self._scope
            at = len(parts)
            parts += (b"", scope)
            size = len(scope) + len(schema_url)
            for item in items:
                head = _SCOPE_SPANS_SPAN + _length(len(item))
                parts += (head, item)
                size += len(head) + len(item)
            parts.append(schema_url)
            parts[at] = _RESOURCE_SPANS_SCOPE_SPANS + _length(size)
            total += len(parts[at]) + size
        parts[0] = _REQUEST_RESOURCE_SPANS + _length(total)
        return b"".join(parts)


def _length(size: int) -> bytes:
    return SMALL[size] if size < 0x80 else varint(size)


def scope(name: str) -> bytes:
    """An encoded instrumentation scope of ``name`` (for :meth:`RequestEncoder.scoped_request`)."""
    return message(_SCOPE_SPANS_SCOPE, message(_SCOPE_NAME, name.encode()))
