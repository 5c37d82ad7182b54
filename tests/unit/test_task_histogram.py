"""The self-aggregated task duration histogram: the SDK's data shape, both temporalities."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

from otel_spans.telemetry.task_histogram import BOUNDS, TaskDurationHistogram

ATTRS = (("dask.span.name", "wf"), ("dask.task.prefix", "inc"))


def collected() -> object:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("otel_spans").create_counter("c").add(1)
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


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
    h = TaskDurationHistogram()
    for value in (0.0005, 0.002, 0.002, 0.7, 400.0):
        h.record(ATTRS, value)
    h.record(ATTRS, 0.03, trace_id=7, span_id=9)
    (point,) = points(h.inject(collected()))  # type: ignore[arg-type]
    assert point.count == 6
    assert point.sum == 0.0005 + 0.002 * 2 + 0.7 + 400 + 0.03
    assert point.min == 0.0005 and point.max == 400.0
    assert list(point.explicit_bounds) == list(BOUNDS)
    expected = [0] * (len(BOUNDS) + 1)
    expected[0], expected[1], expected[3], expected[7], expected[-1] = 1, 2, 1, 1, 1
    assert list(point.bucket_counts) == expected
    (exemplar,) = point.exemplars
    assert (exemplar.trace_id, exemplar.span_id, exemplar.value) == (7, 9, 0.03)
    assert dict(point.attributes) == dict(ATTRS)


def test_delta_reports_only_what_is_new_per_reader() -> None:
    h = TaskDurationHistogram()
    delta = AggregationTemporality.DELTA
    h.record(ATTRS, 0.2)
    (first,) = points(h.inject(collected(), delta, reader=1))  # type: ignore[arg-type]
    assert first.count == 1
    assert points(h.inject(collected(), delta, reader=1)) == []  # type: ignore[arg-type]
    h.record(ATTRS, 0.3)
    (second,) = points(h.inject(collected(), delta, reader=1))  # type: ignore[arg-type]
    assert second.count == 1 and second.sum == 0.3
    assert second.start_time_unix_nano >= first.time_unix_nano
    (cumulative,) = points(h.inject(collected(), reader=2))  # type: ignore[arg-type]
    assert cumulative.count == 2


def test_a_delta_point_carries_its_own_intervals_min_and_max() -> None:
    """Not the all-time extremes: a quiet interval after a slow task says so."""
    h = TaskDurationHistogram()
    delta = AggregationTemporality.DELTA
    h.record(ATTRS, 0.2)
    h.record(ATTRS, 5.0)
    (first,) = points(h.inject(collected(), delta, reader=1))  # type: ignore[arg-type]
    assert (first.min, first.max) == (0.2, 5.0)
    h.record(ATTRS, 0.3)
    h.record(ATTRS, 0.4)
    (second,) = points(h.inject(collected(), delta, reader=1))  # type: ignore[arg-type]
    assert (second.count, second.min, second.max) == (2, 0.3, 0.4)
    # another delta reader's first point covers everything so far; cumulative stays
    # all-time; neither disturbs the first reader's interval
    (other,) = points(h.inject(collected(), delta, reader=2))  # type: ignore[arg-type]
    assert (other.count, other.min, other.max) == (4, 0.2, 5.0)
    (total,) = points(h.inject(collected()))  # type: ignore[arg-type]
    assert (total.min, total.max) == (0.2, 5.0)
    h.record(ATTRS, 1.0)
    (third,) = points(h.inject(collected(), delta, reader=1))  # type: ignore[arg-type]
    assert (third.count, third.min, third.max) == (1, 1.0, 1.0)
    (other_second,) = points(h.inject(collected(), delta, reader=2))  # type: ignore[arg-type]
    assert (other_second.min, other_second.max) == (1.0, 1.0)


def test_a_series_new_since_a_delta_readers_first_collection_has_its_own_extremes() -> None:
    h = TaskDurationHistogram()
    delta = AggregationTemporality.DELTA
    h.record(ATTRS, 0.2)
    points(h.inject(collected(), delta, reader=1))  # type: ignore[arg-type]
    other = (("dask.span.name", "wf"), ("dask.task.prefix", "sum"))
    h.record(other, 7.0)
    h.record(other, 3.0)
    (point,) = points(h.inject(collected(), delta, reader=1))  # type: ignore[arg-type]
    assert dict(point.attributes) == dict(other)
    assert (point.min, point.max) == (3.0, 7.0)
