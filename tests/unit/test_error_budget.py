"""The self-protection budget: N errors within the window, not N errors ever."""

from __future__ import annotations

from otel_spans.error_budget import ErrorBudget


def test_spent_once_by_the_error_that_fills_the_window() -> None:
    now = [1000.0]
    budget = ErrorBudget(budget=3, window=10.0, clock=lambda: now[0])
    outcomes = []
    for step in (0.0, 6.0, 6.0, 6.0):  # errors at 0 s, 6 s, 12 s, 18 s: never 3 in 10 s
        now[0] += step
        outcomes.append(budget.spend())
    assert outcomes == [False, False, False, False]
    assert not budget.exhausted
    now[0] += 1.0  # 12 s, 18 s, 19 s: 3 within 10 s
    assert budget.spend() is True
    assert budget.exhausted
    assert budget.spend() is False  # said once; stays exhausted
    assert budget.exhausted
