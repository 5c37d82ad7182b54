"""The self-aggregated histogram, on the task duration: the SDK's data shape, both
temporalities, and the series the scheduler's per-task path records into (the
histograms of a Dask span's export: tests/unit/test_span_histograms.py)."""

from __future__ import annotations

import time
from pathlib import Path

import dask.config
import pytest
from distributed import Client, Scheduler, span
from opentelemetry.sdk.metrics.export import AggregationTemporality

from otel_spans import OtelSpansPlugin
from otel_spans.telemetry.histogram import OwnHistogram
from otel_spans.telemetry.metrics import TASK_DURATION
from tests.support.cluster import await_until, cluster_test
from tests.support.metrics_data import sdk_batch

ATTRS = (("dask.span.name", "wf"), ("dask.task.prefix", "inc"))


def points(data: object) -> list:
    return [
        p
        for rm in data.resource_metrics  # type: ignore[attr-defined]
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "dask.task.duration"
        for p in m.data.data_points
    ]


def test_cumulative_buckets_match_an_sdk_histogram_and_carry_exemplars() -> None:
    h = OwnHistogram(TASK_DURATION)
    for value in (0.0005, 0.002, 0.002, 0.7, 400.0):
        h.record(ATTRS, value)
    h.record(ATTRS, 0.03, trace_id=7, span_id=9)
    (point,) = points(h.inject(sdk_batch("otel_spans")))
    assert point.count == 6
    assert point.sum == 0.0005 + 0.002 * 2 + 0.7 + 400 + 0.03
    assert point.min == 0.0005 and point.max == 400.0
    assert list(point.explicit_bounds) == list(TASK_DURATION.bounds)
    expected = [0] * (len(TASK_DURATION.bounds) + 1)
    expected[0], expected[1], expected[3], expected[7], expected[-1] = 1, 2, 1, 1, 1
    assert list(point.bucket_counts) == expected
    (exemplar,) = point.exemplars
    assert (exemplar.trace_id, exemplar.span_id, exemplar.value) == (7, 9, 0.03)
    assert dict(point.attributes) == dict(ATTRS)


def test_delta_reports_only_what_is_new_per_reader() -> None:
    h = OwnHistogram(TASK_DURATION)
    delta = AggregationTemporality.DELTA
    h.record(ATTRS, 0.2)
    (first,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=1))
    assert first.count == 1
    assert points(h.inject(sdk_batch("otel_spans"), delta, reader=1)) == []
    h.record(ATTRS, 0.3)
    (second,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=1))
    assert second.count == 1 and second.sum == 0.3
    assert second.start_time_unix_nano >= first.time_unix_nano
    (cumulative,) = points(h.inject(sdk_batch("otel_spans"), reader=2))
    assert cumulative.count == 2


def test_a_delta_point_carries_its_own_intervals_min_and_max() -> None:
    """Not the all-time extremes: a quiet interval after a slow task says so."""
    h = OwnHistogram(TASK_DURATION)
    delta = AggregationTemporality.DELTA
    h.record(ATTRS, 0.2)
    h.record(ATTRS, 5.0)
    (first,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=1))
    assert (first.min, first.max) == (0.2, 5.0)
    h.record(ATTRS, 0.3)
    h.record(ATTRS, 0.4)
    (second,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=1))
    assert (second.count, second.min, second.max) == (2, 0.3, 0.4)
    # another delta reader's first point covers everything so far; cumulative stays
    # all-time; neither disturbs the first reader's interval
    (other,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=2))
    assert (other.count, other.min, other.max) == (4, 0.2, 5.0)
    (total,) = points(h.inject(sdk_batch("otel_spans")))
    assert (total.min, total.max) == (0.2, 5.0)
    h.record(ATTRS, 1.0)
    (third,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=1))
    assert (third.count, third.min, third.max) == (1, 1.0, 1.0)
    (other_second,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=2))
    assert (other_second.min, other_second.max) == (1.0, 1.0)


def test_a_series_new_since_a_delta_readers_first_collection_has_its_own_extremes() -> None:
    h = OwnHistogram(TASK_DURATION)
    delta = AggregationTemporality.DELTA
    h.record(ATTRS, 0.2)
    points(h.inject(sdk_batch("otel_spans"), delta, reader=1))
    other = (("dask.span.name", "wf"), ("dask.task.prefix", "sum"))
    h.record(other, 7.0)
    h.record(other, 3.0)
    (point,) = points(h.inject(sdk_batch("otel_spans"), delta, reader=1))
    assert dict(point.attributes) == dict(other)
    assert (point.min, point.max) == (3.0, 7.0)


def _finished(now: float) -> dict[str, object]:
    """A worker's task-finished message: 10 ms of compute."""
    phase = {"action": "compute", "start": now - 0.02, "stop": now - 0.01}
    return {"worker": "tcp://127.0.0.1:1", "nbytes": 8, "startstops": (phase,)}


def _counts(plugin: OtelSpansPlugin) -> dict[tuple[str, str], int]:
    """(Dask span name, prefix) -> tasks counted in the copy's duration histogram."""
    assert plugin.signals is not None
    return {
        (p.attributes["dask.span.name"], p.attributes["dask.task.prefix"]): p.count
        for p in points(plugin.signals.task_durations.inject(sdk_batch("otel_spans")))
    }


@cluster_test(60)
async def test_each_span_and_prefix_counts_its_tasks_in_the_running_copys_histogram(
    tmp_path: Path,
) -> None:
    """The per-task path keeps each span's series per prefix (the labels are resolved
    once). Catches: a series kept per span and not per prefix (x and y counted
    together), or kept across a takeover (the new copy's histogram stays empty while
    the closed copy's grows)."""
    config = {
        "otel-spans.traces.exporter": "file",
        "otel-spans.metrics.exporter": "none",
        "otel-spans.logs.exporter": "none",
        "otel-spans.directory": str(tmp_path),
        "otel-spans.traces.poll-interval": "1h",
        "otel-spans.metrics.interval": "1h",
    }
    with dask.config.set(config):
        async with (
            Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            await client.register_plugin(OtelSpansPlugin())
            first = scheduler.plugins[OtelSpansPlugin.name]
            designed = {("wf/a", "x"): 3, ("wf/a", "y"): 2, ("wf/b", "x"): 4}
            keys: dict[tuple[str, str], list[tuple[str, int]]] = {}
            futures = []
            with span("wf"):
                for (name, prefix), n in designed.items():
                    with span(name.split("/")[1]):
                        batch = [(f"{prefix}-{name}", i) for i in range(n)]
                        keys[name, prefix] = batch
                        futures += client.map(abs, range(n), key=batch)
            every = [key for batch in keys.values() for key in batch]
            await await_until(lambda: all(k in scheduler.tasks for k in every))
            now = time.time()

            def finish(plugin: OtelSpansPlugin, batch: list[tuple[str, int]]) -> None:
                for key in batch:
                    plugin.transition(key, "processing", "memory", **_finished(now))

            for batch in keys.values():
                finish(first, batch)
            assert _counts(first) == designed

            with pytest.warns(UserWarning, match="overwriting"):
                await client.register_plugin(OtelSpansPlugin())
            second = scheduler.plugins[OtelSpansPlugin.name]
            assert second is not first
            finish(second, keys["wf/a", "x"])
            assert _counts(second) == {("wf/a", "x"): 3}
            await client.cancel(futures)
