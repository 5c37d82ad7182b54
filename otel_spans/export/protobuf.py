"""Protobuf's wire format and OTLP's common values: ``AnyValue`` and ``KeyValue``.

The primitives of :mod:`otel_spans.export.wire` (spans, log records, requests), apart
because every attribute of every record passes through :func:`key_values`, the
encoder's hottest loop, and its rules (what each kind of value becomes, how strings
are cut) are read apart from the messages that carry them. Field numbers are those of
``opentelemetry/proto/common/v1/common.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    size = (value.bit_length() + 6) // 7
    if size > 10:
        return _varint_loop(value)
    # Each 7-bit group moved to a byte of its own by three masked shifts (28-, 14- and
    # 7-bit halves) instead of a turn of a loop per byte: every span carries
    # nanosecond timestamps, nine bytes each.
    spread = value & 0xFFFFFFF | (value & 0xFFFFFFF0000000) << 4
    spread = spread & 0x00003FFF00003FFF | (spread & 0x0FFFC0000FFFC000) << 2
    spread = spread & 0x007F007F007F007F | (spread & 0x3F803F803F803F80) << 1
    if size > 8:
        spread |= (value >> 56 & 0x7F) << 64 | (value >> 63) << 72
    return (spread | _CONTINUED[size]).to_bytes(size, "little")


def _varint_loop(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: The continuation bits of a varint of n bytes: the top bit of each byte but the last.
_CONTINUED = [0] + [int.from_bytes(b"\x80" * (n - 1) + b"\x00", "little") for n in range(1, 11)]
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


def key_field(name: str) -> bytes:
    """``KeyValue.key`` with its tag: the same few dozen keys recur on every span."""
    return (_KEYS.get(name) or _key(name))[0]


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

    The caller bounds depth and size (:func:`otel_spans.telemetry.log_body.safe_body`);
    ``None`` is an empty ``AnyValue``, as the SDK writes it.
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


#: ``KeyValue.key`` with its tag, and its length, by key (attributes' and log bodies'
#: alike, :func:`key_field`): the few dozen keys of otel-spans recur on every record
#: (bounded: a Python logger's record or a Dask event may bring keys of its own).
_KEYS: dict[str, tuple[bytes, int]] = {}
_MAX_KEYS = 4096
#: By a field's tag: that tag followed by each one-byte length, 0 to 127.
_HEADS: dict[bytes, list[bytes]] = {}
# What follows the key in a ``KeyValue``, up to the value's own bytes (the value's tag
# and length, the ``AnyValue``'s tag, a string's length), for the common kinds: by the
# length of those bytes (by the value itself for booleans; a small integer's is
# ``_SMALL_INT``). And the same head for a string in an ``ArrayValue``.
_STRING_VALUE = [KV_VALUE + SMALL[n + 2] + ANY_STRING + SMALL[n] for n in range(0x7E)]
_INT_VALUE = [KV_VALUE + SMALL[n + 1] + ANY_INT for n in range(11)]
_BOOL_VALUE = [KV_VALUE + b"\x02" + ANY_BOOL + SMALL[n] for n in range(2)]
_DOUBLE_VALUE = KV_VALUE + b"\x09" + ANY_DOUBLE
_ARRAY_STRING = [ARRAY_VALUES + SMALL[n + 2] + ANY_STRING + SMALL[n] for n in range(0x7E)]


def _key(name: str) -> tuple[bytes, int]:
    if len(_KEYS) >= _MAX_KEYS:
        _KEYS.clear()
    key = message(KV_KEY, utf8(name, len(name)))
    entry = _KEYS[name] = key, len(key)
    return entry


def _heads(field_tag: bytes) -> list[bytes]:
    heads = _HEADS[field_tag] = [field_tag + SMALL[n] for n in range(0x80)]
    return heads


def _strings(value: Sequence[object], max_length: int) -> bytes | None:
    """The ``AnyValue`` of a tuple or list of short strings (a span's tags, its critical
    path's groups), or None when it is anything else: then :func:`any_value` writes it."""
    parts: list[bytes] = []
    size = 0
    try:
        for item in value:
            if type(item) is not str:
                return None
            encoded = item[:max_length].encode()
            head = _ARRAY_STRING[len(encoded)]
            parts += (head, encoded)
            size += len(head) + len(encoded)
    except (UnicodeEncodeError, IndexError):  # a lone surrogate; 126 bytes or more
        return None
    items = b"".join(parts)
    return ANY_ARRAY + (SMALL[size] if size < 0x80 else varint(size)) + items


def _pair(field_tag: bytes, key: bytes, payload: bytes) -> bytes:
    """A ``KeyValue`` under ``field_tag`` of any ``AnyValue`` payload."""
    return message(field_tag, key + message(KV_VALUE, payload))


class KeyHeads:
    """One key's ``KeyValue`` under one field tag, written up to its value.

    Every pair of a key begins with the same bytes up to the value's own, given the
    kind of value and, for strings and integers, its length in bytes: the field's tag
    and length, the key, the value's tag and length. Kept by key, a pair is then one
    head and the value's bytes instead of four pieces joined anew. Where the pair's
    length takes more than one byte there is no head (None for a kind, b"" for a
    length): those pairs are written whole.
    """

    __slots__ = (
        "_tuples",
        "bools",
        "double",
        "field_tag",
        "ints",
        "key",
        "size",
        "small_int",
        "strings",
    )

    def __init__(self, field_tag: bytes, name: str):
        key, size = _KEYS.get(name) or _key(name)
        self.field_tag, self.key, self.size = field_tag, key, size
        heads = _HEADS.get(field_tag) or _heads(field_tag)
        self.double = heads[size + 11] + key + _DOUBLE_VALUE if size < 0x80 - 11 else None
        self.small_int = heads[size + 4] + key + _SMALL_INT if size < 0x80 - 4 else None
        self.bools = [heads[size + 4] + key + b for b in _BOOL_VALUE] if size < 0x80 - 4 else None
        #: Heads by the length of the string, or of the integer's varint.
        self.strings: dict[int, bytes] = {}
        self.ints: dict[int, bytes] = {}
        #: Whole pairs of tuples of strings, and the string limit they were cut to (see
        #: tuple_pair): one object, read once, so that an exporter thread never meets
        #: pairs another one cut to another limit.
        self._tuples: tuple[int, dict[tuple[object, ...], bytes]] = (0, {})

    def string_head(self, length: int) -> bytes:
        """The head of a string of ``length`` bytes (callers look in ``strings`` first)."""
        if length >= 0x7E:  # its pair takes more than 127 bytes, whatever the key
            return b""
        head = self.strings.get(length)
        if head is None:
            if len(self.strings) >= _MAX_HEADS:
                self.strings.clear()
            head = self.strings[length] = self._head(length + 4, _STRING_VALUE, length)
        return head

    def string_pair(self, encoded: bytes) -> bytes:
        """The pair of a string value already encoded (and cut)."""
        length = len(encoded)
        head = self.strings.get(length) or self.string_head(length)
        return head + encoded if head else self.pair(ANY_STRING + varint(length) + encoded)

    def int_head(self, length: int) -> bytes:
        head = self.ints.get(length)
        if head is None:
            head = self.ints[length] = self._head(length + 3, _INT_VALUE, length)
        return head

    def _head(self, value_size: int, value_heads: list[bytes], length: int) -> bytes:
        """The head of a value of ``value_size`` bytes in all; b"" when the pair's
        length would take more than one byte."""
        size = self.size + value_size
        if size >= 0x80:
            return b""
        return _HEADS[self.field_tag][size] + self.key + value_heads[length]

    def tuple_pair(self, value: tuple[object, ...], max_length: int) -> bytes:
        """The pair of a tuple, kept whole when it holds strings alone: a span's tags,
        its workflow's bottlenecks and findings recur from one workflow to the next. A
        hit is then a tuple of equal strings, which encode alike. Few are kept: some
        tuples never recur (a workflow's critical path names its own task groups), and
        what the cache holds of them is memory a long-lived scheduler keeps for nothing.
        """
        limit, tuples = self._tuples
        if limit != max_length:
            tuples = {}
            self._tuples = max_length, tuples
        try:
            pair = tuples.get(value)
        except TypeError:  # an item that cannot be hashed (a list): not strings anyway
            return self.pair(any_value(value, max_length))
        if pair is None:
            payload = _strings(value, max_length)
            if payload is None:
                return self.pair(any_value(value, max_length))
            if len(tuples) >= _MAX_TUPLES:
                tuples.clear()
            pair = tuples[value] = self.pair(payload)
        return pair

    def pair(self, payload: bytes) -> bytes:
        """The pair of any ``AnyValue`` payload."""
        length = len(payload)
        size = self.size + length + 2
        if size < 0x80:
            return _HEADS[self.field_tag][size] + self.key + KV_VALUE + SMALL[length] + payload
        return _pair(self.field_tag, self.key, payload)


class _Table(dict[str, KeyHeads]):
    """The heads of keys under one field tag, made on a key's first use (bounded as
    ``_KEYS`` is)."""

    def __init__(self, field_tag: bytes):
        super().__init__()
        self.field_tag = field_tag

    def __missing__(self, name: str) -> KeyHeads:
        if len(self) >= _MAX_KEYS:
            self.clear()
        heads = self[name] = KeyHeads(self.field_tag, name)
        return heads


#: By field tag; heads of strings are kept per key by length (bounded: a key's strings
#: may come in any length), and so are its recent tuples of strings.
_TABLES: dict[bytes, _Table] = {}
_MAX_HEADS = 16
_MAX_TUPLES = 32
_SMALL_INT = KV_VALUE + b"\x02" + ANY_INT


def key_table(field_tag: bytes) -> Mapping[str, KeyHeads]:
    """The heads of every key's pairs under ``field_tag``, by key (for a log body's
    dicts, written as :func:`key_values` writes attributes)."""
    table = _TABLES.get(field_tag)
    if table is None:
        table = _TABLES[field_tag] = _Table(field_tag)
    return table


def key_values(
    field_tag: bytes, attributes: Mapping[str, object], max_count: int, max_length: int
) -> tuple[bytes, int]:
    """Repeated ``KeyValue`` fields under ``field_tag``: the first ``max_count`` pairs, values
    cut to ``max_length``, and how many were dropped. ``None`` values are left out, as
    the SDK does."""
    if len(attributes) > max_count:
        return _first(field_tag, attributes, max_count, max_length)
    parts: list[bytes] = []
    append = parts.append
    table = _TABLES.get(field_tag) or key_table(field_tag)
    pairs: Iterable[tuple[str, Any]] = attributes.items()  # dispatched on type() below
    # Every attribute of every record passes here. The common kinds (by exact type, the
    # most frequent first; subclasses go through any_value) are written as the key's
    # head for the kind (and length) and the value's own bytes.
    for name, value in pairs:
        entry = table[name]
        cls = type(value)
        if cls is int:
            if 0 <= value < 0x80 and entry.small_int is not None:
                append(entry.small_int + SMALL[value])
            elif INT64_MIN <= value <= INT64_MAX:
                encoded = varint(value)
                head = entry.ints.get(len(encoded)) or entry.int_head(len(encoded))
                append(head + encoded if head else entry.pair(ANY_INT + encoded))
            else:
                append(entry.pair(any_value(value, max_length)))
        elif cls is float and entry.double is not None:
            append(entry.double + pack_double(value))
        elif cls is str:
            try:
                encoded = value[:max_length].encode()
            except UnicodeEncodeError:
                encoded = utf8(value, max_length)
            append(entry.string_pair(encoded))
        elif cls is bool and entry.bools is not None:
            append(entry.bools[value])
        elif value is None:
            continue
        elif cls is tuple:
            append(entry.tuple_pair(value, max_length))
        elif cls is list:
            append(entry.pair(_strings(value, max_length) or any_value(value, max_length)))
        else:
            append(entry.pair(any_value(value, max_length)))
    return b"".join(parts), 0


def attributes_field(
    field_tag: bytes,
    attributes: Mapping[str, object],
    max_count: int,
    max_length: int,
    dropped_tag: bytes,
) -> bytes:
    """A message's attributes under ``field_tag`` (:func:`key_values`) and, when some did
    not fit, their count under ``dropped_tag``: the pair a span and a log record share."""
    encoded, dropped = key_values(field_tag, attributes, max_count, max_length)
    return encoded + dropped_tag + varint(dropped) if dropped else encoded


def _first(
    field_tag: bytes, attributes: Mapping[str, object], max_count: int, max_length: int
) -> tuple[bytes, int]:
    """:func:`key_values` of more attributes than ``max_count``: the first are kept."""
    kept: dict[str, object] = {}
    dropped = 0
    for name, value in attributes.items():
        if value is None:
            continue
        if len(kept) == max_count:
            dropped += 1
        else:
            kept[name] = value
    encoded, _ = key_values(field_tag, kept, max_count, max_length)
    return encoded, dropped
