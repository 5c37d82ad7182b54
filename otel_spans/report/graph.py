"""The task-group graph of the HTML report: a layered drawing, inline SVG.

Nodes are task groups (a task-level run is drawn as its group), placed in columns by
the length of their longest chain of dependencies, so the flow reads left to right;
within a column, a group sits near the average row of the groups it depends on, which
keeps most edges short. Node colour darkens with compute time, erred groups have a red
outline and the critical path is drawn in a heavier colour. The page zooms with its
own buttons (no network, no library): a graph of 500 groups stays legible.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from otel_spans.analysis.model import TaskRun
from otel_spans.analysis.workflow import Analysis
from otel_spans.report.markup import anchor as anchor_id
from otel_spans.report.markup import escape

#: Layout grid (SVG user units).
_COLUMN, _ROW, _NODE_W, _NODE_H = 190, 30, 160, 22
#: Groups drawn at most; the ones with the most compute time are kept.
MAX_NODES = 2000


@dataclass
class Node:
    name: str
    compute_ns: int = 0
    tasks: int = 0
    erred: bool = False
    layer: int = 0
    row: float = 0.0


def groups_of(tasks: Iterable[TaskRun]) -> tuple[dict[str, Node], set[tuple[str, str]]]:
    """Nodes by group name and (upstream, downstream) edges between groups."""
    tasks = list(tasks)
    group_of = {t.key: t.group or t.key for t in tasks}
    nodes: dict[str, Node] = {}
    edges: set[tuple[str, str]] = set()
    for t in tasks:
        name = group_of[t.key]
        node = nodes.setdefault(name, Node(name))
        node.compute_ns += t.compute_ns
        node.tasks += t.count
        node.erred = node.erred or t.state == "erred"
        for dep in t.dependencies:
            upstream = group_of.get(dep)
            if upstream is not None and upstream != name:
                edges.add((upstream, name))
    return nodes, edges


def layout(nodes: dict[str, Node], edges: set[tuple[str, str]]) -> None:
    """Longest-path layers (cycles, which valid input never has, are cut where they
    close), then rows ordered by the mean row of each node's upstream groups."""
    upstream: dict[str, list[str]] = defaultdict(list)
    downstream: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        upstream[b].append(a)
        downstream[a].append(b)
    pending = {name: len(upstream[name]) for name in nodes}
    ready = sorted(name for name, n in pending.items() if n == 0)
    order: list[str] = []
    while ready:
        name = ready.pop()
        order.append(name)
        for nxt in downstream[name]:
            nodes[nxt].layer = max(nodes[nxt].layer, nodes[name].layer + 1)
            pending[nxt] -= 1
            if pending[nxt] == 0:
                ready.append(nxt)
    placed = set(order)
    order += sorted(n for n in nodes if n not in placed)  # on a cycle: left in layer 0
    columns: dict[int, list[Node]] = defaultdict(list)
    for name in order:
        columns[nodes[name].layer].append(nodes[name])
    for layer in sorted(columns):
        column = columns[layer]
        for node in column:
            parents = [nodes[p].row for p in upstream[node.name] if nodes[p].layer < layer]
            node.row = sum(parents) / len(parents) if parents else 0.0
        column.sort(key=lambda n: (n.row, n.name))
        for i, node in enumerate(column):
            node.row = float(i)


def _fill(share: float) -> str:
    """Light to dark blue with a group's share of the largest compute time."""
    lightness = 92 - 52 * share
    return f"hsl(212, 70%, {lightness:.0f}%)"


def section(tasks: Iterable[TaskRun], analysis: Analysis) -> str:
    """The "Task-group graph" section (group names are user input: all escaped)."""
    nodes, edges = groups_of(tasks)
    if not nodes:
        return ""
    dropped = 0
    if len(nodes) > MAX_NODES:
        kept = sorted(nodes.values(), key=lambda n: -n.compute_ns)[:MAX_NODES]
        dropped = len(nodes) - MAX_NODES
        nodes = {n.name: n for n in kept}
        edges = {(a, b) for a, b in edges if a in nodes and b in nodes}
    layout(nodes, edges)
    on_path = {step.task.group or step.task.key for step in analysis.critical_path.steps}
    path_edges = {
        (a.task.group or a.task.key, b.task.group or b.task.key)
        for a, b in pairwise(analysis.critical_path.steps)
    }
    most = max(n.compute_ns for n in nodes.values()) or 1
    width = (max(n.layer for n in nodes.values()) + 1) * _COLUMN
    height = (max(n.row for n in nodes.values()) + 1) * _ROW + 10

    def anchor(node: Node, right: bool) -> tuple[float, float]:
        x = node.layer * _COLUMN + 10 + (_NODE_W if right else 0)
        return x, node.row * _ROW + 10 + _NODE_H / 2

    lines = []
    for a, b in sorted(edges):
        (x1, y1), (x2, y2) = anchor(nodes[a], True), anchor(nodes[b], False)
        cls = "edge critical" if (a, b) in path_edges else "edge"
        mid = (x1 + x2) / 2
        lines.append(
            f'<path class="{cls}" d="M{x1:.0f},{y1:.0f} C{mid:.0f},{y1:.0f} {mid:.0f},{y2:.0f}'
            f' {x2:.0f},{y2:.0f}"/>'
        )
    boxes = []
    for node in sorted(nodes.values(), key=lambda n: (n.layer, n.row)):
        x, y = node.layer * _COLUMN + 10, node.row * _ROW + 10
        classes = ["node"]
        if node.name in on_path:
            classes.append("critical")
        if node.erred:
            classes.append("erred")
        label = node.name if len(node.name) <= 24 else node.name[:23] + "…"
        title = f"{node.name}: {node.tasks:,} tasks, {node.compute_ns / 1e9:.3f} s compute"
        if node.erred:
            title += ", erred"
        boxes.append(
            f'<g id="{anchor_id("node", node.name)}" class="{" ".join(classes)}">'
            f"<title>{escape(title)}</title>"
            f'<rect x="{x}" y="{y:.0f}" width="{_NODE_W}" height="{_NODE_H}" rx="4"'
            f' fill="{_fill(node.compute_ns / most)}"/>'
            f'<text x="{x + 6}" y="{y + 15:.0f}">{escape(label)}</text></g>'
        )
    note = f" The {dropped:,} groups with the least compute time are left out." if dropped else ""
    return (
        '<section id="graph"><h2>Task-group graph</h2>'
        f'<p class="note">{len(nodes):,} task groups in columns by dependency depth; colour'
        " darkens with compute time, a red outline marks erred groups, the critical path"
        f" is orange.{note}"
        ' <button type="button" data-zoom="1.25">+</button>'
        '<button type="button" data-zoom="0.8">−</button></p>'
        '<div class="graph-view"><svg id="graph-svg"'
        f' width="{width}" height="{height:.0f}" viewBox="0 0 {width} {height:.0f}"'
        f' data-width="{width}" data-height="{height:.0f}" aria-label="task-group graph">'
        f"{''.join(lines)}{''.join(boxes)}</svg></div></section>"
    )
