"""The embedded default on a real scheduler: an idle scheduler writes almost nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distributed import span

from tests.support.cluster import FAST_METRICS, await_until, cluster_test, traced_cluster

#: What grows while the cluster idles: the thread-seconds its workers offer, all idle.
#: Every other series stays as the workflow left it once its values are final.
GROWING_WHEN_IDLE = {"dask.cluster.cpu.available", "dask.cluster.cpu.idle"}
MAX_BYTES = 1024 * 1024
_KINDS = ("sum", "gauge", "histogram", "exponentialHistogram")


def metric_lines(directory: Path) -> list[dict[str, list[str]]]:
    """Each metrics line of the scheduler, as {metric name: [point attributes...]}."""
    out = []
    for file in sorted(directory.glob("metrics-scheduler-*.jsonl")):
        for line in file.read_text().splitlines():
            names: dict[str, list[str]] = {}
            for rm in json.loads(line)["resourceMetrics"]:
                for sm in rm["scopeMetrics"]:
                    for m in sm["metrics"]:
                        kind = next(k for k in _KINDS if k in m)
                        points: list[dict[str, Any]] = m[kind].get("dataPoints", [])
                        names.setdefault(m["name"], []).extend(
                            json.dumps(p.get("attributes", [])) for p in points
                        )
            out.append(names)
    return out


@cluster_test(90)
async def test_an_idle_scheduler_writes_only_the_series_that_grow(tmp_path: Path) -> None:
    config = {
        "otel-spans.directory": str(tmp_path),
        "otel-spans.directory-max-bytes": MAX_BYTES,
        "otel-spans.directory-max-file-bytes": "256KiB",
        **FAST_METRICS,
    }
    async with traced_cluster(config) as c:
        with span("then idle"):
            assert await c.client.submit(sum, [4, 5]) == 9

        def idle_lines() -> list[dict[str, list[str]]] | None:
            assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= MAX_BYTES
            lines = metric_lines(tmp_path)
            # once the workflow's values are final: five collections in a row that
            # changed only what grows with time
            tail = lines[-5:]
            idle = len(tail) == 5 and all(set(n) == GROWING_WHEN_IDLE for n in tail)
            return tail if idle else None

        tail = await await_until(
            idle_lines, 30, lambda: f"still writing: {metric_lines(tmp_path)[-1]}"
        )
        stats = await c.client.scheduler.otel_spans_stats()
    # the workflow's series were written; an idle line has one point per growing series
    assert any("dask.span.tasks" in n for n in metric_lines(tmp_path))
    assert all(len(points) == 1 for n in tail for points in n.values())
    files = stats["files"]
    assert (files["max_bytes"], files["max_file_bytes"]) == (MAX_BYTES, 256 * 1024)
    assert files["metrics"]["failed_lines"] == 0
    assert stats["traces"]["deleted"] == 0 and stats["logs"]["deleted"] == 0
