"""Designed histories: a series of runs of one workflow, written as the exporter would.

Each run is a directory of OTLP/JSON (``traces.jsonl``) holding workflow ``nightly``:
stages ``nightly/load`` (group ``read``), ``nightly/transform`` (``clean``, ``join``)
and ``nightly/publish`` (``write``), one after another. A group's compute time is its
:data:`BASE` seconds times a factor drawn from the known noise distribution (normal,
standard deviation :data:`NOISE` of the mean, clipped at ±3 of it), times any designed
slowdown; a stage's wall time is its groups' compute time over :data:`THREADS` threads
plus :data:`OVERHEAD_S`; its busy thread time (what cost is made of) is its groups'
compute time. Runs are a day apart, each its own trace.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Mapping
from pathlib import Path

from tests.support.golden_trace import _group, _request, _Trace

WORKFLOW = "nightly"
#: Each stage's task groups and their mean compute time in seconds (all tasks).
STAGES: dict[str, dict[str, float]] = {
    "load": {"read": 4.0},
    "transform": {"clean": 6.0, "join": 2.0},
    "publish": {"write": 1.0},
}
#: Tasks per group.
TASKS = 8
THREADS = 4
OVERHEAD_S = 0.05
#: Standard deviation of the noise, as a share of the mean.
NOISE = 0.10
DAY_MS = 86_400_000


def noise(rng: random.Random | None) -> float:
    """One draw of the designed noise: a factor around 1 (exactly 1 without ``rng``)."""
    if rng is None:
        return 1.0
    return 1 + max(-3 * NOISE, min(3 * NOISE, rng.gauss(0.0, NOISE)))


def write_history_run(
    directory: Path,
    day: int,
    rng: random.Random | None,
    *,
    slower: Mapping[str, float] | None = None,
    extra: Mapping[str, tuple[str, float]] | None = None,
    tasks: Mapping[str, int] | None = None,
    workflow: str = WORKFLOW,
) -> Path:
    """Run ``day`` of the series into ``directory``: every group's compute time drawn
    from the noise (its mean without ``rng``), times ``slower[group]``; ``extra`` adds
    groups (name: (stage, seconds)), ``tasks`` changes a group's task count; the
    root is named ``workflow``."""
    stages = {stage: dict(groups) for stage, groups in STAGES.items()}
    for name, (stage, seconds) in (extra or {}).items():
        stages[stage][name] = seconds
    trace = _Trace(f"{day + 1:08x}{zlib.crc32(workflow.encode()):08x}" + "0" * 16)
    start = day * DAY_MS
    compute = {
        group: seconds * noise(rng) * (slower or {}).get(group, 1.0)
        for groups in stages.values()
        for group, seconds in groups.items()
    }
    walls = {
        stage: sum(compute[g] for g in groups) / THREADS + OVERHEAD_S
        for stage, groups in stages.items()
    }
    end = start + 1000 * sum(walls.values())
    root = trace.span(
        workflow,
        "",
        start,
        end,
        {
            "dask.span.id": f"{workflow}-{day}",
            "dask.span.tags": [workflow],
            "dask.span.name": workflow,
            "dask.span.task_states.memory": TASKS * len(compute),
        },
    )
    at = start
    for stage, groups in stages.items():
        wall_ms = 1000 * walls[stage]
        own = sum(compute[g] for g in groups)
        span = trace.span(
            stage,
            root,
            at,
            at + wall_ms,
            {
                "dask.span.id": f"{workflow}/{stage}-{day}",
                "dask.span.tags": [workflow, stage],
                "dask.span.name": f"{workflow}/{stage}",
                "dask.span.run.time.thread_cpu": own,
            },
        )
        for group in groups:
            _group(
                trace,
                span,
                f"{group}-{day:04x}",
                at,
                at + wall_ms,
                tasks=(tasks or {}).get(group, TASKS),
                compute_s=compute[group],
            )
        at += wall_ms
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "traces.jsonl").write_text(
        json.dumps(_request(trace.spans)) + "\n", encoding="utf-8"
    )
    return directory


def write_history(root: Path, runs: int, seed: int) -> random.Random:
    """``runs`` undisturbed runs, days 0 to ``runs - 1``, into ``root/run-NN``; returns
    the generator, to draw the next run from the same noise."""
    rng = random.Random(seed)
    for day in range(runs):
        write_history_run(root / f"run-{day:02d}", day, rng)
    return rng
