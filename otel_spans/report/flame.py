"""Flame graphs of the hot code of a workflow's busiest task prefixes.

Input is the folded stacks of ``dask.profile`` log records (``otel-spans.profile``);
output is inline SVG, one icicle per prefix (callers on top, each frame as wide as its
share of the prefix's samples, the heaviest callee leftmost), plus the functions that
were running themselves most often. Frames too narrow to see are not drawn, but their
samples stay in their callers' widths.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from otel_spans.report.load import LoadedProfile
from otel_spans.report.markup import escape

_WIDTH = 1100
_ROW_H = 17
#: Rows drawn; deeper frames are summed in their ancestor at this depth.
_MAX_DEPTH = 60
#: Narrowest frame drawn (pixels).
_MIN_WIDTH = 0.7
_CHAR_W = 6.6
#: The line that sums the stacks a profile had no room for (telemetry.folded_stacks).
_OTHER = "(other stacks)"


@dataclass
class Frame:
    name: str
    #: Samples in this frame and everything it called.
    total: int = 0
    #: Samples where this frame itself was running.
    own: int = 0
    children: dict[str, Frame] = field(default_factory=dict)


def parse(folded: str) -> Frame:
    """The call tree of folded stacks text; malformed lines are skipped."""
    root = Frame("all")
    for line in folded.splitlines():
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        if not stack or count <= 0:
            continue
        root.total += count
        node = root
        for name in stack.split(";"):
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = Frame(name)
            child.total += count
            node = child
        node.own += count
    return root


def hottest(root: Frame, limit: int) -> list[tuple[str, int]]:
    """Functions by the samples in which they ran themselves (not their callees)."""
    own: dict[str, int] = {}
    todo = [root]
    while todo:
        node = todo.pop()
        if node is not root and node.own:
            own[node.name] = own.get(node.name, 0) + node.own
        todo.extend(node.children.values())
    return sorted(own.items(), key=lambda item: (-item[1], item[0]))[:limit]


def _colour(name: str) -> str:
    if name == _OTHER:
        return "#bbbbbb"
    h = zlib.crc32(name.split(" (", 1)[0].encode("utf-8", "replace"))
    return f"hsl({h % 55},{62 + h % 20}%,{58 + (h >> 8) % 14}%)"


def svg(root: Frame) -> str:
    """One icicle of ``root``'s tree."""
    if root.total <= 0:
        return ""
    scale = _WIDTH / root.total
    rects: list[str] = []
    depth_seen = 0
    todo: list[tuple[Frame, float, int]] = [(root, 0.0, 0)]
    while todo:
        node, x, depth = todo.pop()
        width = node.total * scale
        if width < _MIN_WIDTH:
            continue
        depth_seen = max(depth_seen, depth)
        y = depth * _ROW_H
        share = node.total / root.total
        title = escape(f"{node.name}: {node.total} samples ({share:.1%}), {node.own} own")
        label = ""
        chars = int((width - 6) / _CHAR_W)
        if chars >= 3:
            text = node.name if len(node.name) <= chars else node.name[: chars - 1] + "…"
            label = f'<text x="{x + 3:.1f}" y="{y + 12}">{escape(text)}</text>'
        rects.append(
            f'<g class="frame"><title>{title}</title><rect x="{x:.1f}" y="{y}" '
            f'width="{width:.1f}" height="{_ROW_H - 1}" fill="{_colour(node.name)}"/>'
            f"{label}</g>"
        )
        if depth + 1 >= _MAX_DEPTH:
            continue
        child_x = x
        kids = sorted(node.children.values(), key=lambda c: (-c.total, c.name))
        for kid in kids:
            todo.append((kid, child_x, depth + 1))
            child_x += kid.total * scale
    height = (depth_seen + 1) * _ROW_H
    return (
        f'<div class="scroll"><svg class="flame" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}">{"".join(rects)}</svg></div>'
    )


def section(profiles: Sequence[LoadedProfile]) -> str:
    """The "Hot code" section: a flame graph and the hottest functions per prefix."""
    if not profiles:
        return ""
    parts = [
        "<h2>Hot code</h2>",
        '<p class="sub">Dask\'s statistical profile of the busiest task prefixes over the '
        "workflow's time window (samples every 10 ms of the task threads; a prefix's "
        "tasks from other workflows in that window are included). Hover a frame for "
        "its samples.</p>",
    ]
    for profile in profiles:
        root = parse(profile.folded)
        note = f"{profile.samples:,} samples"
        if profile.folded_stacks:
            note += f", {profile.folded_stacks:,} light stacks summed as {_OTHER}"
        parts.append(f"<h3>{escape(profile.prefix)} <span class='sub'>{escape(note)}</span></h3>")
        if root.total <= 0:
            parts.append(
                '<p class="sub">no samples: its tasks ran too briefly to be sampled, or '
                "the workers' profiler is off (distributed.worker.profile.enabled)</p>"
            )
            continue
        parts.append(svg(root))
        rows = "".join(
            f'<tr><td class="name">{escape(name)}</td><td class="num">{n:,}</td>'
            f'<td class="num">{n / root.total:.1%}</td></tr>'
            for name, n in hottest(root, 8)
        )
        parts.append(
            "<table><tr><th>running itself</th><th class='num'>samples</th>"
            f"<th class='num'>share</th></tr>{rows}</table>"
        )
    return "\n".join(parts)


def summary_lines(profiles: Iterable[LoadedProfile]) -> list[str]:
    """One line per profiled prefix: the function that ran itself most."""
    lines = []
    for profile in profiles:
        root = parse(profile.folded)
        top = hottest(root, 1)
        if not top:
            lines.append(f"    {profile.prefix}: no samples (too brief, or profiler off)")
            continue
        name, n = top[0]
        lines.append(f"    {profile.prefix}: {name} {n / root.total:.0%} of {root.total:,} samples")
    return lines
