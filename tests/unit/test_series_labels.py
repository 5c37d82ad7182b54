"""The memo of a series' labels (``MetricsState.series_labels``) changes nothing: the
same sums and gauges, and the budgets count exactly what they counted without it, when
values overflow, when the budgets forget replaced values, and when the memo is full."""

from __future__ import annotations

import random

import dask.config
import pytest

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.records import Attrs, CounterDelta, GaugeValue
from otel_spans.telemetry import cardinality, metric_state
from otel_spans.telemetry.metric_state import MetricsState


class Unmemoised(MetricsState):
    """The reference: every series' labels computed afresh, as before the memo."""

    def series_labels(self, tags: tuple[str, ...] | None, attributes: Attrs) -> Attrs:
        return self.labels(tags, attributes)


def states(**metrics: object) -> tuple[MetricsState, MetricsState]:
    config = {"metrics": {"attribute-labels": ["team"], **metrics}}
    with dask.config.set({"otel-spans": {}}):
        settings = Settings.from_config(config, environ={})
    return MetricsState(settings.metrics), Unmemoised(settings.metrics)


def deltas(rng: random.Random, n: int) -> list[CounterDelta]:
    """Deltas of spans, prefixes, workers and teams, a few values far too long or
    not valid UTF-8, many series coming again as a live span's do on every tick."""
    out = []
    for _ in range(n):
        root = rng.choice(["etl", "train", "x" * 300, "bad\ud800", *map(str, range(12))])
        tags = (root, rng.choice(["load", "step", "\udcff"]))
        team = rng.choice(["a", "b", "c", "d", "e", "f"])
        prefix = rng.choice(["sum", "load", "p" * 400, *map(str, range(8))])
        attrs: Attrs = (
            (semconv.DASK_TASK_PREFIX, prefix),
            (semconv.ATTR_ACTIVITY, "thread-cpu"),
            ("team", team),
        )
        if rng.random() < 0.2:
            worker = f"tcp://10.0.0.{rng.randrange(6)}:1234"
            out.append(
                CounterDelta(
                    semconv.M_EXECUTE_TIME, None, ((semconv.DASK_WORKER_ADDRESS, worker),), 1.0
                )
            )
        out.append(CounterDelta(semconv.M_EXECUTE_TIME, tags, attrs, rng.random()))
    return out


def same(memo: MetricsState, plain: MetricsState) -> None:
    for metric in (semconv.M_EXECUTE_TIME, semconv.M_SPAN_COST, semconv.M_OPEN_TASKS):
        assert sorted(memo.read(metric)) == sorted(plain.read(metric))
        assert sorted(memo.read_gauge(metric)) == sorted(plain.read_gauge(metric))
    assert memo.overflow() == plain.overflow()
    assert memo.overflow_forgotten() == plain.overflow_forgotten()


@pytest.mark.parametrize("replaced", [cardinality.MAX_REPLACED, 2])
@pytest.mark.parametrize("memo_size", [metric_state.MAX_SERIES_LABELS, 3])
def test_memoised_labels_count_and_sum_as_before(
    monkeypatch: pytest.MonkeyPatch, replaced: int, memo_size: int
) -> None:
    # Small budgets: most values overflow. A budget that forgets its replaced values
    # at once (``replaced``) counts each again: the memo must keep asking for those.
    monkeypatch.setattr(cardinality, "MAX_REPLACED", replaced)
    monkeypatch.setattr(metric_state, "MAX_SERIES_LABELS", memo_size)
    memo, plain = states(
        **{"max-span-names": 6, "max-prefixes": 5, "max-workers": 3},
        **{"max-attribute-values": 4, "cpu-hour-price": 2.5},
    )
    rng = random.Random(7)
    for _ in range(30):  # ticks
        batch = deltas(rng, 40)
        memo.add(batch)
        plain.add(batch)
        gauges = [GaugeValue(semconv.M_OPEN_TASKS, d.tags, d.attributes, 1.0) for d in batch]
        memo.set_gauges(gauges)
        plain.set_gauges(gauges)
        same(memo, plain)
    assert len(memo._series_labels) <= memo_size
    assert memo.overflow()[semconv.DASK_SPAN_NAME] > 0
    assert memo.overflow()[semconv.DASK_TASK_PREFIX] > 0
    if replaced == 2:
        assert memo.overflow_forgotten() > 0


def test_only_labels_every_budget_admitted_are_kept() -> None:
    memo, _ = states(**{"max-span-names": 2})
    admitted: Attrs = ((semconv.ATTR_ACTIVITY, "thread-cpu"),)
    memo.add([CounterDelta(semconv.M_EXECUTE_TIME, ("a",), admitted, 1.0)])
    memo.add([CounterDelta(semconv.M_EXECUTE_TIME, ("b", "c"), admitted, 1.0)])
    assert set(memo._series_labels) == {(("a",), admitted)}
    # "b/c" was replaced: asked again every time, counted once
    for _ in range(3):
        memo.add([CounterDelta(semconv.M_EXECUTE_TIME, ("b", "c"), admitted, 1.0)])
    assert memo.span_names.overflowed == 1
    assert dict(memo.read(semconv.M_EXECUTE_TIME)) == {
        memo.labels(("a",), admitted): 1.0,
        memo.labels(("b", "c"), admitted): 4.0,
    }
    # A value that is the budget's own overflow text is never taken as admitted.
    memo2, _ = states()
    overflow = memo2.span_names.overflow_value
    memo2.add([CounterDelta(semconv.M_EXECUTE_TIME, (overflow,), admitted, 1.0)])
    assert memo2._series_labels == {}
