"""A log record's body: any Python object, bounded, and written as an OTLP ``AnyValue``.

Dask's structured events carry whatever the code that logged them put in: dicts of
anything, user objects, huge strings. :func:`safe_body` turns any of it into an OTel
``AnyValue`` within fixed bounds (depth, items, string length) and never raises, so a
strange event costs a truncated log record, never an exporter failure.

:func:`encoded_body` writes the bytes of ``safe_body``'s result in one pass, for the
plain dicts, lists and scalars Dask's events are made of: the scheduler logs an event
per client call, and bounding a body into a new dict and then encoding that dict cost
more than the rest of the record. Anything else goes the two-step way, which remains
the definition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from otel_spans.export.protobuf import (
    ANY_ARRAY,
    ANY_BOOL,
    ANY_DOUBLE,
    ANY_INT,
    ANY_KVLIST,
    ANY_STRING,
    ARRAY_VALUES,
    INT64_MAX,
    INT64_MIN,
    KVLIST_VALUES,
    SMALL,
    key_table,
    message,
    nested_value,
    pack_double,
    utf8,
    varint,
)

_MAX_DEPTH = 4
_MAX_ITEMS = 100
_TRUE, _FALSE = ANY_BOOL + SMALL[1], ANY_BOOL + SMALL[0]


def _text(value: object, max_length: int) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception as e:  # a user object whose repr raises
        text = f"<unrepresentable {type(value).__name__}: {type(e).__name__}>"
    return text[:max_length]


def safe_body(value: object, max_length: int, depth: int = 0) -> Any:
    """A bounded OTel AnyValue for any Python object."""
    cls = type(value)
    # Exact types first: the ABC check of Mapping costs more than the rest.
    if cls is str:
        return value[:max_length]  # type: ignore[index]
    if value is None or cls is int or cls is float or cls is bool:
        return value
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str | bytes):
        return value[:max_length]
    if depth >= _MAX_DEPTH:
        return _text(value, max_length)
    try:
        if cls is not list and cls is not tuple and isinstance(value, Mapping):
            items = list(value.items())[:_MAX_ITEMS]
            return {_text(k, max_length): safe_body(v, max_length, depth + 1) for k, v in items}
        if isinstance(value, list | tuple | set | frozenset):
            return [safe_body(v, max_length, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    except Exception:
        pass
    return _text(value, max_length)


def bounded_attributes(pairs: Iterable[tuple[str, object]], max_length: int) -> dict[str, Any]:
    """A log record's attributes, each value :func:`safe_body`'s, but for the plain
    strings, numbers and tuples of strings most hold, kept as they are: the encoder
    cuts no string that fits ``max_length``, and writes a tuple's strings as it writes
    the list ``safe_body`` would make of them."""
    attributes: dict[str, Any] = {}
    for key, value in pairs:
        attributes[key] = value if _plain(value, max_length) else safe_body(value, max_length)
    return attributes


def _plain(value: Any, max_length: int) -> bool:
    cls = type(value)
    if cls is str:
        return len(value) <= max_length
    if cls is tuple:
        return len(value) <= _MAX_ITEMS and all(
            type(item) is str and len(item) <= max_length for item in value
        )
    return cls is int or cls is float or cls is bool


def encoded_body(value: Any, max_length: int, depth: int = 0) -> bytes:
    """The ``AnyValue`` payload of ``safe_body(value, max_length, depth)``, written with
    ``max_length`` as the string limit too: what ``nested_value`` writes of it."""
    cls = type(value)
    if cls is str:  # cut first, as safe_body cuts it before the encoder does
        return message(ANY_STRING, utf8(value[:max_length], max_length))
    if cls is int and INT64_MIN <= value <= INT64_MAX:
        return ANY_INT + varint(value)
    if cls is float:
        return ANY_DOUBLE + pack_double(value)
    if value is None:
        return b""
    if cls is bool:
        return _TRUE if value else _FALSE
    if depth < _MAX_DEPTH:
        if cls is dict and len(value) <= _MAX_ITEMS:
            pairs = _pairs(value, max_length, depth)
            if pairs is not None:
                return message(ANY_KVLIST, pairs)
            return nested_value(safe_body(value, max_length, depth), max_length)
        if cls is list or cls is tuple:
            items = b"".join(
                [
                    message(ARRAY_VALUES, encoded_body(v, max_length, depth + 1))
                    for v in value[:_MAX_ITEMS]
                ]
            )
            return message(ANY_ARRAY, items)
    return nested_value(safe_body(value, max_length, depth), max_length)


def _pairs(value: dict[Any, Any], max_length: int, depth: int) -> bytes | None:
    """The ``KeyValueList`` pairs of a dict at ``depth``: plain values as ``key_values``
    writes attributes (one head by key and the value's bytes), any other value as
    :func:`encoded_body` writes it. None when a key is not a string that fits
    ``max_length``: cut, it could meet another key, of which safe_body keeps one."""
    pairs: list[bytes] = []
    append = pairs.append
    table = key_table(KVLIST_VALUES)
    for k, v in value.items():
        if type(k) is not str or len(k) > max_length:
            return None
        heads = table[k]
        cls = type(v)
        if cls is int and 0 <= v < 0x80 and heads.small_int is not None:
            append(heads.small_int + SMALL[v])
        elif cls is float and heads.double is not None:
            append(heads.double + pack_double(v))
        elif cls is str and len(v) <= max_length:  # no cut: utf8() writes it alike
            append(heads.string_pair(utf8(v, max_length)))
        elif cls is bool and heads.bools is not None:
            append(heads.bools[v])
        else:
            append(heads.pair(encoded_body(v, max_length, depth + 1)))
    return b"".join(pairs)
