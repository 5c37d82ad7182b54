"""Protobuf's wire format and OTLP's common values: ``AnyValue`` and ``KeyValue``.

The primitives of :mod:`otel_spans.export.wire` (spans, log records, requests), apart
because every attribute of every record passes through :func:`key_values`, the
encoder's hottest loop, and its rules (what each kind of value becomes, how strings
are cut) are read apart from the messages that carry them. Field numbers are those of
``opentelemetry/proto/common/v1/common.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from functools import lru_cache

from otel_spans.names import clean

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
pack_fixed64 = struct.Struct("<Q").pack
pack_double = struct.Struct("<d").pack
pack_fixed32 = struct.Struct("<I").pack


def varint(value: int) -> bytes:
    """A base-128 varint; negative int64 values as their 10-byte two's complement."""
    if 0 <= value < 0x80:
        return SMALL[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


SMALL = [bytes([i]) for i in range(0x80)]


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def length_delimited(field: int) -> bytes:
    return tag(field, 2)


def message(field_tag: bytes, payload: bytes) -> bytes:
    size = len(payload)
    return field_tag + (SMALL[size] if size < 0x80 else varint(size)) + payload


# AnyValue, ArrayValue, KeyValueList and KeyValue tags.
KV_KEY, KV_VALUE = length_delimited(1), length_delimited(2)
ANY_STRING, ANY_BOOL, ANY_INT = length_delimited(1), tag(2, 0), tag(3, 0)
ANY_DOUBLE, ANY_ARRAY = tag(4, 1), length_delimited(5)
ANY_KVLIST, ANY_BYTES = length_delimited(6), length_delimited(7)
ARRAY_VALUES = length_delimited(1)
KVLIST_VALUES = length_delimited(1)


@lru_cache(maxsize=4096)
def key_field(name: str) -> bytes:
    """``KeyValue.key`` with its tag: the same few dozen keys recur on every span."""
    return message(KV_KEY, utf8(name, len(name)))


def utf8(value: str, max_length: int) -> bytes:
    """``value`` cut to ``max_length`` characters, as UTF-8."""
    try:
        return value[:max_length].encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate is not UTF-8, and one bad string would make a collector
        # refuse the whole batch: it becomes U+FFFD, as names do where they enter.
        return clean(value, max_length).encode("utf-8")


def scalar(value: object, max_length: int) -> bytes:
    """An ``AnyValue`` payload for one non-sequence value."""
    if isinstance(value, str):
        return message(ANY_STRING, utf8(value, max_length))
    if isinstance(value, bool):  # before int: bool is an int
        return ANY_BOOL + SMALL[int(value)]
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return ANY_INT + varint(value)
        return message(ANY_STRING, utf8(str(value), max_length))
    if isinstance(value, float):
        return ANY_DOUBLE + pack_double(value)
    return message(ANY_STRING, utf8(str(value), max_length))


def any_value(value: object, max_length: int) -> bytes:
    if isinstance(value, list | tuple):
        items = b"".join(message(ARRAY_VALUES, scalar(item, max_length)) for item in value)
        return message(ANY_ARRAY, items)
    return scalar(value, max_length)


def nested_value(value: object, max_length: int) -> bytes:
    """An ``AnyValue`` payload for a log body: maps, lists and bytes at any depth.

    The caller bounds depth and size (:func:`otel_spans.logs.safe_body`); ``None`` is
    an empty ``AnyValue``, as the SDK writes it.
    """
    if value is None:
        return b""
    if isinstance(value, bytes):
        return message(ANY_BYTES, value)
    if isinstance(value, Mapping):
        pairs = b"".join(
            message(
                KVLIST_VALUES, key_field(str(k)) + message(KV_VALUE, nested_value(v, max_length))
            )
            for k, v in value.items()
        )
        return message(ANY_KVLIST, pairs)
    if isinstance(value, list | tuple):
        items = b"".join(message(ARRAY_VALUES, nested_value(v, max_length)) for v in value)
        return message(ANY_ARRAY, items)
    return scalar(value, max_length)


def key_values(
    field_tag: bytes, attributes: Mapping[str, object], max_count: int, max_length: int
) -> tuple[bytes, int]:
    """Repeated ``KeyValue`` fields under ``field_tag``: the first ``max_count`` pairs, values
    cut to ``max_length``, and how many were dropped. ``None`` values are left out, as
    the SDK does."""
    parts: list[bytes] = []
    dropped = 0
    # Every attribute of every record passes here: the scalar kinds are encoded inline
    # (by exact type; subclasses and sequences go through any_value), and each length
    # below 128 is its one byte, without the helpers' calls.
    for name, value in attributes.items():
        if value is None:
            continue
        if len(parts) == max_count:
            dropped += 1
            continue
        if type(value) is str:
            encoded = utf8(value, max_length)
            size = len(encoded)
            payload = ANY_STRING + (SMALL[size] if size < 0x80 else varint(size)) + encoded
        elif type(value) is int and INT64_MIN <= value <= INT64_MAX:
            payload = ANY_INT + varint(value)
        elif type(value) is float:
            payload = ANY_DOUBLE + pack_double(value)
        elif type(value) is bool:
            payload = ANY_BOOL + SMALL[value]
        else:
            payload = any_value(value, max_length)
        size = len(payload)
        pair = key_field(name) + KV_VALUE + (SMALL[size] if size < 0x80 else varint(size)) + payload
        size = len(pair)
        parts.append(field_tag + (SMALL[size] if size < 0x80 else varint(size)) + pair)
    return b"".join(parts), dropped
