"""otel-spans' own metrics say exactly what ``otel_spans_stats()`` says (docs/telemetry.md,
"otel-spans' own metrics"): each ``otel_spans.records`` point is one pipeline counter,
``otel_spans.internal_errors`` and ``otel_spans.hooks.disabled`` are the counters of
the same names; and the one outcome counted before a record exists, ``suppressed``,
counts exactly the records over the rate."""

from __future__ import annotations

import logging
import types
from collections.abc import Iterator
from typing import Any

import dask.config
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.export.pipeline import ExportPipeline
from otel_spans.settings import PythonLogSettings
from otel_spans.telemetry import python_logs
from otel_spans.telemetry.metric_state import MetricsState
from otel_spans.telemetry.metrics import OUTCOMES, PIPELINES, Instruments

#: Every documented outcome, in the docs' words (a missing one is a counter not exported).
DOCUMENTED_OUTCOMES = {
    "submitted",
    "exported",
    "dropped",
    "failed",
    "rejected",
    "too_large",
    "unsent",
    "suppressed",
    "deleted",
}


def designed_stats() -> dict[str, Any]:
    """A distinct number per (signal, outcome): 100 × signal + outcome index + 1, plus
    the keys that are not outcomes (``lost``, ``queued``...), which must not leak in."""
    stats: dict[str, Any] = {"internal_errors": 7, "hooks_disabled": 1}
    for s, signal in enumerate(PIPELINES):
        counters: dict[str, Any] = {o: 100 * s + i + 1 for i, o in enumerate(OUTCOMES)}
        counters.update(signal=signal, lost=999, queued=998, sending=997, crashes=996)
        stats[signal] = counters
    return stats


@pytest.fixture
def exported() -> Iterator[dict[str, list[tuple[dict[str, Any], float]]]]:
    with dask.config.set({"otel-spans": {}}):
        settings = Settings.from_config({}, environ={})
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    Instruments(provider.get_meter("test"), MetricsState(settings.metrics), designed_stats)
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(
                    (dict(p.attributes or {}), p.value)
                    for p in metric.data.data_points  # type: ignore[union-attr]
                )
    yield out
    provider.shutdown()


def test_records_are_the_pipeline_counters_one_point_each(
    exported: dict[str, list[tuple[dict[str, Any], float]]],
) -> None:
    """Catches: an outcome left out of the metric (``too_large``, ``deleted``); ``lost``
    or ``queued`` exported as an outcome (counted twice); one signal's counters under
    another's."""
    assert set(OUTCOMES) == DOCUMENTED_OUTCOMES
    got = {
        (attrs[semconv.ATTR_SIGNAL], attrs[semconv.ATTR_OUTCOME]): value
        for attrs, value in exported[semconv.M_RECORDS]
    }
    expected = {
        (signal, outcome): 100 * s + i + 1
        for s, signal in enumerate(PIPELINES)
        for i, outcome in enumerate(OUTCOMES)
    }
    assert got == expected
    assert len(exported[semconv.M_RECORDS]) == len(PIPELINES) * len(OUTCOMES)


def test_internal_errors_and_hooks_disabled_are_the_counters_of_the_same_name(
    exported: dict[str, list[tuple[dict[str, Any], float]]],
) -> None:
    assert exported[semconv.M_INTERNAL_ERRORS] == [({}, 7)]
    assert exported[semconv.M_HOOKS_DISABLED] == [({}, 1)]


def test_python_log_records_over_the_rate_are_suppressed_and_counted_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """25 records in one second and 4 in the next, at most 10 per second: 15
    suppressed, 29 submitted, 14 exported (``submitted`` = ``exported`` +
    ``suppressed``). Catches: a suppressed record left out of ``submitted``, a window
    that never resets, or one record too many let through per window."""
    clock = types.SimpleNamespace(monotonic=lambda: 100.5)
    monkeypatch.setattr(python_logs, "time", clock)
    sent: list[object] = []

    def send(batch: list[object]) -> bool:
        sent.extend(batch)
        return True

    pipeline: ExportPipeline[object] = ExportPipeline(
        "logs", send, lambda: None, queue_size=100, batch_size=1, batch_wait=1.0
    )
    settings = PythonLogSettings(loggers=("app",), level=logging.INFO, max_per_second=10)
    sink = python_logs.PythonLogs(
        settings, pipeline.producer(), lambda value: None, exception_messages=True
    )
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "hello", None, None)
    for _ in range(25):
        sink.handle(record)
    clock.monotonic = lambda: 101.0
    for _ in range(4):
        sink.handle(record)
    final = pipeline.close(5.0)
    assert (final.submitted, final.suppressed, final.exported, final.lost) == (29, 15, 14, 15)
    assert len(sent) == 14
