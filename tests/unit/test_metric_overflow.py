"""No silent metric loss: the OTel SDK's per-instrument cardinality limit is ours
(``metrics.max-series``), and every series it folds into its overflow point is counted in
``otel_spans.cardinality.overflow``, beside the values our own budget replaced."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import dask.config
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.records import CounterDelta
from otel_spans.telemetry.metric_state import MetricsState
from otel_spans.telemetry.metrics import Instruments
from otel_spans.telemetry.signals import series_limit_views

SPANS, PREFIXES, ACTIVITIES = 25, 16, 10  # 4,000 series of one instrument
LIMIT = 2000
SDK_OVERFLOW = "otel.metric.overflow"


@pytest.fixture
def metrics() -> Iterator[tuple[MetricsState, InMemoryMetricReader]]:
    with dask.config.set({"otel-spans": {}}):
        settings = Settings.from_config(
            {"metrics": {"max-series": LIMIT, "max-span-names": 1000, "max-prefixes": 1000}},
            environ={},
        )
    views, limit = series_limit_views(settings.metrics.max_series)
    assert limit == LIMIT  # the SDK here takes the limit from a View
    state = MetricsState(settings.metrics, limit)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], views=views)
    Instruments(provider.get_meter("test"), state, dict)
    yield state, reader
    provider.shutdown()


def points(reader: InMemoryMetricReader) -> dict[str, list[NumberDataPoint]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def test_every_series_the_sdk_folds_is_counted(
    metrics: tuple[MetricsState, InMemoryMetricReader], caplog: pytest.LogCaptureFixture
) -> None:
    state, reader = metrics
    combinations = list(itertools.product(range(SPANS), range(PREFIXES), range(ACTIVITIES)))
    assert len(combinations) == 4000
    # value i + 1 for the i-th series: every series distinct, the total known
    state.add(
        CounterDelta(
            semconv.M_EXECUTE_TIME,
            (f"workflow-{s}",),
            ((semconv.DASK_TASK_PREFIX, f"prefix-{p}"), (semconv.ATTR_ACTIVITY, f"act-{a}")),
            float(i + 1),
        )
        for i, (s, p, a) in enumerate(combinations)
    )
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        first = points(reader)
        second = points(reader)  # the same series again: counted once, not per collection
    execute = first[semconv.M_EXECUTE_TIME]
    folded = [p for p in execute if p.attributes.get(SDK_OVERFLOW)]
    kept = [p for p in execute if not p.attributes.get(SDK_OVERFLOW)]
    assert len(kept) == LIMIT and len(folded) == 1
    # nothing vanished: the overflow point holds the values of the folded series
    total = sum(range(1, len(combinations) + 1))
    assert sum(p.value for p in execute) == pytest.approx(total)

    for exported in (first, second):
        counted = {
            p.attributes[semconv.ATTR_LIMITED]: p.value for p in exported[semconv.M_OVERFLOW]
        }
        assert counted[semconv.LIMITED_SERIES] == len(combinations) - LIMIT
        # our own budget replaced nothing: 25 names and 16 prefixes are within it
        assert counted[semconv.DASK_SPAN_NAME] == counted[semconv.DASK_TASK_PREFIX] == 0
    (warning,) = [r for r in caplog.records if "max-series" in r.getMessage()]
    assert semconv.M_EXECUTE_TIME in warning.getMessage()


def test_nothing_is_counted_within_the_limit(
    metrics: tuple[MetricsState, InMemoryMetricReader],
) -> None:
    state, reader = metrics
    state.add(
        CounterDelta(
            semconv.M_EXECUTE_TIME,
            (f"workflow-{s}",),
            ((semconv.DASK_TASK_PREFIX, "p"), (semconv.ATTR_ACTIVITY, "a")),
            1.0,
        )
        for s in range(LIMIT)
    )
    exported = points(reader)
    assert not any(p.attributes.get(SDK_OVERFLOW) for p in exported[semconv.M_EXECUTE_TIME])
    counted = {p.attributes[semconv.ATTR_LIMITED]: p.value for p in exported[semconv.M_OVERFLOW]}
    assert counted[semconv.LIMITED_SERIES] == 0


def test_our_budget_and_the_sdk_limit_are_counted_apart(
    metrics: tuple[MetricsState, InMemoryMetricReader],
) -> None:
    """Past ``max-span-names`` the name becomes ``(overflow)`` (ours, counted once per
    distinct value replaced); the series that remain are what the SDK's limit applies
    to. Catches: counting replacements (one per delta, and twice per delta because a
    root span's name fills both ``dask.span.name`` and ``dask.span.root``): 80 here,
    then 320 after three more deltas for the same names."""
    state, reader = metrics
    state.span_names.limit = 10  # a tighter name budget for this test
    state.prefixes.limit = 1  # and prefixes: 1 admitted, 2 replaced
    for delta in range(4):
        state.add(
            CounterDelta(
                semconv.M_SPAN_TASKS,
                (f"workflow-{s}",),
                ((semconv.DASK_TASK_PREFIX, f"p{s % 3}"), (semconv.DASK_TASK_STATE, "memory")),
                1.0,
            )
            for s in range(50)
        )
        exported = points(reader)
        names = {p.attributes[semconv.DASK_SPAN_NAME] for p in exported[semconv.M_SPAN_TASKS]}
        assert semconv.OVERFLOW_VALUE in names and len(names) == 11
        # nothing lost
        assert sum(p.value for p in exported[semconv.M_SPAN_TASKS]) == 50 * (delta + 1)
        counted = {
            p.attributes[semconv.ATTR_LIMITED]: p.value for p in exported[semconv.M_OVERFLOW]
        }
        assert counted[semconv.DASK_SPAN_NAME] == 40, delta
        assert counted[semconv.DASK_TASK_PREFIX] == 2, delta
        assert counted[semconv.LIMITED_SERIES] == 0
