"""Rounds of variants in alternating order: the loop every comparing benchmark runs.

Each round runs every variant once; odd rounds run them in reverse, so that drift over
the run (caches warming, thermal throttling, other load on a shared machine) falls on
the baseline and on the variants alike. Results stay per round, so that a variant is
compared with the baseline of its own round.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def alternating(
    rounds: int, variants: Sequence[str], run: Callable[[str], T]
) -> dict[str, list[T]]:
    """``run(variant)`` for every variant, ``rounds`` times; per variant, one result a
    round, in round order. Progress goes to stderr."""
    results: dict[str, list[T]] = {variant: [] for variant in variants}
    for r in range(rounds):
        order = list(variants)
        if r % 2:
            order.reverse()
        for variant in order:
            results[variant].append(run(variant))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    return results
