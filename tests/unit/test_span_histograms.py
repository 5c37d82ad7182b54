"""The histograms of a Dask span's export (duration, memory peak, the workflow's
efficiency), aggregated by otel-spans on the event loop: the same points as the OTel
SDK's ``Histogram`` gave for the same values, exemplars only for exported spans, both
temporalities, and ``metrics.max-series`` folded and counted as the SDK folds it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import dask.config
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    MetricsData,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.records import HistogramSample
from otel_spans.telemetry import histogram
from otel_spans.telemetry.histogram import Histograms
from otel_spans.telemetry.metric_state import MetricsState
from otel_spans.telemetry.metrics import HISTOGRAMS, TASK_DURATION
from otel_spans.telemetry.signals import series_limit_views
from tests.support.metrics_data import sdk_batch

CUMULATIVE = AggregationTemporality.CUMULATIVE
DELTA = AggregationTemporality.DELTA
SPAN_HISTOGRAMS = [spec for spec in HISTOGRAMS if spec is not TASK_DURATION]
LIMIT = 3


def state_of(max_series: int = 5000) -> MetricsState:
    with dask.config.set({"otel-spans": {}}):
        settings = Settings.from_config({"metrics": {"max-series": max_series}}, environ={})
    return MetricsState(settings.metrics, settings.metrics.max_series)


def empty_batch() -> MetricsData:
    """A batch as the SDK collects it (another scope's counter), ours to add to."""
    return sdk_batch("another")


def metrics_of(data: MetricsData | None) -> dict[str, Metric]:
    assert data is not None
    return {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }


def plain(point: HistogramDataPoint) -> dict[str, Any]:
    """A point without its timestamps (which differ by construction)."""
    return {
        "attributes": dict(point.attributes),
        "count": point.count,
        "sum": round(point.sum, 6),  # the SDK adds up per collection: another rounding
        "min": point.min,
        "max": point.max,
        "bucket_counts": list(point.bucket_counts),
        "explicit_bounds": [float(b) for b in point.explicit_bounds],
        "exemplars": sorted(
            (e.value, e.trace_id, e.span_id, tuple(sorted((e.filtered_attributes or {}).items())))
            for e in point.exemplars
        ),
    }


def samples(metric: str, values: list[float], sampled: bool) -> list[HistogramSample]:
    return [
        HistogramSample(
            metric,
            (f"wf-{i % 2}", "load"),
            (("team", "a"),),
            value,
            *((7, 100 + i) if sampled else (0, 0)),
        )
        for i, value in enumerate(values)
    ]


class Sdk:
    """What otel-spans did before: the SDK's histograms, fed as ``Instruments.record`` fed
    them (exemplars only for sampled values, as the SDK's trace-based filter keeps them)."""

    def __init__(self, state: MetricsState, temporality: AggregationTemporality):
        views, _ = series_limit_views(state.series_limit)
        self.reader = InMemoryMetricReader(preferred_temporality={SdkHistogram: temporality})
        self.provider = MeterProvider(metric_readers=[self.reader], views=views)
        meter = self.provider.get_meter(semconv.SCOPE_NAME)
        self.instruments = {
            spec.name: meter.create_histogram(
                spec.name,
                unit=spec.unit,
                description=spec.description,
                explicit_bucket_boundaries_advisory=spec.bounds,
            )
            for spec in SPAN_HISTOGRAMS
        }
        self.state = state

    def record(self, batch: list[HistogramSample]) -> None:
        for s in batch:
            context = None
            if s.span_id:
                flags = TraceFlags(TraceFlags.SAMPLED)
                span = NonRecordingSpan(SpanContext(s.trace_id, s.span_id, True, flags))
                context = trace.set_span_in_context(span)
            attrs = dict(self.state.labels(s.tags, s.attributes))
            self.instruments[s.metric].record(s.value, attrs, context)

    def collect(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()  # None when a delta interval was quiet
        return metrics_of(data) if data is not None else {}


@pytest.fixture
def both() -> Iterator[tuple[Histograms, MetricsState, Sdk, MetricsState]]:
    ours_state, sdk_state = state_of(LIMIT), state_of(LIMIT)
    sdk = Sdk(sdk_state, CUMULATIVE)
    yield Histograms(HISTOGRAMS, LIMIT, ours_state.observed), ours_state, sdk, sdk_state
    sdk.provider.shutdown()


VALUES = {
    semconv.M_SPAN_DURATION: [0.05, 0.1, 0.7, 4.0, 86400.0, 100000.0, 30.0],
    semconv.WORKFLOW_EFFICIENCY: [0.0, 0.05, 0.33, 0.95, 1.0, 0.5],
    semconv.DASK_SPAN_MEMORY_PEAK: [0.0, 2.0**20, 3e6, 5e12],
}


@pytest.mark.parametrize("temporality", [CUMULATIVE, DELTA])
def test_the_points_are_the_sdk_histograms_points(temporality: AggregationTemporality) -> None:
    """Same name, unit, description, temporality, attributes, buckets (a value on a
    bound counts in that bound's bucket), sum, min, max, exemplars, collection after
    collection. Catches: bisect_right (a value on a bound one bucket up), all-time
    extremes on a delta point, exemplars of unsampled values, repeated exemplars."""
    ours_state, sdk_state = state_of(), state_of()
    ours = Histograms(HISTOGRAMS, ours_state.series_limit, ours_state.observed)
    sdk = Sdk(sdk_state, temporality)
    rounds = [
        {m: samples(m, v, sampled=True) for m, v in VALUES.items()},
        {m: samples(m, v[:2], sampled=False) for m, v in VALUES.items()},
        {},  # a quiet interval: delta has nothing, cumulative the same totals again
        {m: samples(m, v[-2:], sampled=False) + samples(m, v[:1], True) for m, v in VALUES.items()},
    ]
    for batches in rounds:
        for batch in batches.values():
            ours.record(batch, ours_state.labels)
            sdk.record(batch)
        got = metrics_of(ours.inject(empty_batch(), temporality, reader=1))
        want = sdk.collect()
        for spec in SPAN_HISTOGRAMS:
            if spec.name not in want:
                assert spec.name not in got
                continue
            a, b = got[spec.name], want[spec.name]
            assert (
                (a.unit, a.description) == (b.unit, b.description) == (spec.unit, spec.description)
            )
            assert a.data.aggregation_temporality == b.data.aggregation_temporality == temporality
            ours_points = sorted((plain(p) for p in a.data.data_points), key=repr)
            sdk_points = sorted((plain(p) for p in b.data.data_points), key=repr)
            # the SDK puts a zero-id exemplar on unsampled values; ours has none
            for p in sdk_points:
                p["exemplars"] = [e for e in p["exemplars"] if e[2]]
            assert ours_points == sdk_points, spec.name
    sdk.provider.shutdown()


def test_known_values_land_in_known_buckets() -> None:
    state = state_of()
    ours = Histograms(HISTOGRAMS, None, state.observed)
    ours.record(
        samples(semconv.WORKFLOW_EFFICIENCY, [0.05, 0.06, 0.5, 1.0, 0.99], False), state.labels
    )
    (point, other) = sorted(
        metrics_of(ours.inject(empty_batch()))[semconv.WORKFLOW_EFFICIENCY].data.data_points,
        key=lambda p: p.attributes[semconv.DASK_SPAN_NAME],
    )
    # wf-0 has 0.05, 0.5, 0.99; wf-1 has 0.06 and 1.0 (bounds 0.05, 0.1, ... 0.95, 1.0)
    assert dict(point.attributes) == {
        semconv.DASK_SPAN_NAME: "wf-0/load",
        semconv.ATTR_SPAN_ROOT: "wf-0",
        "team": "a",
    }
    assert list(point.bucket_counts) == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0]
    assert (point.count, point.sum, point.min, point.max) == (3, 0.05 + 0.5 + 0.99, 0.05, 0.99)
    assert list(other.bucket_counts) == [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    assert (other.count, other.min, other.max) == (2, 0.06, 1.0)
    assert not point.exemplars and not other.exemplars


def test_a_negative_value_is_left_out_as_the_sdk_leaves_it_out() -> None:
    state = state_of()
    ours = Histograms(HISTOGRAMS, None, state.observed)
    ours.record(samples(semconv.M_SPAN_DURATION, [-1.0], True), state.labels)
    assert semconv.M_SPAN_DURATION not in metrics_of(ours.inject(empty_batch()))


def test_exemplars_only_for_sampled_spans_once_per_cumulative_reader() -> None:
    state = state_of()
    ours = Histograms(HISTOGRAMS, None, state.observed)
    duration = semconv.M_SPAN_DURATION
    ours.record(samples(duration, [2.0], sampled=False), state.labels)
    ours.record(samples(duration, [3.0, 3.5], sampled=True)[1:], state.labels)

    def exemplars(reader: int) -> list[tuple[float, int, int]]:
        (point, *rest) = metrics_of(ours.inject(empty_batch(), reader=reader))[
            duration
        ].data.data_points
        return [(e.value, e.trace_id, e.span_id) for p in (point, *rest) for e in p.exemplars]

    assert exemplars(reader=1) == [(3.5, 7, 101)]
    assert exemplars(reader=1) == []  # offered once, as the SDK's reservoir
    assert exemplars(reader=2) == [(3.5, 7, 101)]  # each reader its own


def overflow(state: MetricsState, data: MetricsData) -> tuple[list[Any], list[Any]]:
    points = metrics_of(data)[semconv.M_SPAN_DURATION].data.data_points
    folded = [p for p in points if p.attributes.get(semconv.SDK_OVERFLOW)]
    kept = [p for p in points if not p.attributes.get(semconv.SDK_OVERFLOW)]
    return kept, folded


def test_past_max_series_the_rest_is_folded_and_counted_exactly(
    both: tuple[Histograms, MetricsState, Sdk, MetricsState],
) -> None:
    """Five workflows, a limit of 3: the first 3 keep their series, the other 2 share the
    ``otel.metric.overflow`` point (as the SDK's), nothing is lost, and 2 are counted
    in ``(series)`` however many collections there are. Catches: folding by hash order,
    counting per collection, counting the overflow point itself, losing values."""
    ours, state, sdk, _ = both
    batch = [
        HistogramSample(semconv.M_SPAN_DURATION, (f"w{i}",), (), 2.0 + i, 7, 100 + i)
        for i in range(5)
    ]
    ours.record(batch, state.labels)
    sdk.record(batch)
    for _ in range(3):
        kept, (folded,) = overflow(state, ours.inject(empty_batch()))
        assert [p.attributes[semconv.DASK_SPAN_NAME] for p in kept] == ["w0", "w1", "w2"]
        assert (folded.count, folded.sum, folded.min, folded.max) == (2, 11.0, 5.0, 6.0)
        assert state.overflow()[semconv.LIMITED_SERIES] == 2
    # the same points as the SDK's overflow (its exemplars appear once: the first round)
    fresh = state_of(LIMIT)
    ours_first = Histograms(HISTOGRAMS, LIMIT, fresh.observed)
    ours_first.record(batch, fresh.labels)
    got = sorted(
        (
            plain(p)
            for p in metrics_of(ours_first.inject(empty_batch()))[
                semconv.M_SPAN_DURATION
            ].data.data_points
        ),
        key=repr,
    )
    want = sorted(
        (plain(p) for p in sdk.collect()[semconv.M_SPAN_DURATION].data.data_points), key=repr
    )
    assert got == want
    # the folded exemplars keep the attributes their series lost
    (point,) = [p for p in want if p["attributes"] == {semconv.SDK_OVERFLOW: True}]
    assert [(e[0], e[3]) for e in point["exemplars"]] == [
        (5.0, ((semconv.DASK_SPAN_NAME, "w3"), (semconv.ATTR_SPAN_ROOT, "w3"))),  # (1, 5]
        (6.0, ((semconv.DASK_SPAN_NAME, "w4"), (semconv.ATTR_SPAN_ROOT, "w4"))),  # (5, 10]
    ]
    # a series past the limit later stays folded; the count grows by one
    ours.record([HistogramSample(semconv.M_SPAN_DURATION, ("w9",), (), 1.0, 0, 0)], state.labels)
    kept, (folded,) = overflow(state, ours.inject(empty_batch()))
    assert len(kept) == LIMIT and folded.count == 3
    assert state.overflow()[semconv.LIMITED_SERIES] == 3


def test_a_delta_reader_folds_per_interval() -> None:
    """As the SDK's delta histogram: the limit applies to the series with values in the
    interval; the count is the most folded at one collection."""
    state = state_of(LIMIT)
    ours = Histograms(HISTOGRAMS, LIMIT, state.observed)

    def interval(names: list[str]) -> tuple[list[str], int]:
        ours.record(
            [HistogramSample(semconv.M_SPAN_DURATION, (n,), (), 1.0, 0, 0) for n in names],
            state.labels,
        )
        kept, folded = overflow(state, ours.inject(empty_batch(), DELTA, reader=1))
        return [p.attributes[semconv.DASK_SPAN_NAME] for p in kept], sum(p.count for p in folded)

    assert interval(["a", "b", "c", "d", "e"]) == (["a", "b", "c"], 2)
    assert state.overflow()[semconv.LIMITED_SERIES] == 2
    assert interval(["d", "e"]) == (["d", "e"], 0)  # within the limit in this interval
    assert interval(["a", "b", "c", "d"]) == (["a", "b", "c"], 1)
    assert state.overflow()[semconv.LIMITED_SERIES] == 2  # the most at one collection


def test_recording_while_a_reader_collects_loses_nothing() -> None:
    state = state_of()
    ours = Histograms(HISTOGRAMS, None, state.observed)
    batch = samples(semconv.M_SPAN_DURATION, [1.0] * 10, sampled=True)
    seen = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            data = ours.inject(empty_batch(), DELTA, reader=1)
            if semconv.M_SPAN_DURATION in metrics_of(data):
                points = metrics_of(data)[semconv.M_SPAN_DURATION].data.data_points
                seen.append(sum(p.count for p in points))

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(300):
        ours.record(batch, state.labels)
    done.set()
    reader.join()
    points = metrics_of(ours.inject(empty_batch(), DELTA, reader=1)).get(semconv.M_SPAN_DURATION)
    rest = sum(p.count for p in points.data.data_points) if points is not None else 0
    assert sum(seen) + rest == 3000


def test_the_labels_at_hand_are_bounded_and_resolved_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A span name's labels are asked of the budget once while at hand; past
    ``MAX_AT_HAND`` the oldest is forgotten and asked again, its series the same."""
    monkeypatch.setattr(histogram, "MAX_AT_HAND", 2)
    state = state_of()
    asked: list[tuple[str, ...]] = []

    def labels(tags: tuple[str, ...], attributes: Any) -> Any:
        asked.append(tags)
        return state.labels(tags, attributes)

    ours = Histograms(HISTOGRAMS, None, state.observed)
    for name in ["a", "a", "b", "c", "a"]:
        tags = (name,)  # a new tuple each time, as each export has its own
        ours.record([HistogramSample(m, tags, (), 1.0, 0, 0) for m in VALUES], labels)
    assert asked == [("a",), ("b",), ("c",), ("a",)]
    points = metrics_of(ours.inject(empty_batch()))[semconv.M_SPAN_DURATION].data.data_points
    assert {p.attributes[semconv.DASK_SPAN_NAME]: p.count for p in points} == {
        "a": 3,
        "b": 1,
        "c": 1,
    }
