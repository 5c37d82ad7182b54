"""Is tonight's value out of line with its own past? Robust statistics, one rule.

A Dask cluster's stage times vary by 10–20 % from run to run, and a history holds the
odd run that hit a busy node or a cold cache: a mean and standard deviation would be
dragged by that one run and then miss the next real regression. The centre is the
**median** of the past runs and their spread the **MAD** (median absolute deviation
from the median) scaled by 1.4826, which estimates the standard deviation of normal
noise and ignores up to half the runs being outliers.

A value's change is measured in that spread, ``z = (value - median) / scale``: the
modified z-score of Iglewicz and Hoaglin, whose usual outlier threshold, 3.5, is
:data:`THRESHOLD`. ``scale`` is never below :data:`RELATIVE_FLOOR` of the median nor
the metric's own floor: a stage that took exactly the same time every night has a MAD
of zero, and without a floor a millisecond more would be infinitely many spreads; and
a history that happened to be quieter than a Dask cluster usually is (10–20 % from run
to run) must not turn tomorrow's ordinary jitter into a verdict. So a change smaller
than 3.5 × 10 % = 35 % of the median is never flagged. The median and MAD of a few
runs are themselves uncertain, which the floor also absorbs: with 20 past runs of
normal noise of 10 %, an unchanged row is flagged about once in 5,000 runs, a row
made 2× slower nearly always, 1.5× slower three times in four
(``tests/report/test_history.py`` measures both).

The confidence statement is distribution-free: were tonight's run one more draw of the
same noise (exchangeable with the past runs), the chance that it would lie as far out
as it does is ``(1 + k) / (n + 1)``, where ``k`` of the ``n`` past runs lay at least as
far on the same side of the median. Twenty past runs can thus say at best "p ≤ 0.05";
the z-score says by how much.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: The MAD of normal noise times this is its standard deviation.
MAD_TO_SIGMA = 1.4826
#: |z| beyond this is a change: regressed (up) or improved (down).
THRESHOLD = 3.5
#: The spread is at least this share of the median ...
RELATIVE_FLOOR = 0.10
#: ... and a history needs this many runs with the row for a verdict on it.
MIN_RUNS = 5

#: What a judgement can say.
REGRESSED, IMPROVED, WITHIN_NOISE = "regressed", "improved", "within noise"
NEW, GONE, FEW_RUNS = "new", "gone", "few runs"


@dataclass(frozen=True)
class Judgement:
    """One value against its history."""

    #: The past values, oldest first (runs without the row left out).
    history: tuple[float, ...]
    #: Tonight's value; None when the row is not in tonight's run.
    current: float | None
    median: float
    mad: float
    #: The spread changes are measured in (see the module docstring).
    scale: float
    #: (current - median) / scale; None without both.
    z: float | None
    verdict: str
    #: Past values at least as far from the median as tonight's, on its side.
    as_far: int
    #: One sentence: how sure the verdict is.
    confidence: str

    @property
    def p(self) -> float | None:
        """The rank p-value of the confidence statement; None without a comparison."""
        if self.z is None or not self.history:
            return None
        return (1 + self.as_far) / (len(self.history) + 1)


@dataclass(frozen=True)
class Summary:
    """A distribution in the same robust terms, for the numbers not judged."""

    n: int
    median: float
    mad: float
    low: float
    high: float


def summarise(values: Sequence[float]) -> Summary | None:
    """Median, MAD and range of ``values``; None when there are none."""
    if not values:
        return None
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    return Summary(len(values), median, mad, min(values), max(values))


def judge(history: Sequence[float], current: float | None, floor: float) -> Judgement:
    """``current`` against ``history``; ``floor`` is the least spread in the metric's
    unit (timer resolution, one byte)."""
    past = tuple(history)
    if not past or current is None:
        verdict = NEW if not past else GONE
        median = statistics.median(past) if past else 0.0
        what = "not in any past run" if not past else f"in {len(past)} past runs, not now"
        return Judgement(past, current, median, 0.0, 0.0, None, verdict, 0, what)
    median = statistics.median(past)
    mad = statistics.median(abs(v - median) for v in past)
    scale = max(MAD_TO_SIGMA * mad, RELATIVE_FLOOR * abs(median), floor)
    z = (current - median) / scale
    if current >= median:
        as_far = sum(1 for v in past if v >= current)
    else:
        as_far = sum(1 for v in past if v <= current)
    n = len(past)
    p = (1 + as_far) / (n + 1)
    side = "higher" if current >= median else "lower"
    if n < MIN_RUNS:
        verdict = FEW_RUNS
        confidence = f"only {n} past runs (a verdict needs {MIN_RUNS})"
    else:
        verdict = WITHIN_NOISE
        if z > THRESHOLD:
            verdict = REGRESSED
        elif z < -THRESHOLD:
            verdict = IMPROVED
        confidence = (
            f"{as_far} of {n} past runs as {side}: p = {p:.2g} were it noise"
            if verdict != WITHIN_NOISE
            else f"|z| ≤ {THRESHOLD}; {as_far} of {n} past runs as {side}"
        )
    return Judgement(past, current, median, mad, scale, z, verdict, as_far, confidence)
