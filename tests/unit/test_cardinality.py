"""The cardinality budget: first come, first kept; never more than the limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_spans.scheduler.snapshots import growth
from otel_spans.telemetry.cardinality import MAX_REPLACED, CardinalityLimiter


@given(st.lists(st.text(max_size=5)), st.integers(min_value=1, max_value=20))
def test_never_more_than_the_limit_and_admitted_values_stay(values: list[str], limit: int) -> None:
    limiter = CardinalityLimiter(limit)
    out = [limiter(v) for v in values]
    admitted = set(out) - {limiter.overflow_value}
    assert len(admitted) <= limit
    assert admitted <= set(values)  # nothing invented
    first = list(dict.fromkeys(values))[:limit]
    assert admitted == set(first)
    # distinct values replaced, however often each was asked for
    assert limiter.overflowed == len({v for v in values if v not in first})
    assert [limiter(v) for v in first] == first


def test_replaced_values_are_remembered_up_to_the_bound_and_forgetting_is_counted() -> None:
    """Catches: an unbounded memory of replaced values; a forgotten value that comes
    back not counted again, or forgetting left uncounted."""
    limiter = CardinalityLimiter(1)
    assert limiter("kept") == "kept"
    for i in range(MAX_REPLACED + 5):
        assert limiter(f"v{i}") == limiter.overflow_value
    assert (limiter.overflowed, limiter.forgotten) == (MAX_REPLACED + 5, 5)
    for i in range(5, MAX_REPLACED + 5):  # all still remembered: nothing new
        limiter(f"v{i}")
    assert limiter.overflowed == MAX_REPLACED + 5
    limiter("v0")  # forgotten: counted again, and the oldest remembered one leaves
    assert (limiter.overflowed, limiter.forgotten) == (MAX_REPLACED + 6, 6)


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="limit must be >= 1, got 0"):
        CardinalityLimiter(0)


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False)))
def test_growth_is_never_negative_and_sums_to_the_maximum_rise(values: list[float]) -> None:
    seen: dict[str, float] = {}
    total = 0.0
    for value in values:
        for _, delta in growth({"k": value}, seen):
            assert delta > 0
            total += delta
    # a counter fed by growth() rises by every increase and ignores every decrease
    expected, previous = 0.0, 0.0
    for value in values:
        if value > previous:
            expected += value - previous
        previous = value
    assert total == pytest.approx(expected)
