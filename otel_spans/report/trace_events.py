"""The Chrome Trace Event JSON format, as far as the Perfetto trace uses it: one small
dataclass per event phase and the encoder of the file's ``JSON Object Format``.

What the events mean (tracks, the critical path, arrows) is :mod:`.perfetto`'s; this
module only knows how the format spells them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ArgValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Complete:
    """A ``"ph": "X"`` event: something that ran from ``ts`` for ``dur`` microseconds."""

    name: str
    cat: str
    pid: int
    tid: int
    ts: float
    dur: float
    args: Mapping[str, ArgValue]
    cname: str | None = None

    def to_json(self) -> dict[str, Any]:
        event: dict[str, Any] = {
            "name": self.name,
            "cat": self.cat,
            "ph": "X",
            "pid": self.pid,
            "tid": self.tid,
            "ts": self.ts,
            "dur": self.dur,
            "args": dict(self.args),
        }
        if self.cname:
            event["cname"] = self.cname
        return event


@dataclass(frozen=True, slots=True)
class Flow:
    """One end of a flow arrow: ``"s"`` on the producer, ``"f"`` on the consumer."""

    id: int
    start: bool
    pid: int
    tid: int
    ts: float

    def to_json(self) -> dict[str, Any]:
        event: dict[str, Any] = {
            "name": "dependency",
            "cat": "dependency",
            "ph": "s" if self.start else "f",
            "id": self.id,
            "pid": self.pid,
            "tid": self.tid,
            "ts": self.ts,
        }
        if not self.start:
            # Bind to the consumer's slice enclosing ts, not to the next slice.
            event["bp"] = "e"
        return event


@dataclass(frozen=True, slots=True)
class Metadata:
    """A ``"ph": "M"`` event naming or ordering a process or a track."""

    #: ``process_name``, ``thread_name``, ``process_sort_index`` or ``thread_sort_index``.
    name: str
    pid: int
    tid: int
    value: str | int

    def to_json(self) -> dict[str, Any]:
        key = "name" if isinstance(self.value, str) else "sort_index"
        return {
            "name": self.name,
            "ph": "M",
            "pid": self.pid,
            "tid": self.tid,
            "args": {key: self.value},
        }


Event = Complete | Flow | Metadata


def pieces(events: Sequence[Event], other: dict[str, Any]) -> Iterator[str]:
    """The file, an event at a time: ``{"traceEvents": [...], "displayTimeUnit": "ms",
    "otherData": other}`` as compact UTF-8 JSON (non-ASCII text kept as is)."""
    yield '{"traceEvents":['
    for n, event in enumerate(events):
        if n:
            yield ","
        yield _dumps(event.to_json())
    yield f'],"displayTimeUnit":"ms","otherData":{_dumps(other)}}}'


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
