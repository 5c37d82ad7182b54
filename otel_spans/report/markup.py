"""What every renderer of the report formats the same way: escaping, numbers, tables.

The escaper is :func:`otel_spans.markup.escape` (shared with the scheduler's
workflows page), re-exported here so that a renderer takes all its markup from one
module. Durations read the same in every section and every page because they come
from :func:`seconds` alone.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

from otel_spans.markup import escape as escape
from otel_spans.markup import printable as printable

__all__ = [
    "Cell",
    "anchor",
    "bar",
    "colour",
    "escape",
    "more",
    "percent",
    "printable",
    "seconds",
    "short",
    "table",
]


def anchor(kind: str, name: str) -> str:
    """An element id for the row or node of ``name`` (user text: hashed, never put in
    the id itself), the same in every section, so that a finding can link to it."""
    return f"{kind}-{zlib.crc32(name.encode('utf-8', 'surrogatepass')):08x}"


def short(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters, the cut shown by an ellipsis."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def seconds(value: float) -> str:
    """A duration for people: 3 significant digits, unit chosen by size."""
    if value < 0:
        return "−" + seconds(-value)
    if value == 0:
        return "0 s"
    # Thresholds just below each unit, so that rounding to 3 digits never shows 1e+03.
    if value < 0.9995e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 0.9995:
        return f"{value * 1e3:.3g} ms"
    if value < 99.5:
        return f"{value:.3g} s"
    whole = round(value)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def percent(value: float | None) -> str:
    """A share as a percentage with one decimal; ``n/a`` when unknown."""
    return "n/a" if value is None else f"{value * 100:.1f} %"


def colour(name: str) -> str:
    """A stable colour per prefix: the same prefix looks the same in every report."""
    return f"hsl({zlib.crc32(name.encode('utf-8', 'surrogatepass')) % 360}, 55%, 55%)"


def bar(share: float, fill: str = "#4c78a8") -> str:
    """A horizontal bar of ``share`` (clamped to 0..1) followed by the percentage."""
    width = max(0.0, min(share, 1.0)) * 100
    return (
        f'<span class="bar"><span style="width:{width:.1f}%;background:{fill}"></span></span>'
        f"{percent(share)}"
    )


#: A table cell: its class (``"num"``, ``"name"`` or ``""``) and its HTML.
Cell = tuple[str, str]


def table(
    headers: Sequence[Cell], rows: Iterable[Sequence[Cell]], *, row_attrs: Sequence[str] = ()
) -> str:
    """A sortable table; header and cell HTML must already be escaped."""
    head = "".join(f'<th class="{cls}">{text}</th>' for cls, text in headers)
    body = []
    for n, cells in enumerate(rows):
        attrs = row_attrs[n] if n < len(row_attrs) else ""
        tds = "".join(f'<td class="{cls}">{text}</td>' for cls, text in cells)
        body.append(f"<tr{attrs}>{tds}</tr>")
    return (
        f'<table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def more(count: int, what: str) -> str:
    """The note under a capped table or chart: how many rows were left out."""
    return f'<p class="note">{count:,} more {what} not shown.</p>' if count > 0 else ""
