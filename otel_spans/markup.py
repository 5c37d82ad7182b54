"""Text from a workflow made safe to write: as UTF-8, and as HTML.

Span names, task keys, prefixes and worker addresses are user input. Dask keys may
hold lone surrogates (a ``str`` that cannot be encoded as UTF-8: writing it raises),
and any name may hold markup or control characters. Every page otel-spans writes (the
report, the comparison, the scheduler's ``/otel-spans/workflows`` page) escapes with
:func:`escape`, and every other UTF-8 output goes through :func:`printable` (the one
rule of :func:`otel_spans.names.clean`, which the scheduler applies to names where
they enter), so one hostile name cannot break or inject into any of them.
"""

from __future__ import annotations

import html

from otel_spans.names import clean

#: C0 controls and DEL shown as their Unicode control pictures, C1 controls as U+FFFD:
#: visible in a page, and not the parse errors raw controls are in HTML.
_CONTROLS = {c: 0x2400 + c for c in range(0x20)} | {0x7F: 0x2421}
_CONTROLS |= {c: 0xFFFD for c in range(0x80, 0xA0)}


def printable(value: str) -> str:
    """``value`` encodable as UTF-8: each lone surrogate becomes U+FFFD."""
    return clean(value)


def escape(value: object) -> str:
    """``value`` (any object, as ``str(value)``) as HTML text or attribute content:
    markup and quotes escaped, control characters shown, lone surrogates replaced."""
    return html.escape(printable(str(value)).translate(_CONTROLS), quote=True)
