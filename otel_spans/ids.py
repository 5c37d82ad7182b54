"""Deterministic OpenTelemetry ids for Dask objects.

Every process that knows a Dask span's uuid (the scheduler, a worker running one of its
tasks, a restarted exporter, an offline tool reading a dump) must arrive at the same
trace and span ids without talking to the others. Ids are therefore a hash of the Dask
identity, never random:

``trace_id = int(sha256("otel-spans/trace/" + root_uuid)[:16 bytes])``
``span_id  = int(sha256("otel-spans/span/"  + "/".join(parts))[:8 bytes])``

where ``root_uuid`` is the uuid of the root of the Dask span tree and ``parts`` names
the object: ``(span_uuid,)`` for a Dask span, ``(span_uuid, "continuation", n)`` for its
n-th continuation. The all-zero id is invalid in OTel; it is mapped to 1 (a 2**-64
chance that never happens in practice but costs nothing to rule out).
"""

from __future__ import annotations

import hashlib

_TRACE_PREFIX = b"otel-spans/trace/"
_SPAN_PREFIX = b"otel-spans/span/"


def _digest(prefix: bytes, text: str) -> bytes:
    # surrogatepass: Dask keys and tags can hold lone surrogates; they must hash, not raise.
    return hashlib.sha256(prefix + text.encode("utf-8", "surrogatepass")).digest()


def trace_id_for(root_uuid: str) -> int:
    """The 128-bit trace id of the trace rooted at the Dask span ``root_uuid``."""
    return int.from_bytes(_digest(_TRACE_PREFIX, root_uuid)[:16], "big") or 1


def span_id_for(*parts: str | int) -> int:
    """The 64-bit span id of the object named by ``parts`` (see module docstring)."""
    text = "/".join(str(part) for part in parts)
    return int.from_bytes(_digest(_SPAN_PREFIX, text)[:8], "big") or 1


def dask_span_id(span_uuid: str, continuation: int = 0) -> int:
    """The span id of a Dask span, or of its n-th continuation (n >= 1)."""
    if continuation:
        return span_id_for(span_uuid, "continuation", continuation)
    return span_id_for(span_uuid)
