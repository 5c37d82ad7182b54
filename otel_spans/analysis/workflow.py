"""Every analysis of a :class:`Workflow` at once: why it took as long as it did.

``analyse(workflow)`` runs the critical path (:mod:`.critical_path`), bottlenecks and
stragglers (:mod:`.bottlenecks`), efficiency and activities (:mod:`.efficiency`) and
gathers them in one :class:`Analysis`, the value every report renderer reads. Each piece
can be called alone from its module. All are pure functions of the plain model (no Dask,
no OTel), for the scheduler and the offline report alike; inputs are integer
nanoseconds, results float seconds computed from integer sums, so that a result is the
exact ratio of the inputs rather than an accumulation of float rounding.

Every function is linear or ``O(n log n)`` in the number of tasks and iterative (no
recursion), so a million-task workflow is analysed in seconds; ``tests/unit/test_analysis.py``
measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_spans.analysis.bottlenecks import Bottleneck, Straggler, bottlenecks, stragglers
from otel_spans.analysis.critical_path import CriticalPath, critical_path
from otel_spans.analysis.efficiency import Activity, Efficiency, activities, efficiency
from otel_spans.analysis.model import Workflow


@dataclass(frozen=True, slots=True)
class Analysis:
    critical_path: CriticalPath
    #: Every prefix, by share of total compute time, largest first.
    bottlenecks: tuple[Bottleneck, ...]
    #: The prefixes on the critical path, by share of the path, largest first.
    critical_bottlenecks: tuple[Bottleneck, ...]
    #: Largest excess over the prefix median first: that is the time they cost.
    stragglers: tuple[Straggler, ...]
    efficiency: Efficiency
    activities: tuple[Activity, ...]


def analyse(
    workflow: Workflow, *, straggler_factor: float = 3.0, straggler_min_tasks: int = 3
) -> Analysis:
    """Run every analysis on ``workflow``.

    Parameters
    ----------
    workflow
        The workflow to analyse; may be empty.
    straggler_factor
        A task is a straggler when its compute time exceeds this multiple of its
        prefix's median.
    straggler_min_tasks
        Prefixes with fewer tasks have no meaningful median and yield no stragglers.
    """
    path = critical_path(workflow)
    ranked = bottlenecks(workflow, path)
    on_path = {share.name for share in path.prefixes}
    return Analysis(
        critical_path=path,
        bottlenecks=ranked,
        critical_bottlenecks=tuple(
            sorted(
                (b for b in ranked if b.prefix in on_path),
                key=lambda b: (-b.critical_seconds, b.prefix),
            )
        ),
        stragglers=stragglers(workflow, factor=straggler_factor, min_tasks=straggler_min_tasks),
        efficiency=efficiency(workflow),
        activities=activities(workflow.activity_seconds),
    )
