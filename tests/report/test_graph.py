"""The task-group graph of the HTML report: layered, coloured, with the critical path and
erred groups marked, legible at 50 and 500 groups (drawn in headless Chromium)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from otel_spans.analysis.model import TaskRun, Workflow
from otel_spans.analysis.workflow import analyse
from otel_spans.report import graph
from otel_spans.report.html import render
from tests.support.browser import CHROMIUM, chromium_command, chromium_dump
from tests.support.html import parse
from tests.support.requirements import require_file

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def layered(groups: int, width: int) -> Workflow:
    """``groups`` task groups in layers of ``width``; each depends on two groups of the
    layer before; group ``g-1-0`` erred. Layer k runs from k s to k s + 0.8 s."""
    runs = []
    for i in range(groups):
        layer, slot = divmod(i, width)
        deps = (
            () if layer == 0 else (f"g-{layer - 1}-{slot}", f"g-{layer - 1}-{(slot + 1) % width}")
        )
        name = f"g-{layer}-{slot}"
        runs.append(
            TaskRun(
                key=name,
                prefix=f"p{slot}",
                group=name,
                worker="",
                thread=None,
                start_ns=T0 + layer * 1000 * MS,
                end_ns=T0 + layer * 1000 * MS + (800 - slot) * MS,
                dependencies=deps,
                state="erred" if name == "g-1-0" else "memory",
                count=10,
            )
        )
    layers = -(-groups // width)
    return Workflow("graph", T0, T0 + layers * 1000 * MS, tuple(runs))


def test_layers_follow_the_dependencies_and_marks_are_where_the_design_puts_them() -> None:
    """Layers, critical and erred marks on the ids the design of ``layered(50, 5)`` fixes.

    Slot 0 runs longest in every layer (800 ms against ``800 - slot``), and ``g-k-0``
    depends on ``g-(k-1)-0`` and ``g-(k-1)-1``, of which ``g-(k-1)-0`` ends last: the
    critical path is ``g-0-0 … g-9-0``. Counting marks would pass a graph that marked
    ten wrong groups (the path's keys matched against the wrong names, a predecessor
    taken as the input that ended first: ``g-8-1`` …) or outlined the erred group's
    downstream instead of ``g-1-0``; naming them does not.
    """
    workflow = layered(50, 5)
    nodes, edges = graph.groups_of(workflow.tasks)
    graph.layout(nodes, edges)
    assert {name: node.layer for name, node in nodes.items()} == {
        f"g-{layer}-{slot}": layer for layer in range(10) for slot in range(5)
    }
    assert len(edges) == 2 * 45
    page = parse(render(workflow, analyse(workflow), granularity="task groups"))
    svg = page.one("svg", id="graph-svg")
    classes = {
        g.one("title").text().split(":")[0]: set((g.attrs.get("class") or "").split())
        for g in svg.all("g")
        if "node" in (g.attrs.get("class") or "")
    }
    assert len(classes) == 50
    critical = {name for name, c in classes.items() if "critical" in c}
    assert critical == {f"g-{layer}-0" for layer in range(10)}
    assert {name for name, c in classes.items() if "erred" in c} == {"g-1-0"}


@pytest.mark.parametrize(("groups", "width"), [(50, 5), (500, 20)])
def test_chromium_draws_the_graph(tmp_path: Path, groups: int, width: int) -> None:
    require_file(CHROMIUM, "Debian's chromium opens the report headless")
    workflow = layered(groups, width)
    page = tmp_path / f"graph-{groups}.html"
    page.write_text(render(workflow, analyse(workflow), granularity="task groups"))
    dom, _log = chromium_dump(page, tmp_path)
    body = parse(dom).one("body")
    assert body.attrs.get("data-ready") == "1" and "data-js-error" not in body.attrs
    nodes = [
        g
        for g in body.one("svg", id="graph-svg").all("g")
        if "node" in (g.attrs.get("class") or "")
    ]
    assert len(nodes) == groups
    shot = tmp_path / f"graph-{groups}.png"
    subprocess.run(
        chromium_command(tmp_path, f"--screenshot={shot}", page.as_uri()),
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 10_000
