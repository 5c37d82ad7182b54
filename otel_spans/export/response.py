"""An OTLP export response's partial success, read from its bytes.

Every signal's ``Export*ServiceResponse`` carries one field, ``partial_success`` (1), a
message of how many items the collector rejected (1, int64) and why (2, string); the
three signals number them alike. Reading those two fields here, instead of parsing the
response with the generated protobuf classes, keeps those classes (thousands of objects
that every full garbage collection of the scheduler walks) out of a process that only
ever writes requests by hand (:mod:`otel_spans.export.wire`,
:mod:`otel_spans.export.metrics_wire`).
"""

from __future__ import annotations

_U64_SIGN = 1 << 63


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]  # IndexError when truncated
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one message; a varint's value
    is its unsigned integer, a length-delimited one's its bytes."""
    out: list[tuple[int, int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        value: int | bytes
        if wire_type == 0:
            value, at = _varint(data, at)
        elif wire_type == 2:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
            if at > len(data):
                raise ValueError("truncated")
        elif wire_type in (1, 5):
            at += 8 if wire_type == 1 else 4
            if at > len(data):
                raise ValueError("truncated")
            value = 0
        else:
            raise ValueError(f"wire type {wire_type}")
        if number == 0:
            raise ValueError("field number 0")
        out.append((number, wire_type, value))
    return out


def partial_success(response: bytes) -> tuple[int, str]:
    """How many items the collector rejected, and its message ('' when none).

    Raises ``ValueError`` (or ``IndexError``) on bytes that are not a response: the
    caller takes those as a plain success. Unknown fields are skipped; a field seen
    twice is merged as protobuf does (the last value wins).
    """
    # Occurrences of an embedded message merge: parse them as one.
    partial = b"".join(v for n, t, v in _fields(response) if n == 1 and t == 2)  # type: ignore[misc]
    rejected, message = 0, ""
    for number, wire_type, value in _fields(partial):
        if number == 1 and wire_type == 0:
            assert isinstance(value, int)
            value &= (1 << 64) - 1
            rejected = value - (1 << 64) if value & _U64_SIGN else value
        elif number == 2 and wire_type == 2:
            assert isinstance(value, bytes)
            message = value.decode("utf-8", "replace")
    return rejected, message
