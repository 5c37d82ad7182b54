"""Write a synthetic OTLP/JSON trace file of a workflow with N task spans (for report scale tests).

One root Dask span, task groups of 1000 tasks in a chain of layers (each task depends
on two tasks of the previous layer), every task with a compute phase: about 2 spans per
task. Times are made up but consistent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

T0 = 1_700_000_000_000_000_000


def _attr(key: str, value: object) -> dict[str, object]:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, list):
        return {
            "key": key,
            "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}},
        }
    return {"key": key, "value": {"intValue": str(value)}}


def _span(
    trace: str, span_id: int, parent: int, name: str, start: int, end: int, attrs: list[Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": f"{span_id:016x}",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attrs,
    }
    if parent:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def write(path: Path, tasks: int, per_group: int = 1000) -> int:
    """Write the file; returns the number of spans written."""
    trace = "ab" * 16
    layers = max(1, tasks // per_group)
    end = T0 + (layers + 1) * 1_000_000_000
    count = 0
    with path.open("w") as f:

        def emit(spans: list[dict[str, Any]]) -> None:
            nonlocal count
            count += len(spans)
            request = {
                "resourceSpans": [
                    {
                        "resource": {"attributes": [_attr("service.name", "dask")]},
                        "scopeSpans": [{"scope": {"name": "otel_spans"}, "spans": spans}],
                    }
                ]
            }
            f.write(json.dumps(request, separators=(",", ":")) + "\n")

        root = 1
        emit(
            [
                _span(
                    trace,
                    root,
                    0,
                    "synthetic",
                    T0,
                    end,
                    [
                        _attr("dask.span.id", "root-uuid"),
                        _attr("dask.span.tags", ["synthetic"]),
                        _attr("dask.span.name", "synthetic"),
                    ],
                )
            ]
        )
        next_id = 2
        for layer in range(layers):
            group_id = next_id
            next_id += 1
            start = T0 + layer * 1_000_000_000
            batch = [
                _span(
                    trace,
                    group_id,
                    root,
                    f"layer{layer}",
                    start,
                    start + 900_000_000,
                    [
                        _attr("dask.task_group.name", f"layer{layer}"),
                        _attr("dask.task_group.task_count", per_group),
                        _attr("dask.task_group.task_spans.dropped", 0),
                    ],
                )
            ]
            for i in range(per_group):
                task_id, phase_id = next_id, next_id + 1
                next_id += 2
                t_start = start + (i % 10) * 80_000_000
                t_end = t_start + 50_000_000 + (i % 7) * 1_000_000
                deps = [f"layer{layer - 1}-{(i + d) % per_group}" for d in (0, 1)] if layer else []
                batch.append(
                    _span(
                        trace,
                        task_id,
                        group_id,
                        f"layer{layer}",
                        t_start,
                        t_end,
                        [
                            _attr("dask.task.key", f"layer{layer}-{i}"),
                            _attr("dask.task.group", f"layer{layer}"),
                            _attr("dask.task.prefix", f"layer{layer}"),
                            _attr("dask.worker.address", f"tcp://w{i % 8}"),
                            _attr("dask.worker.thread", i % 4),
                            _attr("dask.task.dependencies", deps),
                        ],
                    )
                )
                batch.append(_span(trace, phase_id, task_id, "compute", t_start, t_end, []))
            emit(batch)
    return count


if __name__ == "__main__":
    n = write(Path(sys.argv[1]), int(sys.argv[2]))
    print(f"{n} spans written to {sys.argv[1]}")
