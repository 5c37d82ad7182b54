"""Runs found where they are: every directory below a path that holds traces files.

``./run demo`` writes each run into a directory of its own (``demo-<time>/``), a
nightly job may write into one per night, and a long-lived scheduler writes every
run into the same one. A *run* is what one of those wrote: the workflows (root Dask
spans) of one directory, or, when a directory holds the same workflow more than once,
each repetition of it: a new run starts where a workflow's name comes again (in start
order), so a directory written by one scheduler over three nights holds three runs.
Dask's ``default`` span (the work submitted outside any span) never starts a run: Dask
closes and reopens it whenever its tasks are all done, so one run may hold many.

Finding runs reads only Dask spans and task group spans (what an outline and the
history need), never the task spans that make up most of a trace: a directory of a
hundred runs is searched in the memory of its largest run's outline.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from otel_spans.report.build import BuiltWorkflow, build_workflows
from otel_spans.report.load import is_dask_or_group_span, load_spans, trace_sources

#: The root Dask names the work submitted outside any span (distributed.spans).
DASK_DEFAULT_SPAN = "default"


@dataclass(frozen=True)
class Run:
    """The workflows one run wrote, earliest first (never empty)."""

    #: Where it was read from: a directory of OTLP/JSON files, or one file.
    source: Path
    workflows: tuple[BuiltWorkflow, ...]
    #: Its place among the runs of the same source (1-based), and how many it holds.
    index: int = 1
    of: int = 1

    @property
    def start_ns(self) -> int:
        return min(b.workflow.start_ns for b in self.workflows)

    @property
    def end_ns(self) -> int:
        return max(b.workflow.end_ns for b in self.workflows)

    @property
    def trace_ids(self) -> frozenset[str]:
        return frozenset(b.trace_id for b in self.workflows)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.workflow.name for b in self.workflows))

    @property
    def label(self) -> str:
        """The source, and which of its runs when it holds several."""
        return str(self.source) if self.of == 1 else f"{self.source} (run {self.index}/{self.of})"


def split(source: Path, workflows: Iterable[BuiltWorkflow]) -> list[Run]:
    """The runs among the workflows read from one source (see the module docstring)."""
    groups: list[list[BuiltWorkflow]] = []
    seen: set[str] = set()
    for built in sorted(workflows, key=lambda b: b.workflow.start_ns):
        name = built.workflow.name
        if not groups or (name in seen and name != DASK_DEFAULT_SPAN):
            groups.append([])
            seen = set()
        groups[-1].append(built)
        seen.add(name)
    return [Run(source, tuple(g), n, len(groups)) for n, g in enumerate(groups, 1)]


def find_runs(path: Path) -> list[Run]:
    """Every run at or below ``path``, earliest first; :class:`InputError` for a path
    that does not exist or a file that is not OTLP/JSON."""
    runs: list[Run] = []
    for source in trace_sources(path):
        runs.extend(split(source, build_workflows(load_spans(source, is_dask_or_group_span))))
    runs.sort(key=lambda r: (r.start_ns, r.label))
    return runs


def when(ns: int) -> str:
    """An epoch-nanosecond instant as UTC date and time, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ns / 1e9))


def describe(runs: Sequence[Run], limit: int = 20) -> list[str]:
    """One line per run: when it started, where it is, its workflows (the latest
    ``limit`` runs; a line says how many more)."""
    lines = []
    if len(runs) > limit:
        lines.append(f"    … {len(runs) - limit} earlier runs")
    for run in runs[-limit:]:
        names = ", ".join(repr(n) for n in run.names)
        lines.append(f"    {when(run.start_ns)}  {run.label}  {names}")
    return lines
