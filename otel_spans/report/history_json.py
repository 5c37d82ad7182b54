"""``otel-spans report --history --json``: every row's history and verdicts as one JSON
document, for CI jobs that act on a verdict (``rule`` says how verdicts were given)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

# robust.* and SECONDS_FLOOR, read when rendering: the rule the verdicts were given by
from otel_spans.report import history, robust
from otel_spans.report.history import WorkflowHistory


def _summary(values: list[float]) -> dict[str, Any] | None:
    summary = robust.summarise(values)
    return None if summary is None else asdict(summary)


def _workflow(h: WorkflowHistory) -> dict[str, Any]:
    out = asdict(h)
    out["regressed"] = [{"kind": r.kind, "name": r.name} for r in h.regressed]
    for row, data in zip(h.rows, out["rows"], strict=True):
        for metric in ("speed", "cost"):
            data[metric]["p"] = getattr(row, metric).p
        past = [n for n in row.past if n is not None]
        data["distributions"] = {
            field: _summary([float(getattr(n, field)) for n in past])
            for field in ("tasks", "nbytes", "erred", "transfer_s")
        }
    return out


def render(histories: Iterable[WorkflowHistory]) -> str:
    """Every workflow's history, rows and numbers as they are, indented."""
    return json.dumps(
        {
            "rule": {
                "centre": "median of the past runs",
                "spread": (
                    f"max({robust.MAD_TO_SIGMA} × MAD, {robust.RELATIVE_FLOOR} × median,"
                    f" {history.SECONDS_FLOOR} s)"
                ),
                "threshold": robust.THRESHOLD,
                "min_runs": robust.MIN_RUNS,
                "p": "(1 + past runs as far out) / (past runs + 1)",
            },
            "workflows": [_workflow(h) for h in histories],
        },
        indent=2,
    )
