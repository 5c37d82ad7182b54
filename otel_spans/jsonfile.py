"""OTLP/JSON lines files: the embedded default when no collector is configured.

Each line is one ``Export<Signal>ServiceRequest`` in the OTLP/JSON encoding, the same
format the OpenTelemetry Collector's ``file`` exporter writes, so ``otel-spans report``
and any OTLP tool read both alike. OTLP/JSON differs from protobuf's default JSON
mapping in one way that matters: trace and span ids are lowercase hex, not base64.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids(node: Any) -> Any:
    """Re-encode the base64 id fields protobuf's JSON mapping produced as hex."""
    if isinstance(node, dict):
        return {
            key: base64.b64decode(value).hex()
            if key in _ID_KEYS and isinstance(value, str)
            else _hex_ids(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(item) for item in node]
    return node


def to_otlp_json(message: Message) -> str:
    """One OTLP request as one line of OTLP/JSON."""
    as_dict = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hex_ids(as_dict), separators=(",", ":"), ensure_ascii=False)


class JsonLinesWriter:
    """Appends OTLP/JSON lines to ``<directory>/<signal>-<role>-<pid>.jsonl``.

    One file per process and signal, so that a scheduler and its workers on one host
    never interleave half-written lines in a shared file.
    """

    def __init__(self, directory: Path, signal: str, role: str):
        self.path = directory.resolve() / f"{signal}-{role}-{os.getpid()}.jsonl"
        self._lock = threading.Lock()

    def write(self, message: Message) -> None:
        line = to_otlp_json(message) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
