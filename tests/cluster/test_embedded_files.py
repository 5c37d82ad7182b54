"""The embedded default on a real scheduler: an idle scheduler writes almost nothing,
and a capped run accounts for every span."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from distributed import span

from otel_spans.report.load import InputError, load_spans
from otel_spans.scheduler.plugin import OtelSpansPlugin
from tests.support.cluster import FAST_METRICS, await_until, cluster_test, traced_cluster
from tests.support.tasks import inc

#: What grows while the cluster idles: the thread-seconds its workers offer, all idle.
#: Every other series stays as the workflow left it once its values are final.
GROWING_WHEN_IDLE = {"dask.cluster.cpu.available", "dask.cluster.cpu.idle"}
#: Worker memory gauges: an idle worker's process memory still moves a little, so they
#: are written when it did (and only then).
MOVING_WHEN_IDLE = {"dask.worker.memory", "dask.cluster.memory"}
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
            idle = len(tail) == 5 and all(
                GROWING_WHEN_IDLE <= set(n) <= GROWING_WHEN_IDLE | MOVING_WHEN_IDLE for n in tail
            )
            return tail if idle else None

        tail = await await_until(
            idle_lines, 30, lambda: f"still writing: {metric_lines(tmp_path)[-1]}"
        )
        stats = await c.client.scheduler.otel_spans_stats()
    # the workflow's series were written; an idle line has one point per growing series
    assert any("dask.span.tasks" in n for n in metric_lines(tmp_path))
    assert all(len(n[name]) == 1 for n in tail for name in GROWING_WHEN_IDLE)
    files = stats["files"]
    assert (files["max_bytes"], files["max_file_bytes"]) == (MAX_BYTES, 256 * 1024)
    assert files["metrics"]["failed_lines"] == 0
    assert stats["traces"]["deleted"] == 0 and stats["logs"]["deleted"] == 0


def span_names(directory: Path) -> set[str]:
    """Names of the spans written so far; a line being written is read next time."""
    try:
        return {s.name for s in load_spans(directory)}
    except InputError:
        return set()


@cluster_test(90)
async def test_a_capped_run_keeps_every_span_written_on_disk_or_counted_deleted(
    tmp_path: Path,
) -> None:
    """Twenty small workflows into 4 KiB trace files under a 16 KiB cap (metrics and
    logs elsewhere): the files rotate, the oldest go, and every span written is either
    still on disk or counted as deleted, exactly."""
    cap = 16 * 1024
    config = {
        "otel-spans.directory": str(tmp_path),
        "otel-spans.directory-max-bytes": cap,
        "otel-spans.directory-max-file-bytes": "4KiB",
        "otel-spans.metrics.exporter": "none",
        "otel-spans.logs.exporter": "none",
    }
    async with traced_cluster(config) as c:
        for i in range(20):
            name = f"wf-{i:02d}"
            with span(name):
                assert await c.client.submit(inc, i, key=f"inc-{i}") == i + 1
            # one workflow's spans at a time, so that lines are small and files many
            await await_until(lambda: name in span_names(tmp_path))  # noqa: B023
            assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= cap
        plugin = c.scheduler.plugins["otel-spans"]
        assert isinstance(plugin, OtelSpansPlugin)
    stats = plugin.stats()  # after close: everything flushed and counted
    traces = stats["files"]["traces"]
    assert traces["rotated"] >= 1 and traces["deleted_files"] >= 1  # the cap was reached
    assert (traces["deleted_unknown"], traces["failed_lines"]) == (0, 0)
    on_disk = len(list(load_spans(tmp_path)))
    assert traces["records"] == on_disk + traces["deleted_records"]
    assert stats["traces"]["deleted"] == traces["deleted_records"]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= cap
    assert stats["traces"]["lost"] == 0


@cluster_test(60)
async def test_an_unwritable_directory_leaves_dask_alone_and_counts_every_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The directory cannot be created (its parent is a file): Dask computes as ever,
    every trace record is counted as failed, and the log says so once per 30 s."""
    (tmp_path / "a-file").write_text("")
    directory = tmp_path / "a-file" / "data"
    caplog.set_level(logging.WARNING, logger="otel_spans")
    started = time.monotonic()
    async with traced_cluster({"otel-spans.directory": str(directory), **FAST_METRICS}) as c:
        with span("nowhere"):
            assert await c.client.submit(inc, 1) == 2
        plugin = c.scheduler.plugins["otel-spans"]
        assert isinstance(plugin, OtelSpansPlugin)
    windows = 1 + int((time.monotonic() - started) // 30)
    stats = plugin.stats()
    traces = stats["traces"]
    assert traces["submitted"] > 0
    assert (traces["exported"], traces["failed"]) == (0, traces["submitted"])
    files = stats["files"]
    assert files["traces"]["lines"] == 0 and files["traces"]["failed_records"] > 0
    assert files["metrics"]["lines"] == 0 and files["metrics"]["failed_lines"] > 0
    ours = [r for r in caplog.records if r.name == "otel_spans"]
    cannot = [r for r in ours if r.getMessage().startswith("otel-spans: cannot write")]
    assert 1 <= len(cannot) <= windows
    assert all(str(directory.resolve()) in r.getMessage() for r in cannot)
    assert not any(r.exc_info for r in ours)  # no traceback, from any of it
