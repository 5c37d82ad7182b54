"""Deterministic OpenTelemetry ids for Dask objects: every id scheme otel-spans uses.

Every process that knows a Dask span's uuid (the scheduler, a worker running one of its
tasks, a restarted exporter, an offline tool reading a dump) must arrive at the same
trace and span ids without talking to the others. Ids are therefore a hash of the Dask
identity, never random:

``trace_id = int(sha256("otel-spans/trace/" + root_uuid)[:16 bytes])``
``span_id  = int(sha256("otel-spans/span/"  + "/".join(parts))[:8 bytes])``

with one named function per object below; ``parts`` are given in each one's docstring.
The all-zero id is invalid in OTel; it is mapped to 1 (a 2**-64 chance that never
happens in practice but costs nothing to rule out). A caller's link or parent is the
caller's own ids, never derived. ``tests/unit/test_ids.py`` pins the bytes of each scheme:
the scheduler and the workers compute them independently, so a change is a break.
"""

from __future__ import annotations

import hashlib

_TRACE_PREFIX = b"otel-spans/trace/"
_SPAN_PREFIX = b"otel-spans/span/"


def _digest(prefix: bytes, text: str) -> bytes:
    # surrogatepass: Dask keys and tags can hold lone surrogates; they must hash, not raise.
    return hashlib.sha256(prefix + text.encode("utf-8", "surrogatepass")).digest()


def _span_id(*parts: str | int) -> int:
    return _span_id_of("/".join(str(part) for part in parts))


def _span_id_of(text: str) -> int:
    """The span id of the joined parts ``text``."""
    return int.from_bytes(_digest(_SPAN_PREFIX, text)[:8], "big") or 1


def workflow_trace_id(root_uuid: str) -> int:
    """The 128-bit trace id of the workflow rooted at the Dask span ``root_uuid``."""
    return int.from_bytes(_digest(_TRACE_PREFIX, root_uuid)[:16], "big") or 1


def dask_span_id(uuid: str) -> int:
    """The span id of the first export of the Dask span ``uuid``: parts ``(uuid,)``
    (one part: no join, as every new span pays it)."""
    return _span_id_of(str(uuid))


def continuation_span_id(uuid: str, n: int) -> int:
    """The n-th continuation (n >= 1) of a Dask span: ``(uuid, "continuation", n)``."""
    return _span_id(uuid, "continuation", n)


def task_group_span_id(uuid: str, group_name: str, n: int = 0) -> int:
    """A task group of the Dask span ``uuid``: ``(uuid, "group", name)``, and ``n`` appended
    for the n-th later group of the same name in that span (n >= 1)."""
    if n:
        return _span_id(uuid, "group", group_name, n)
    return _span_id(uuid, "group", group_name)


def task_span_id(uuid: str, key: str) -> int:
    """The task ``key`` in the Dask span ``uuid``, whichever of its runs is exported:
    ``(uuid, "task", key, 1)``.

    The same for every attempt (a rerun after a lost worker, a ``Reschedule``, a retry):
    a worker cannot know the attempt, and spans that task code starts on any attempt
    must name a parent the scheduler exports. The attempt is the ``dask.task.attempt``
    attribute. The trailing 1 is the attempt the scheme once numbered, kept so that ids
    of first runs are unchanged."""
    return _span_id(uuid, "task", key, 1)


def phase_span_id(task_span_id: int, index: int) -> int:
    """The ``index``-th phase (compute, transfer...) of a task run:
    ``(task span id in decimal, "phase", index)``."""
    return _span_id(task_span_id, "phase", index)
