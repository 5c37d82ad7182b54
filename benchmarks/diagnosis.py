"""Cost of the diagnosis per finished workflow, on the scheduler: pure, no cluster.

What the scheduler adds at a root's export for the diagnosis is
:func:`otel_spans.scheduler.root_analysis.root_evidence` (one pass over the root's task
groups and Dask spans) plus :func:`otel_spans.analysis.diagnosis.diagnose` (the rules)
and the findings' span events. This benchmark runs exactly those functions over
stand-ins for Dask's ``Span`` and ``TaskGroup`` that carry what they read (names,
durations by action, counts, the worker metrics a span holds: Dask's own key shapes),
shaped like real workflows: G task groups in G / 5 nested Dask spans, each group
depending on the one before, a group-level critical path through all of them (the
worst case: the path's steps are walked by three rules), and every rule with evidence
to weigh (erred and recomputed runs, a straggler, transfers, disk and off-CPU time, a
worker's pause, the client's time between stages; of the two rules on efficiency, the
one that applies to it).

Usage::

    python -m benchmarks.diagnosis            # µs per workflow by number of groups
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from otel_spans.analysis.critical_path import CriticalPath, critical_path
from otel_spans.analysis.diagnosis import diagnose
from otel_spans.analysis.evidence import Evidence
from otel_spans.analysis.model import TaskRun, Workflow
from otel_spans.scheduler.memory import SpanMemory
from otel_spans.scheduler.root_analysis import diagnosis_events, root_evidence
from otel_spans.scheduler.task_groups import Tally

T0 = 1_700_000_000.0
#: Every Dask span's memory ledger: a worker paused once while it ran.
PAUSED = SpanMemory(pauses=1, pause_seconds=0.5)


@dataclass(eq=False)
class _Prefix:
    name: str


@dataclass(eq=False)
class _Group:
    """What root_evidence reads of a ``distributed.scheduler.TaskGroup``."""

    name: str
    prefix: _Prefix
    n: int
    all_durations: dict[str, float]
    start: float
    stop: float
    span_id: str
    states: dict[str, int] = field(default_factory=dict)
    dependencies: set[_Group] = field(default_factory=set)

    def __len__(self) -> int:
        return self.n


@dataclass(eq=False)
class _Span:
    """What root_evidence reads of a ``distributed.spans.Span``."""

    name: tuple[str, ...]
    groups: list[_Group]
    children: list[_Span]
    _cumulative_worker_metrics: dict[tuple[Any, ...], float]

    @property
    def id(self) -> str:
        return "/".join(self.name)

    def traverse_spans(self) -> list[_Span]:
        out, todo = [], [self]
        while todo:
            span = todo.pop()
            out.append(span)
            todo.extend(span.children)
        return out

    def traverse_groups(self) -> list[_Group]:
        return [g for s in self.traverse_spans() for g in s.groups]


def workflow(groups: int) -> tuple[_Span, Workflow, dict[_Group, Tally]]:
    """A root of ``groups`` task groups, 5 per Dask span, in a chain, with evidence
    for every rule."""
    spans: list[_Span] = []
    tallies: dict[_Group, Tally] = {}
    runs: list[TaskRun] = []
    t = T0
    for i in range(groups):
        if i % 5 == 0:
            metrics: dict[tuple[Any, ...], float] = defaultdict(float)
            for activity, seconds in (
                ("thread-cpu", 2.0),
                ("thread-noncpu", 1.0),
                ("disk-write", 0.2),
                ("disk-read", 0.1),
            ):
                metrics["execute", f"p{i}", activity, "seconds"] = seconds
            spans.append(_Span(("root", f"stage-{i // 5}"), [], [], metrics))
        name = f"p{i}-{i:032x}"
        group = _Group(
            name,
            _Prefix(f"p{i}"),
            100,
            {"compute": 10.0, "transfer": 0.5, "disk-read": 0.1},
            t,
            t + 1.0,
            spans[-1].id,
            dependencies={spans[-1].groups[-1]} if spans[-1].groups else set(),
        )
        spans[-1].groups.append(group)
        tallies[group] = Tally(101 if i % 7 == 0 else 100, 1 if i % 11 == 0 else 0, 0.6, "k")
        runs.append(
            TaskRun(
                name,
                f"p{i}",
                name,
                "",
                None,
                int(t * 1e9),
                int((t + 1.0) * 1e9),
                dependencies=(runs[-1].key,) if runs else (),
                # submitted 50 ms after the group before it ended: client time
                submitted_ns=int((t - 0.05) * 1e9) if runs else None,
            )
        )
        t += 1.1
    root = _Span(("root",), [], spans, {})
    wf = Workflow("root", int(T0 * 1e9), int(t * 1e9), tuple(runs))
    return root, wf, tallies


def evidence_of(
    root: _Span, wf: Workflow, path: CriticalPath, tallies: dict[_Group, Tally]
) -> Evidence:
    """The diagnosis's evidence of the stand-in root, as a root's export gathers it."""
    tree = {k: v for s in root.traverse_spans() for k, v in s._cumulative_worker_metrics.items()}
    return root_evidence(
        root,  # type: ignore[arg-type]
        wf,
        path,
        tree,
        tallies.get,  # type: ignore[arg-type]
        efficiency=0.7,
        peak_threads=8,
        worker_threads=4,
        memory_of=lambda uuid: PAUSED,
    )


def once(root: _Span, wf: Workflow, tallies: dict[_Group, Tally]) -> float:
    """Seconds for the diagnosis's share of one root export (the critical path is
    computed by the root analysis anyway: not counted)."""
    path = critical_path(wf)
    started = time.perf_counter()
    findings = diagnose(evidence_of(root, wf, path, tallies))
    diagnosis_events(findings, wf.end_ns)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--groups", default="10,100,1000,5000")
    args = parser.parse_args()
    print("| task groups | Dask spans | µs per workflow, median [min–max] | µs per group |")
    print("|---|---|---|---|")
    for n in (int(g) for g in args.groups.split(",")):
        root, wf, tallies = workflow(n)
        times = sorted(once(root, wf, tallies) * 1e6 for _ in range(args.rounds))
        median = statistics.median(times)
        print(
            f"| {n:,} | {n // 5:,} | {median:,.0f} [{times[0]:,.0f}–{times[-1]:,.0f}]"
            f" | {median / n:.1f} |"
        )


if __name__ == "__main__":
    main()
